//! Linear attention (LA): `S_t = S_{t−1} + k_t v_tᵀ`, `o_t = S_tᵀ(scale·q_t)`
//! (fla `chunk_linear_attn` / `chunk_simple_gla` with g = None). Token-serial fp64.

use super::{zero_like_grads, MemberGrads, MemberInputs};
use crate::recurrence::problem::{HeadOutputs, HeadSeeds};
use crate::recurrence::tensor::{axpy, dot, Mat};

/// Forward and exact backward; inputs already validated by the caller.
pub(crate) fn forward_backward(x: &MemberInputs, s: &HeadSeeds) -> (HeadOutputs, MemberGrads) {
    let (t_len, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
    let mut st = x.s0.clone();
    let mut states = vec![st.clone()];
    let mut o = Mat::zeros(t_len, vd);
    for t in 0..t_len {
        for c in 0..kd {
            axpy(st.row_mut(c), x.k[(t, c)], x.v.row(t));
            axpy(o.row_mut(t), x.scale * x.q[(t, c)], st.row(c));
        }
        states.push(st.clone());
    }
    // Backward: D = ∂L/∂S_t. The transition is the identity, so D only accumulates q̃ doᵀ.
    let (mut dq, mut dk, mut dv) = zero_like_grads(t_len, kd, vd);
    let mut d = s.dst.clone();
    for t in (0..t_len).rev() {
        let dout = s.d_o.row(t);
        for c in 0..kd {
            axpy(d.row_mut(c), x.scale * x.q[(t, c)], dout);
            dq[(t, c)] = x.scale * dot(states[t + 1].row(c), dout);
            dk[(t, c)] = dot(d.row(c), x.v.row(t));
            axpy(dv.row_mut(t), x.k[(t, c)], d.row(c));
        }
    }
    (HeadOutputs { o, st }, MemberGrads { dq, dk, dv, dg: None, dbeta: None, ds0: d })
}
