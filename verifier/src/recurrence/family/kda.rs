//! Kimi Delta Attention (KDA): channel-wise decay, then the delta rule with β on the whole
//! innovation (fla `kda/naive.py: naive_recurrent_kda`, gdn-math.md §1):
//! `Ŝ = Diag(e^{g_t}) S_{t−1}`, `u = β_t (v_t − Ŝᵀk_t)`, `S_t = Ŝ + k_t uᵀ`, `o_t = S_tᵀ(scale·q_t)`.
//! g `[T, K]`, β `[T]`. Token-serial fp64.

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
    let decay = |t: usize, c: usize| g[(t, c)].exp();
    let mut st = x.s0.clone();
    let mut states = vec![st.clone()];
    let mut o = Mat::zeros(t_len, vd);
    for t in 0..t_len {
        for c in 0..kd {
            let a = decay(t, c);
            st.row_mut(c).iter_mut().for_each(|z| *z *= a);
        }
        let u = innovation(&st, x.k.row(t), x.v.row(t), beta[(t, 0)]);
        for c in 0..kd {
            axpy(st.row_mut(c), x.k[(t, c)], &u);
            axpy(o.row_mut(t), x.scale * x.q[(t, c)], st.row(c));
        }
        states.push(st.clone());
    }
    let (mut dq, mut dk, mut dv) = zero_like_grads(t_len, kd, vd);
    let mut dg = Mat::zeros(t_len, kd);
    let mut dbeta = Mat::zeros(t_len, 1);
    let mut d = s.dst.clone();
    let mut s_hat = Mat::zeros(kd, vd);
    for t in (0..t_len).rev() {
        let (k, v, dout, bt) = (x.k.row(t), x.v.row(t), s.d_o.row(t), beta[(t, 0)]);
        for c in 0..kd {
            let a = decay(t, c);
            for (h, p) in s_hat.row_mut(c).iter_mut().zip(states[t].row(c)) {
                *h = a * p;
            }
        }
        let resid = residual(&s_hat, k, v);
        let u: Vec<f64> = resid.iter().map(|z| bt * z).collect();
        // Output and S_t = Ŝ + k uᵀ.
        let mut du = vec![0.0; vd];
        for c in 0..kd {
            axpy(d.row_mut(c), x.scale * x.q[(t, c)], dout);
            dq[(t, c)] = x.scale * dot(states[t + 1].row(c), dout);
            dk[(t, c)] = dot(d.row(c), &u);
            axpy(&mut du, k[c], d.row(c));
        }
        // u = β (v − Ŝᵀk): dβ = ⟨du, v − Ŝᵀk⟩, dv = β du, dpred = −β du.
        dbeta[(t, 0)] = dot(&du, &resid);
        for j in 0..vd {
            dv[(t, j)] = bt * du[j];
        }
        // pred = Ŝᵀk: dk += Ŝ dpred, dŜ = D + k dpredᵀ; then Ŝ = Diag(a) S_{t−1}.
        for c in 0..kd {
            dk[(t, c)] -= bt * dot(s_hat.row(c), &du);
            let a = decay(t, c);
            let row = d.row_mut(c);
            axpy(row, -bt * k[c], &du);
            dg[(t, c)] = dot(row, s_hat.row(c));
            row.iter_mut().for_each(|z| *z *= a);
        }
    }
    Ok((HeadOutputs { o, st }, MemberGrads { dq, dk, dv, dg: Some(dg), dbeta: Some(dbeta), ds0: d }))
}

/// `β (v − Ŝᵀk)`.
fn innovation(s_hat: &Mat, k: &[f64], v: &[f64], beta: f64) -> Vec<f64> {
    residual(s_hat, k, v).into_iter().map(|z| beta * z).collect()
}

/// `v − Ŝᵀk`.
fn residual(s_hat: &Mat, k: &[f64], v: &[f64]) -> Vec<f64> {
    let mut r = v.to_vec();
    for (c, kc) in k.iter().enumerate() {
        axpy(&mut r, -kc, s_hat.row(c));
    }
    r
}
