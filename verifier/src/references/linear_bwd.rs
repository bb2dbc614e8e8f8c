//! Backward of the batched matmul and of GEMM + bias + activation.
//!
//! * bmm: per batch entry as matmul: dA = dC B^T (depth N, scale |dC| |B|^T), dB = A^T dC
//!   (depth M, scale |A|^T |dC|).
//! * gemm_bias_<act>: z = X W + b, y = act(z); dz = g act'(z), dX = dz W^T, dW = X^T dz,
//!   db = sum_rows dz.
//!
//! Profile of gemm_bias_<act> (first order): z carries gamma(K + 1) s_z with s_z = |X||W| + |b|
//! (the forward's analysis). For GELU and SiLU, act' is Lipschitz with constant L2 (|GELU-tanh''|
//! <= 0.8, |SiLU''| <= 0.5; both checked on a grid in `tests/backward_gradcheck.rs`) and its own
//! evaluation costs a few roundings of terms no larger than T(z) (GELU: 2 + 2 |z| (1 + 0.14 z^2);
//! SiLU: 2 + 2 |z|), so dz carries e = |g| (L2 s_z + T(z)) gamma(K + 12). ReLU's derivative is a
//! step: it is only ambiguous where |z| <= gamma s_z, and there 1 <= s_z / |z|, so e = |g| s_z /
//! |z| bounds that jump everywhere (infinite, i.e. uncharged, at z = 0 exactly). Then with
//! t = |dz| + e: dX scale t |W|^T, depth N + K + 14; dW scale |X|^T t, depth M + K + 14;
//! db scale sum_rows t, depth M + K + 14 (gamma(a) + gamma(b) <= gamma(a + b) covers the sum's
//! own rounding and the propagated error of dz).

use super::linear::{matmul_kernel, mnk, transpose, Act};
use super::{abs_matmul, c, Backward, Dims};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;


fn bmm_bwd<T: Float>(d: &Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (b, m, k, n) = (d.get("Bt"), d.get("M"), d.get("K"), d.get("N"));
    let (mut da, mut db) = (Vec::with_capacity(b * m * k), Vec::with_capacity(b * k * n));
    for t in 0..b {
        let (a, bb, gg) = (&x[0][t * m * k..(t + 1) * m * k], &x[1][t * k * n..(t + 1) * k * n], &g[0][t * m * n..(t + 1) * m * n]);
        da.extend(matmul_kernel(gg, &transpose(bb, k, n), m, n, k));
        db.extend(matmul_kernel(&transpose(a, m, k), gg, k, m, n));
    }
    vec![da, db]
}

/// Backward of `bmm`: gradients of A and B.
pub fn bmm() -> Backward {
    Backward {
        k64: Arc::new(bmm_bwd::<f64>),
        k32: Arc::new(bmm_bwd::<f32>),
        profile: Arc::new(|d, x, g, _| {
            let (b, m, k, n) = (d.get("Bt"), d.get("M"), d.get("K"), d.get("N"));
            let (mut sa, mut sb) = (Vec::with_capacity(b * m * k), Vec::with_capacity(b * k * n));
            for t in 0..b {
                let (a, bb, gg) = (&x[0][t * m * k..(t + 1) * m * k], &x[1][t * k * n..(t + 1) * k * n], &g[0][t * m * n..(t + 1) * m * n]);
                sa.extend(abs_matmul(gg, &transpose(bb, k, n), m, n, k));
                sb.extend(abs_matmul(&transpose(a, m, k), gg, k, m, n));
            }
            vec![ErrorProfile { depth: n, scale: sa }, ErrorProfile { depth: m, scale: sb }]
        }),
    }
}

/// act'(z): ReLU 1 for z > 0 else 0 (NaN stays NaN); GELU (tanh form)
/// 0.5 (1 + t) + 0.5 z (1 - t^2) k (1 + 3 a z^2) with t = tanh(k (z + a z^3)); SiLU
/// s (1 + z (1 - s)) with s = 1 / (1 + e^-z).
pub fn act_deriv<T: Float>(act: Act, z: T) -> T {
    match act {
        Act::Relu => {
            if z.is_nan() {
                z
            } else if z > T::zero() {
                T::one()
            } else {
                T::zero()
            }
        }
        Act::Gelu => {
            let (k, a) = (c::<T>(0.7978845608028654), c::<T>(0.044715));
            let t = (k * (z + a * z * z * z)).tanh();
            let half = c::<T>(0.5);
            half * (T::one() + t) + half * z * (T::one() - t * t) * k * (T::one() + c::<T>(3.0) * a * z * z)
        }
        Act::Silu => {
            let s = T::one() / (T::one() + (-z).exp());
            s * (T::one() + z * (T::one() - s))
        }
    }
}

/// Bound on |act''| used by the profile (ReLU: none, its step is charged separately).
pub fn act_second_bound(act: Act) -> f64 {
    match act {
        Act::Relu => 0.0,
        Act::Gelu => 0.8,
        Act::Silu => 0.5,
    }
}


fn dz<T: Float>(act: Act, d: &Dims, x: &[&[T]], g: &[T]) -> Vec<T> {
    let (m, k, n) = mnk(d);
    let z = matmul_kernel(x[0], x[1], m, k, n);
    (0..m * n).map(|i| g[i] * act_deriv(act, z[i] + x[2][i % n])).collect()
}

fn gba_bwd<T: Float>(act: Act, d: &Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (m, k, n) = mnk(d);
    let dzv = dz(act, d, x, g[0]);
    let dx = matmul_kernel(&dzv, &transpose(x[1], k, n), m, n, k);
    let dw = matmul_kernel(&transpose(x[0], m, k), &dzv, k, m, n);
    let mut db = vec![T::zero(); n];
    for i in 0..m {
        for j in 0..n {
            db[j] = db[j] + dzv[i * n + j];
        }
    }
    vec![dx, dw, db]
}

fn gba_bwd_profile(act: Act, d: &Dims, x: &[&[f64]], g: &[&[f64]]) -> Vec<ErrorProfile> {
    let (m, k, n) = mnk(d);
    let z = matmul_kernel(x[0], x[1], m, k, n);
    let s = abs_matmul(x[0], x[1], m, k, n);
    let mut t = vec![0.0; m * n];
    for i in 0..m * n {
        let (zz, sz, gi) = (z[i] + x[2][i % n], s[i] + x[2][i % n].abs(), g[0][i].abs());
        let e = match act {
            Act::Relu => {
                if zz == 0.0 {
                    f64::INFINITY
                } else {
                    gi * sz / zz.abs()
                }
            }
            Act::Gelu => gi * (act_second_bound(act) * sz + 2.0 + 2.0 * zz.abs() * (1.0 + 0.14 * zz * zz)),
            Act::Silu => gi * (act_second_bound(act) * sz + 2.0 + 2.0 * zz.abs()),
        };
        t[i] = (g[0][i] * act_deriv(act, zz)).abs() + e;
    }
    let mut sb = vec![0.0; n];
    for i in 0..m {
        for j in 0..n {
            sb[j] += t[i * n + j];
        }
    }
    vec![
        ErrorProfile { depth: n + k + 14, scale: abs_matmul(&t, &transpose(x[1], k, n), m, n, k) },
        ErrorProfile { depth: m + k + 14, scale: abs_matmul(&transpose(x[0], m, k), &t, k, m, n) },
        ErrorProfile { depth: m + k + 14, scale: sb },
    ]
}

/// Backward of `gemm_bias_<act>`: gradients of X, W and b.
pub fn gemm_bias_act(act: Act) -> Backward {
    Backward {
        k64: Arc::new(move |d, x, g| gba_bwd::<f64>(act, d, x, g)),
        k32: Arc::new(move |d, x, g| gba_bwd::<f32>(act, d, x, g)),
        profile: Arc::new(move |d, x, g, _| gba_bwd_profile(act, d, x, g)),
    }
}
