//! Backward of scaled dot-product attention (causal or not), o = softmax(c q k^T) v with
//! c = 1/sqrt(D), given g = do[Bt,Lq,Dv]:
//!
//! ```text
//!   dv_j = sum_i p_ij g_i         dp_ij = g_i . v_j          Delta_i = sum_j p_ij dp_ij
//!   ds_ij = p_ij (dp_ij - Delta_i)   dq_i = c sum_j ds_ij k_j   dk_j = c sum_i ds_ij q_i
//! ```
//! (sums over the visible pairs only; checked against central finite differences in
//! `tests/backward_gradcheck.rs`).
//!
//! Profile (first-order, in the style of the forward's): the forward analysis gives p_ij a
//! relative error of at most gamma(D + Lk + 8) pi_i with pi_i = 2 A_i + 2 spread_i + 8
//! (A_i = max_j c sum_d |q_id k_jd|, spread_i = max_j |s_ij - m_i|). With b_ij = sum_t |g_it|
//! |v_jt| (so |dp_ij| <= b_ij) and beta_i = sum_j p_ij b_ij (so |Delta_i| <= beta_i):
//! * dv_jt: gamma(Lq) sum_i p_ij |g_it| + sum_i p_ij |g_it| gamma pi_i
//!   -> scale sum_i p_ij |g_it| (pi_i + 1);
//! * Delta_i: gamma(Dv) beta_i + gamma pi_i beta_i; ds_ij then carries at most
//!   gamma p_ij (pi_i + 2)(b_ij + beta_i) (two more roundings included);
//! * dq_id = c sum_j ds_ij k_jd: scale c sum_j p_ij (pi_i + 3)(b_ij + beta_i) |k_jd|, and dk_jd
//!   likewise over i with |q_id|.
//!
//! Every gradient is charged depth D + Dv + 2 (Lq + Lk) + 12, which dominates the sum of the
//! gammas along each chain (logits, softmax, the Dv-long dot product, the Lq- or Lk-long sums).

use super::{nan_max, Backward, Dims};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

struct Sizes {
    b: usize,
    lq: usize,
    lk: usize,
    dd: usize,
    dv: usize,
}

fn sizes(d: &Dims) -> Sizes {
    Sizes { b: d.get("Bt"), lq: d.get("Lq"), lk: d.get("Lk"), dd: d.get("D"), dv: d.get("Dv") }
}

/// Softmax probabilities p[0..visible] of query `i` of batch `bi` (NaN-propagating max).
fn probs<T: Float>(z: &Sizes, x: &[&[T]], bi: usize, i: usize, visible: usize, c: T) -> Vec<T> {
    let q = &x[0][(bi * z.lq + i) * z.dd..(bi * z.lq + i + 1) * z.dd];
    let mut s = vec![T::zero(); visible];
    let mut m = T::neg_infinity();
    for (j, sj) in s.iter_mut().enumerate() {
        let k = &x[1][(bi * z.lk + j) * z.dd..(bi * z.lk + j + 1) * z.dd];
        let mut acc = T::zero();
        for t in 0..z.dd {
            acc = acc + q[t] * k[t];
        }
        *sj = acc * c;
        m = nan_max(m, *sj);
    }
    let mut den = T::zero();
    for sj in s.iter_mut() {
        *sj = (*sj - m).exp();
        den = den + *sj;
    }
    s.iter().map(|&e| e / den).collect()
}

fn visible(causal: bool, i: usize, lk: usize) -> usize {
    if causal {
        (i + 1).min(lk)
    } else {
        lk
    }
}

fn sdpa_bwd<T: Float>(d: &Dims, x: &[&[T]], g: &[&[T]], causal: bool) -> Vec<Vec<T>> {
    let z = sizes(d);
    let c = T::one() / T::from(z.dd as f64).unwrap_or_else(T::nan).sqrt();
    let mut dq = vec![T::zero(); z.b * z.lq * z.dd];
    let mut dk = vec![T::zero(); z.b * z.lk * z.dd];
    let mut dv = vec![T::zero(); z.b * z.lk * z.dv];
    for bi in 0..z.b {
        for i in 0..z.lq {
            let vis = visible(causal, i, z.lk);
            let p = probs(&z, x, bi, i, vis, c);
            let gi = &g[0][(bi * z.lq + i) * z.dv..(bi * z.lq + i + 1) * z.dv];
            let mut dp = vec![T::zero(); vis];
            let mut delta = T::zero();
            for j in 0..vis {
                let v = &x[2][(bi * z.lk + j) * z.dv..(bi * z.lk + j + 1) * z.dv];
                let mut acc = T::zero();
                for t in 0..z.dv {
                    acc = acc + gi[t] * v[t];
                    let o = &mut dv[(bi * z.lk + j) * z.dv + t];
                    *o = *o + p[j] * gi[t];
                }
                dp[j] = acc;
                delta = delta + p[j] * acc;
            }
            let q = &x[0][(bi * z.lq + i) * z.dd..(bi * z.lq + i + 1) * z.dd];
            for j in 0..vis {
                let ds = p[j] * (dp[j] - delta) * c;
                let k = &x[1][(bi * z.lk + j) * z.dd..(bi * z.lk + j + 1) * z.dd];
                for t in 0..z.dd {
                    let a = &mut dq[(bi * z.lq + i) * z.dd + t];
                    *a = *a + ds * k[t];
                    let b = &mut dk[(bi * z.lk + j) * z.dd + t];
                    *b = *b + ds * q[t];
                }
            }
        }
    }
    vec![dq, dk, dv]
}

fn sdpa_bwd_profile(d: &Dims, x: &[&[f64]], g: &[&[f64]], causal: bool) -> Vec<ErrorProfile> {
    let z = sizes(d);
    let c = 1.0 / (z.dd as f64).sqrt();
    let mut sq = vec![0.0; z.b * z.lq * z.dd];
    let mut sk = vec![0.0; z.b * z.lk * z.dd];
    let mut sv = vec![0.0; z.b * z.lk * z.dv];
    for bi in 0..z.b {
        for i in 0..z.lq {
            let vis = visible(causal, i, z.lk);
            let q = &x[0][(bi * z.lq + i) * z.dd..(bi * z.lq + i + 1) * z.dd];
            let gi = &g[0][(bi * z.lq + i) * z.dv..(bi * z.lq + i + 1) * z.dv];
            let mut s = Vec::with_capacity(vis);
            let mut amax: f64 = 0.0;
            for j in 0..vis {
                let k = &x[1][(bi * z.lk + j) * z.dd..(bi * z.lk + j + 1) * z.dd];
                s.push(q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * c);
                amax = amax.max(q.iter().zip(k).map(|(a, b)| (a * b).abs()).sum::<f64>() * c);
            }
            let m = s.iter().fold(f64::NEG_INFINITY, |a, &v| nan_max(a, v));
            let spread = s.iter().map(|v| (v - m).abs()).fold(0.0, f64::max);
            let pi = 2.0 * amax + 2.0 * spread + 8.0;
            let p = probs(&z, x, bi, i, vis, c);
            let b: Vec<f64> = (0..vis)
                .map(|j| gi.iter().zip(&x[2][(bi * z.lk + j) * z.dv..(bi * z.lk + j + 1) * z.dv]).map(|(a, v)| (a * v).abs()).sum())
                .collect();
            let beta: f64 = (0..vis).map(|j| p[j] * b[j]).sum();
            for j in 0..vis {
                for t in 0..z.dv {
                    sv[(bi * z.lk + j) * z.dv + t] += p[j] * gi[t].abs() * (pi + 1.0);
                }
                let w = c * p[j] * (pi + 3.0) * (b[j] + beta);
                let k = &x[1][(bi * z.lk + j) * z.dd..(bi * z.lk + j + 1) * z.dd];
                for t in 0..z.dd {
                    sq[(bi * z.lq + i) * z.dd + t] += w * k[t].abs();
                    sk[(bi * z.lk + j) * z.dd + t] += w * q[t].abs();
                }
            }
        }
    }
    let depth = z.dd + z.dv + 2 * (z.lq + z.lk) + 12;
    vec![ErrorProfile { depth, scale: sq }, ErrorProfile { depth, scale: sk }, ErrorProfile { depth, scale: sv }]
}

/// Backward of `sdpa` / `sdpa_causal`: gradients of q, k and v.
pub fn sdpa(causal: bool) -> Backward {
    Backward {
        k64: Arc::new(move |d, x, g| sdpa_bwd::<f64>(d, x, g, causal)),
        k32: Arc::new(move |d, x, g| sdpa_bwd::<f32>(d, x, g, causal)),
        profile: Arc::new(move |d, x, g, _| sdpa_bwd_profile(d, x, g, causal)),
    }
}
