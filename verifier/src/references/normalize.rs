//! Row-wise normalisations: softmax, log-softmax, layer norm and RMS norm over the last axis.
//!
//! Profiles (first-order rounding analysis in the style of Higham ch. 3; constants rounded up):
//! * softmax: y_i = e_i / S, e_i = exp(x_i - m). The subtraction and exp give e_i a relative
//!   error of about (|x_i - m| + 3) u, S adds gamma(N) plus the largest such term, the division
//!   one u. Charged as scale_i = y_i (|x_i - m| + max_j |x_j - m| + 4), depth N + 4, which
//!   dominates the sum of those terms for every N >= 1.
//! * log-softmax: y_i = (x_i - m) - ln S; scale_i = |x_i - m| + |ln S| + max_j |x_j - m| + 4 +
//!   |y_i|, depth N + 4.
//! * layer norm: mean error gamma(N) mean|x|, variance relative error gamma(N+3), so
//!   scale_i = |w_i| r (mean|x| + |mu| + 2 |x_i - mu|) + |b_i| + |y_i|, depth N + 6,
//!   with r = 1/sqrt(var + eps).
//! * RMS norm: scale_i = 2 |x_i| r |w_i| + |y_i|, depth N + 5.

use super::{c, nan_max, Backward, DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

/// Epsilon of layer norm and RMS norm (PyTorch's default for LayerNorm).
pub const NORM_EPS: f64 = 1e-5;


fn row_dims(native_n: usize) -> Vec<DimSpec> {
    vec![
        DimSpec { name: "R", native: 64, min: 1, max: 65536, kind: DimKind::Batch },
        DimSpec { name: "N", native: native_n, min: 1, max: 16384, kind: DimKind::Reduction },
    ]
}

fn ok(_: &Dims) -> Result<(), String> {
    Ok(())
}

fn x_input() -> InputSpec {
    InputSpec { name: "x", shape: |d| vec![d.get("R"), d.get("N")], reduction_axis: Some(1), data: true }
}

fn softmax_kernel<T: Float>(d: &Dims, x: &[&[T]], log: bool) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut out = vec![T::zero(); r * n];
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let m = row.iter().fold(T::neg_infinity(), |a, &b| nan_max(a, b));
        let mut s = T::zero();
        for &v in row {
            s = s + (v - m).exp();
        }
        let o = &mut out[i * n..(i + 1) * n];
        if log {
            let ls = s.ln();
            for j in 0..n {
                o[j] = (row[j] - m) - ls;
            }
        } else {
            for j in 0..n {
                o[j] = (row[j] - m).exp() / s;
            }
        }
    }
    vec![out]
}

fn row_stats(row: &[f64]) -> (f64, f64) {
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| nan_max(a, b));
    let spread = row.iter().map(|&v| (v - m).abs()).fold(0.0, |a: f64, b| nan_max(a, b));
    (m, spread)
}

fn softmax_bwd<T: Float>(d: &Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let y = softmax_kernel(d, x, false).remove(0);
    let mut dx = vec![T::zero(); r * n];
    for i in 0..r {
        let (yr, gr) = (&y[i * n..(i + 1) * n], &g[0][i * n..(i + 1) * n]);
        let mut dot = T::zero();
        for j in 0..n {
            dot = dot + yr[j] * gr[j];
        }
        for j in 0..n {
            dx[i * n + j] = yr[j] * (gr[j] - dot);
        }
    }
    vec![dx]
}

/// `softmax` over the last axis of x[R,N]; NaN-propagating max. Backward:
/// dx = y (dy - sum_j y_j dy_j), profile scale_i = y_i (|dy_i| + sum_j y_j |dy_j|)
/// (|x_i - m| + max_j |x_j - m| + 6), depth N + 6.
pub fn softmax() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "softmax",
        summary: "y[R,N] = softmax(x[R,N]) over N",
        dims: row_dims(256),
        constraint: ok,
        inputs: vec![x_input()],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(|d, x| softmax_kernel::<f64>(d, x, false)),
        k32: Arc::new(|d, x| softmax_kernel::<f32>(d, x, false)),
        profile: Arc::new(|d, x, outs| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let (m, spread) = row_stats(row);
                for j in 0..n {
                    scale[i * n + j] = outs[0][i * n + j].abs() * ((row[j] - m).abs() + spread + 4.0);
                }
            }
            vec![ErrorProfile { depth: n + 4, scale }]
        }),
        backward: Some(Backward {
            k64: Arc::new(softmax_bwd::<f64>),
            k32: Arc::new(softmax_bwd::<f32>),
            profile: Arc::new(|d, x, g, _| {
                let (r, n) = d.rows();
                let y = softmax_kernel(d, x, false).remove(0);
                let mut scale = vec![0.0; r * n];
                for i in 0..r {
                    let row = &x[0][i * n..(i + 1) * n];
                    let (m, spread) = row_stats(row);
                    let wsum: f64 = (0..n).map(|j| y[i * n + j] * g[0][i * n + j].abs()).sum();
                    for j in 0..n {
                        let yi = y[i * n + j].abs();
                        scale[i * n + j] = yi * (g[0][i * n + j].abs() + wsum) * ((row[j] - m).abs() + spread + 6.0);
                    }
                }
                vec![ErrorProfile { depth: n + 6, scale }]
            }),
        }),
    }
}

/// `log_softmax` over the last axis of x[R,N].
pub fn log_softmax() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "log_softmax",
        summary: "y[R,N] = log_softmax(x[R,N]) over N",
        dims: row_dims(256),
        constraint: ok,
        inputs: vec![x_input()],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(|d, x| softmax_kernel::<f64>(d, x, true)),
        k32: Arc::new(|d, x| softmax_kernel::<f32>(d, x, true)),
        profile: Arc::new(|d, x, outs| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let (m, spread) = row_stats(row);
                let ls: f64 = row.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
                for j in 0..n {
                    scale[i * n + j] = (row[j] - m).abs() + ls.abs() + spread + 4.0 + outs[0][i * n + j].abs();
                }
            }
            vec![ErrorProfile { depth: n + 4, scale }]
        }),
        backward: Some(super::normalize_bwd::log_softmax()),
    }
}

fn layer_norm_kernel<T: Float>(d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut out = vec![T::zero(); r * n];
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let (mu, rstd) = ln_row(row);
        for j in 0..n {
            out[i * n + j] = (row[j] - mu) * rstd * x[1][j] + x[2][j];
        }
    }
    vec![out]
}

fn rms_norm_kernel<T: Float>(d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let nt = c::<T>(n as f64);
    let eps = c::<T>(NORM_EPS);
    let mut out = vec![T::zero(); r * n];
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let mut q = T::zero();
        for &v in row {
            q = q + v * v;
        }
        let rr = T::one() / (q / nt + eps).sqrt();
        for j in 0..n {
            out[i * n + j] = row[j] * rr * x[1][j];
        }
    }
    vec![out]
}

/// `layer_norm` over the last axis: y = (x - mean) / sqrt(var + 1e-5) * w + b, biased variance.
pub fn layer_norm() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "layer_norm",
        summary: "y[R,N] = (x - mean)/sqrt(var + 1e-5) * w[N] + b[N]",
        dims: row_dims(256),
        constraint: ok,
        inputs: vec![
            x_input(),
            InputSpec { name: "w", shape: |d| vec![d.get("N")], reduction_axis: None, data: false },
            InputSpec { name: "b", shape: |d| vec![d.get("N")], reduction_axis: None, data: false },
        ],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(layer_norm_kernel::<f64>),
        k32: Arc::new(layer_norm_kernel::<f32>),
        profile: Arc::new(|d, x, outs| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let mu = row.iter().sum::<f64>() / n as f64;
                let mabs = row.iter().map(|v| v.abs()).sum::<f64>() / n as f64;
                let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
                let rstd = 1.0 / (var + NORM_EPS).sqrt();
                for j in 0..n {
                    scale[i * n + j] = x[1][j].abs() * rstd * (mabs + mu.abs() + 2.0 * (row[j] - mu).abs())
                        + x[2][j].abs()
                        + outs[0][i * n + j].abs();
                }
            }
            vec![ErrorProfile { depth: n + 6, scale }]
        }),
        backward: Some(super::normalize_bwd::layer_norm()),
    }
}

/// `rms_norm` over the last axis: y = x / sqrt(mean(x^2) + 1e-5) * w.
pub fn rms_norm() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "rms_norm",
        summary: "y[R,N] = x / sqrt(mean(x^2) + 1e-5) * w[N]",
        dims: row_dims(256),
        constraint: ok,
        inputs: vec![x_input(), InputSpec { name: "w", shape: |d| vec![d.get("N")], reduction_axis: None, data: false }],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(rms_norm_kernel::<f64>),
        k32: Arc::new(rms_norm_kernel::<f32>),
        profile: Arc::new(|d, x, outs| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let row = &x[0][i * n..(i + 1) * n];
                let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
                let rr = 1.0 / (ms + NORM_EPS).sqrt();
                for j in 0..n {
                    scale[i * n + j] = 2.0 * row[j].abs() * rr * x[1][j].abs() + outs[0][i * n + j].abs();
                }
            }
            vec![ErrorProfile { depth: n + 5, scale }]
        }),
        backward: Some(super::normalize_bwd::rms_norm()),
    }
}

/// Mean and r = 1/sqrt(var + eps) of one row, two passes (the sum, then the squared deviations
/// from the mean), as the layer-norm kernel and its backward compute them.
pub(super) fn ln_row<T: Float>(row: &[T]) -> (T, T) {
    let nt = c::<T>(row.len() as f64);
    let mut s = T::zero();
    for &v in row {
        s = s + v;
    }
    let mu = s / nt;
    let mut q = T::zero();
    for &v in row {
        q = q + (v - mu) * (v - mu);
    }
    (mu, T::one() / (q / nt + c::<T>(NORM_EPS)).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn d(r: usize, n: usize) -> Dims {
        Dims(vec![("R".into(), r), ("N".into(), n)])
    }

    #[test]
    fn softmax_rows_sum_to_one_and_nan_propagates() {
        let op = softmax();
        let x = Tensor::f64(vec![2, 3], vec![1.0, 2.0, 3.0, 0.0, f64::NAN, 1.0]);
        let y = op.forward(&d(2, 3), &[x]).unwrap().outputs[0].to_f64_vec();
        assert!((y[0] + y[1] + y[2] - 1.0).abs() < 1e-15);
        assert!(y[3..].iter().all(|v| v.is_nan()));
    }

    #[test]
    fn log_softmax_is_log_of_softmax() {
        let x = Tensor::f64(vec![1, 4], vec![0.5, -1.0, 2.0, 0.0]);
        let a = softmax().forward(&d(1, 4), &[x.clone()]).unwrap().outputs[0].to_f64_vec();
        let b = log_softmax().forward(&d(1, 4), &[x]).unwrap().outputs[0].to_f64_vec();
        for (p, l) in a.iter().zip(&b) {
            assert!((p.ln() - l).abs() < 1e-14);
        }
    }

    #[test]
    fn layer_norm_zero_mean_unit_var() {
        let x = Tensor::f64(vec![1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let w = Tensor::f64(vec![4], vec![1.0; 4]);
        let b = Tensor::f64(vec![4], vec![0.0; 4]);
        let y = layer_norm().forward(&d(1, 4), &[x, w, b]).unwrap().outputs[0].to_f64_vec();
        let mean: f64 = y.iter().sum::<f64>() / 4.0;
        let var: f64 = y.iter().map(|v| v * v).sum::<f64>() / 4.0;
        assert!(mean.abs() < 1e-15);
        assert!((var - 1.25 / (1.25 + NORM_EPS)).abs() < 1e-12);
    }
}
