//! Gated linear attention (GLA): `S_t = Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ`, `o_t = S_tᵀ(scale·q_t)`,
//! channel-wise g `[T, K]` (fla `chunk_gla`, `gla/naive.py`). Token-serial fp64.

use super::{zero_like_grads, MemberGrads, MemberInputs};
use crate::recurrence::problem::{HeadOutputs, HeadSeeds};
use crate::recurrence::tensor::{axpy, dot, Mat};
use crate::recurrence::RecurrenceError;

/// Forward and exact backward; shapes already validated by the caller (g is `[T, K]`).
///
/// Errors: [`RecurrenceError::Missing`] if g is absent.
pub(crate) fn forward_backward(x: &MemberInputs, s: &HeadSeeds) -> Result<(HeadOutputs, MemberGrads), RecurrenceError> {
    let g = x.g.as_ref().ok_or_else(|| RecurrenceError::Missing("g".into()))?;
    let (t_len, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
    let mut st = x.s0.clone();
    let mut states = vec![st.clone()];
    let mut o = Mat::zeros(t_len, vd);
    for t in 0..t_len {
        for c in 0..kd {
            let a = g[(t, c)].exp();
            let row = st.row_mut(c);
            row.iter_mut().for_each(|z| *z *= a);
            axpy(row, x.k[(t, c)], x.v.row(t));
            axpy(o.row_mut(t), x.scale * x.q[(t, c)], st.row(c));
        }
        states.push(st.clone());
    }
    // Backward: D_{t−1} = Diag(a_t) D_t; dg_t,c = a_c Σ_v D_cv S_{t−1,cv}.
    let (mut dq, mut dk, mut dv) = zero_like_grads(t_len, kd, vd);
    let mut dg = Mat::zeros(t_len, kd);
    let mut d = s.dst.clone();
    for t in (0..t_len).rev() {
        let dout = s.d_o.row(t);
        for c in 0..kd {
            let a = g[(t, c)].exp();
            axpy(d.row_mut(c), x.scale * x.q[(t, c)], dout);
            dq[(t, c)] = x.scale * dot(states[t + 1].row(c), dout);
            dk[(t, c)] = dot(d.row(c), x.v.row(t));
            axpy(dv.row_mut(t), x.k[(t, c)], d.row(c));
            dg[(t, c)] = a * dot(d.row(c), states[t].row(c));
            d.row_mut(c).iter_mut().for_each(|z| *z *= a);
        }
    }
    Ok((HeadOutputs { o, st }, MemberGrads { dq, dk, dv, dg: Some(dg), dbeta: None, ds0: d }))
}
