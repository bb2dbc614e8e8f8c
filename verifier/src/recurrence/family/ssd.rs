//! SSD / Mamba-2 (scalar-gated linear attention): `S_t = e^{g_t} S_{t−1} + k_t v_tᵀ`,
//! `o_t = S_tᵀ(scale·q_t)`, one log-decay per token and head, g `[T]` (fla `chunk_simple_gla`
//! with g `[B,T,H]`; Mamba-2's dt is assumed folded into v). Token-serial fp64.

use super::{zero_like_grads, MemberGrads, MemberInputs};
use crate::recurrence::problem::{HeadOutputs, HeadSeeds};
use crate::recurrence::tensor::{axpy, dot, Mat};
use crate::recurrence::RecurrenceError;

/// Forward and exact backward; shapes already validated by the caller (g is `[T, 1]`).
///
/// Errors: [`RecurrenceError::Missing`] if g is absent.
pub(crate) fn forward_backward(x: &MemberInputs, s: &HeadSeeds) -> Result<(HeadOutputs, MemberGrads), RecurrenceError> {
    let g = x.g.as_ref().ok_or_else(|| RecurrenceError::Missing("g".into()))?;
    let (t_len, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
    let mut st = x.s0.clone();
    let mut states = vec![st.clone()];
    let mut o = Mat::zeros(t_len, vd);
    for t in 0..t_len {
        let a = g[(t, 0)].exp();
        st.data.iter_mut().for_each(|z| *z *= a);
        for c in 0..kd {
            axpy(st.row_mut(c), x.k[(t, c)], x.v.row(t));
            axpy(o.row_mut(t), x.scale * x.q[(t, c)], st.row(c));
        }
        states.push(st.clone());
    }
    // Backward: D_{t−1} = a_t D_t; dg_t = a_t ⟨D_t, S_{t−1}⟩ (a scalar per token).
    let (mut dq, mut dk, mut dv) = zero_like_grads(t_len, kd, vd);
    let mut dg = Mat::zeros(t_len, 1);
    let mut d = s.dst.clone();
    for t in (0..t_len).rev() {
        let dout = s.d_o.row(t);
        let a = g[(t, 0)].exp();
        for c in 0..kd {
            axpy(d.row_mut(c), x.scale * x.q[(t, c)], dout);
            dq[(t, c)] = x.scale * dot(states[t + 1].row(c), dout);
            dk[(t, c)] = dot(d.row(c), x.v.row(t));
            axpy(dv.row_mut(t), x.k[(t, c)], d.row(c));
        }
        dg[(t, 0)] = a * dot(&d.data, &states[t].data);
        d.data.iter_mut().for_each(|z| *z *= a);
    }
    Ok((HeadOutputs { o, st }, MemberGrads { dq, dk, dv, dg: Some(dg), dbeta: None, ds0: d }))
}
