//! Backward of the row normalisations: log-softmax, layer norm and RMS norm (over the last axis
//! of x[R,N]; `g` is the output gradient dy[R,N]).
//!
//! Formulas (each checked against central finite differences in `tests/backward_gradcheck.rs`):
//! * log-softmax: dx_j = g_j - p_j G, p = softmax(x), G = sum_k g_k.
//! * layer norm, with xh = (x - mu) r, r = 1/sqrt(var + eps), gh = g w:
//!   dx_j = r (gh_j - mean(gh) - xh_j mean(gh xh)); dw_j = sum_rows g xh; db_j = sum_rows g.
//! * RMS norm, with r = 1/sqrt(mean(x^2) + eps), gh = g w:
//!   dx_j = r gh_j - x_j r^3 mean(gh x); dw_j = sum_rows g x r.
//!
//! Profiles (first-order rounding analysis as in the forward modules; constants rounded up, so
//! `gamma(depth) scale` dominates the sum of the charged terms, using gamma(a) + gamma(b) <=
//! gamma(a + b)):
//! * log-softmax: G carries gamma(N) sum|g|; p_j a relative error of (|x_j - m| + spread + 4) u
//!   (the forward softmax analysis); the product and the difference two more roundings:
//!   scale_j = |g_j| + p_j sum|g| (|x_j - m| + spread + 6), depth N + 6.
//! * layer norm: from the forward analysis, xh_k carries gamma(N + 6) c_k with
//!   c_k = r (mean|x| + |mu| + 2 |x_k - mu|), and r a relative gamma(N + 5). With A = mean|gh|,
//!   B = mean|gh xh|, C = mean(|gh| c): dx_j error <= gamma(N + 10) r (2 (|gh_j| + A + |xh_j| B) +
//!   c_j B + |xh_j| C); dw_j = sum_i g_ij xh_ij: scale sum_i |g_ij| (|xh_ij| + c_ij), depth
//!   R + N + 7; db_j: scale sum_i |g_ij|, depth R.
//! * RMS norm: r carries a relative gamma(N + 4), r^3 three times that plus 2 u, the mean
//!   E = mean|gh x| gamma(N + 2): dx_j scale 2 r |gh_j| + 5 r^3 |x_j| E + |dx_j|, depth N + 8;
//!   dw_j: scale 2 sum_i |g_ij x_ij| r_i, depth R + N + 6.

use super::normalize::{ln_row, NORM_EPS};
use super::{c, nan_max, Backward};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;


/// Row max (NaN-propagating) and the largest |x_j - m| of the row.
fn stats<T: Float>(row: &[T]) -> (T, T) {
    let m = row.iter().fold(T::neg_infinity(), |a, &b| nan_max(a, b));
    let spread = row.iter().map(|&v| (v - m).abs()).fold(T::zero(), |a, b| nan_max(a, b));
    (m, spread)
}

fn log_softmax_bwd<T: Float>(d: &super::Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut dx = vec![T::zero(); r * n];
    for i in 0..r {
        let (row, gr) = (&x[0][i * n..(i + 1) * n], &g[0][i * n..(i + 1) * n]);
        let (m, _) = stats(row);
        let mut s = T::zero();
        let mut gs = T::zero();
        for j in 0..n {
            s = s + (row[j] - m).exp();
            gs = gs + gr[j];
        }
        for j in 0..n {
            dx[i * n + j] = gr[j] - (row[j] - m).exp() / s * gs;
        }
    }
    vec![dx]
}

/// Backward of `log_softmax`.
pub fn log_softmax() -> Backward {
    Backward {
        k64: Arc::new(log_softmax_bwd::<f64>),
        k32: Arc::new(log_softmax_bwd::<f32>),
        profile: Arc::new(|d, x, g, _| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let (row, gr) = (&x[0][i * n..(i + 1) * n], &g[0][i * n..(i + 1) * n]);
                let (m, spread) = stats(row);
                let s: f64 = row.iter().map(|&v| (v - m).exp()).sum();
                let ga: f64 = gr.iter().map(|v| v.abs()).sum();
                for j in 0..n {
                    let p = (row[j] - m).exp() / s;
                    scale[i * n + j] = gr[j].abs() + p * ga * ((row[j] - m).abs() + spread + 6.0);
                }
            }
            vec![ErrorProfile { depth: n + 6, scale }]
        }),
    }
}


fn layer_norm_bwd<T: Float>(d: &super::Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let nt = c::<T>(n as f64);
    let (w, gy) = (x[1], g[0]);
    let mut dx = vec![T::zero(); r * n];
    let mut dw = vec![T::zero(); n];
    let mut db = vec![T::zero(); n];
    let mut xh = vec![T::zero(); n];
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let (mu, rs) = ln_row(row);
        let (mut m1, mut m2) = (T::zero(), T::zero());
        for j in 0..n {
            xh[j] = (row[j] - mu) * rs;
            let gh = gy[i * n + j] * w[j];
            m1 = m1 + gh;
            m2 = m2 + gh * xh[j];
            dw[j] = dw[j] + gy[i * n + j] * xh[j];
            db[j] = db[j] + gy[i * n + j];
        }
        let (m1, m2) = (m1 / nt, m2 / nt);
        for j in 0..n {
            dx[i * n + j] = rs * (gy[i * n + j] * w[j] - m1 - xh[j] * m2);
        }
    }
    vec![dx, dw, db]
}

/// Backward of `layer_norm` (gradients of x, w and b).
pub fn layer_norm() -> Backward {
    Backward {
        k64: Arc::new(layer_norm_bwd::<f64>),
        k32: Arc::new(layer_norm_bwd::<f32>),
        profile: Arc::new(|d, x, g, _| {
            let (r, n) = d.rows();
            let (w, gy) = (x[1], g[0]);
            let mut sx = vec![0.0; r * n];
            let mut sw = vec![0.0; n];
            let mut sb = vec![0.0; n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let (mu, rs) = ln_row(row);
                let mabs = row.iter().map(|v| v.abs()).sum::<f64>() / n as f64;
                let ck: Vec<f64> = row.iter().map(|&v| rs * (mabs + mu.abs() + 2.0 * (v - mu).abs())).collect();
                let xh: Vec<f64> = row.iter().map(|&v| (v - mu) * rs).collect();
                let gh: Vec<f64> = (0..n).map(|j| (gy[i * n + j] * w[j]).abs()).collect();
                let a = gh.iter().sum::<f64>() / n as f64;
                let b = (0..n).map(|j| gh[j] * xh[j].abs()).sum::<f64>() / n as f64;
                let cc = (0..n).map(|j| gh[j] * ck[j]).sum::<f64>() / n as f64;
                for j in 0..n {
                    sx[i * n + j] = rs * (2.0 * (gh[j] + a + xh[j].abs() * b) + ck[j] * b + xh[j].abs() * cc);
                    sw[j] += gy[i * n + j].abs() * (xh[j].abs() + ck[j]);
                    sb[j] += gy[i * n + j].abs();
                }
            }
            vec![
                ErrorProfile { depth: n + 10, scale: sx },
                ErrorProfile { depth: r + n + 7, scale: sw },
                ErrorProfile { depth: r, scale: sb },
            ]
        }),
    }
}

fn rms_r<T: Float>(row: &[T]) -> T {
    let mut q = T::zero();
    for &v in row {
        q = q + v * v;
    }
    T::one() / (q / c::<T>(row.len() as f64) + c::<T>(NORM_EPS)).sqrt()
}

fn rms_norm_bwd<T: Float>(d: &super::Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let (w, gy) = (x[1], g[0]);
    let mut dx = vec![T::zero(); r * n];
    let mut dw = vec![T::zero(); n];
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let rr = rms_r(row);
        let mut m = T::zero();
        for j in 0..n {
            m = m + gy[i * n + j] * w[j] * row[j];
            dw[j] = dw[j] + gy[i * n + j] * row[j] * rr;
        }
        let k = rr * rr * rr * (m / c::<T>(n as f64));
        for j in 0..n {
            dx[i * n + j] = rr * gy[i * n + j] * w[j] - row[j] * k;
        }
    }
    vec![dx, dw]
}

/// Backward of `rms_norm` (gradients of x and w).
pub fn rms_norm() -> Backward {
    Backward {
        k64: Arc::new(rms_norm_bwd::<f64>),
        k32: Arc::new(rms_norm_bwd::<f32>),
        profile: Arc::new(|d, x, g, outs| {
            let (r, n) = d.rows();
            let (w, gy) = (x[1], g[0]);
            let mut sx = vec![0.0; r * n];
            let mut sw = vec![0.0; n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let rr = rms_r(row);
                let e = (0..n).map(|j| (gy[i * n + j] * w[j] * row[j]).abs()).sum::<f64>() / n as f64;
                for j in 0..n {
                    let gh = (gy[i * n + j] * w[j]).abs();
                    sx[i * n + j] = 2.0 * rr * gh + 5.0 * rr * rr * rr * row[j].abs() * e + outs[0][i * n + j].abs();
                    sw[j] += 2.0 * (gy[i * n + j] * row[j]).abs() * rr;
                }
            }
            vec![ErrorProfile { depth: n + 8, scale: sx }, ErrorProfile { depth: r + n + 6, scale: sw }]
        }),
    }
}
