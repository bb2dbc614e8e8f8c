//! Gated DeltaNet (GDN): scalar decay per token and head, then the delta rule with β on the
//! whole innovation (fla `gated_delta_rule/naive.py: naive_recurrent_gated_delta_rule`):
//! `Ŝ = e^{g_t} S_{t−1}`, `u = β_t (v_t − Ŝᵀk_t)`, `S_t = Ŝ + k_t uᵀ`, `o_t = S_tᵀ(scale·q_t)`.
//! g `[T]`, β `[T]`. Token-serial fp64.

use super::{zero_like_grads, MemberGrads, MemberInputs};
use crate::recurrence::problem::{HeadOutputs, HeadSeeds};
use crate::recurrence::tensor::{axpy, dot, Mat};
use crate::recurrence::RecurrenceError;

/// Forward and exact backward; shapes already validated by the caller.
///
/// Errors: [`RecurrenceError::Missing`] if g or β is absent.
pub(crate) fn forward_backward(x: &MemberInputs, s: &HeadSeeds) -> Result<(HeadOutputs, MemberGrads), RecurrenceError> {
    let g = x.g.as_ref().ok_or_else(|| RecurrenceError::Missing("g".into()))?;
    let beta = x.beta.as_ref().ok_or_else(|| RecurrenceError::Missing("beta".into()))?;
    let (t_len, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
    let mut st = x.s0.clone();
    let mut states = vec![st.clone()];
    let mut o = Mat::zeros(t_len, vd);
    for t in 0..t_len {
        let a = g[(t, 0)].exp();
        st.data.iter_mut().for_each(|z| *z *= a);
        // The read-out uses the decayed state, then the innovation is scaled by β.
        let mut u = x.v.row(t).to_vec();
        for c in 0..kd {
            axpy(&mut u, -x.k[(t, c)], st.row(c));
        }
        u.iter_mut().for_each(|z| *z *= beta[(t, 0)]);
        for c in 0..kd {
            axpy(st.row_mut(c), x.k[(t, c)], &u);
            axpy(o.row_mut(t), x.scale * x.q[(t, c)], st.row(c));
        }
        states.push(st.clone());
    }
    let (mut dq, mut dk, mut dv) = zero_like_grads(t_len, kd, vd);
    let mut dg = Mat::zeros(t_len, 1);
    let mut dbeta = Mat::zeros(t_len, 1);
    let mut d = s.dst.clone();
    for t in (0..t_len).rev() {
        let (k, dout, bt) = (x.k.row(t), s.d_o.row(t), beta[(t, 0)]);
        let a = g[(t, 0)].exp();
        let s_hat = states[t].scaled(a);
        let mut resid = x.v.row(t).to_vec();
        for c in 0..kd {
            axpy(&mut resid, -k[c], s_hat.row(c));
        }
        let mut du = vec![0.0; vd];
        for c in 0..kd {
            axpy(d.row_mut(c), x.scale * x.q[(t, c)], dout);
            dq[(t, c)] = x.scale * dot(states[t + 1].row(c), dout);
            dk[(t, c)] = bt * dot(d.row(c), &resid);
            axpy(&mut du, k[c], d.row(c));
        }
        dbeta[(t, 0)] = dot(&du, &resid);
        for j in 0..vd {
            dv[(t, j)] = bt * du[j];
        }
        // Through the read-out Ŝᵀk and Ŝ = a S_{t−1}: dŜ = D − β k duᵀ, dg = a⟨dŜ, S_{t−1}⟩.
        let mut dgt = 0.0;
        for c in 0..kd {
            dk[(t, c)] -= bt * dot(s_hat.row(c), &du);
            let row = d.row_mut(c);
            axpy(row, -bt * k[c], &du);
            dgt += dot(row, s_hat.row(c));
            row.iter_mut().for_each(|z| *z *= a);
        }
        dg[(t, 0)] = dgt;
    }
    Ok((HeadOutputs { o, st }, MemberGrads { dq, dk, dv, dg: Some(dg), dbeta: Some(dbeta), ds0: d }))
}
