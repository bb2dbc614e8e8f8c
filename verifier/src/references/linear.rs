//! Matrix products: matmul, batched matmul and GEMM + bias + activation.
//!
//! Error profiles: a length-K dot product has |error| <= gamma(K) sum_k |a_k b_k|
//! (Higham, *Accuracy and Stability*, eq. 3.4), so `scale = |A| |B|` and `depth = K`.

use super::{abs_matmul, c, Backward, DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

/// Row-major C[m,n] = A[m,k] B[k,n], accumulating each output in ascending k.
/// The i-p-j loop order keeps the per-output summation order k = 0..K (identical results to
/// the naive i-j-p order) while walking B row-wise.
pub fn matmul_kernel<T: Float>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let mut out = vec![T::zero(); m * n];
    for i in 0..m {
        let o = &mut out[i * n..(i + 1) * n];
        for p in 0..k {
            let x = a[i * k + p];
            let row = &b[p * n..(p + 1) * n];
            for j in 0..n {
                o[j] = o[j] + x * row[j];
            }
        }
    }
    out
}

pub(super) fn transpose<T: Copy>(a: &[T], r: usize, cc: usize) -> Vec<T> {
    let mut t = Vec::with_capacity(a.len());
    for j in 0..cc {
        for i in 0..r {
            t.push(a[i * cc + j]);
        }
    }
    t
}

pub(super) fn mnk(d: &Dims) -> (usize, usize, usize) {
    (d.get("M"), d.get("K"), d.get("N"))
}

fn mm_dims() -> Vec<DimSpec> {
    vec![
        DimSpec { name: "M", native: 64, min: 1, max: 4096, kind: DimKind::Free },
        DimSpec { name: "K", native: 64, min: 1, max: 8192, kind: DimKind::Reduction },
        DimSpec { name: "N", native: 64, min: 1, max: 4096, kind: DimKind::Free },
    ]
}

fn ok(_: &Dims) -> Result<(), String> {
    Ok(())
}

fn mm_backward<T: Float>(d: &Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (m, k, n) = mnk(d);
    // dA = dY B^T  [m,k];  dB = A^T dY  [k,n]
    let bt = transpose(x[1], k, n);
    let at = transpose(x[0], m, k);
    vec![matmul_kernel(g[0], &bt, m, n, k), matmul_kernel(&at, g[0], k, m, n)]
}

/// `matmul`: C[M,N] = A[M,K] B[K,N]. Backward: dA = dC B^T (depth N), dB = A^T dC (depth M).
pub fn matmul() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "matmul",
        summary: "C[M,N] = A[M,K] @ B[K,N]",
        dims: mm_dims(),
        constraint: ok,
        inputs: vec![
            InputSpec { name: "A", shape: |d| vec![d.get("M"), d.get("K")], reduction_axis: Some(1), data: true },
            InputSpec { name: "B", shape: |d| vec![d.get("K"), d.get("N")], reduction_axis: Some(0), data: true },
        ],
        outputs: vec![|d| vec![d.get("M"), d.get("N")]],
        k64: Arc::new(|d, x| {
            let (m, k, n) = mnk(d);
            vec![matmul_kernel(x[0], x[1], m, k, n)]
        }),
        k32: Arc::new(|d, x| {
            let (m, k, n) = mnk(d);
            vec![matmul_kernel(x[0], x[1], m, k, n)]
        }),
        profile: Arc::new(|d, x, _| {
            let (m, k, n) = mnk(d);
            vec![ErrorProfile { depth: k, scale: abs_matmul(x[0], x[1], m, k, n) }]
        }),
        backward: Some(Backward {
            k64: Arc::new(mm_backward::<f64>),
            k32: Arc::new(mm_backward::<f32>),
            profile: Arc::new(|d, x, g, _| {
                let (m, k, n) = mnk(d);
                let bt = transpose(x[1], k, n);
                let at = transpose(x[0], m, k);
                vec![
                    ErrorProfile { depth: n, scale: abs_matmul(g[0], &bt, m, n, k) },
                    ErrorProfile { depth: m, scale: abs_matmul(&at, g[0], k, m, n) },
                ]
            }),
        }),
    }
}

fn bmm_kernel<T: Float>(d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (b, m, k, n) = (d.get("Bt"), d.get("M"), d.get("K"), d.get("N"));
    let mut out = Vec::with_capacity(b * m * n);
    for t in 0..b {
        out.extend(matmul_kernel(&x[0][t * m * k..(t + 1) * m * k], &x[1][t * k * n..(t + 1) * k * n], m, k, n));
    }
    vec![out]
}

/// `bmm`: C[Bt,M,N] = A[Bt,M,K] B[Bt,K,N] (independent matmuls per batch entry).
pub fn bmm() -> Op {
    let mut dims = vec![DimSpec { name: "Bt", native: 4, min: 1, max: 64, kind: DimKind::Batch }];
    dims.extend(mm_dims().into_iter().map(|mut s| {
        s.native = 32;
        s.max = s.max.min(1024);
        s
    }));
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "bmm",
        summary: "C[Bt,M,N] = A[Bt,M,K] @ B[Bt,K,N]",
        dims,
        constraint: ok,
        inputs: vec![
            InputSpec { name: "A", shape: |d| vec![d.get("Bt"), d.get("M"), d.get("K")], reduction_axis: Some(2), data: true },
            InputSpec { name: "B", shape: |d| vec![d.get("Bt"), d.get("K"), d.get("N")], reduction_axis: Some(1), data: true },
        ],
        outputs: vec![|d| vec![d.get("Bt"), d.get("M"), d.get("N")]],
        k64: Arc::new(bmm_kernel::<f64>),
        k32: Arc::new(bmm_kernel::<f32>),
        profile: Arc::new(|d, x, _| {
            let (b, m, k, n) = (d.get("Bt"), d.get("M"), d.get("K"), d.get("N"));
            let mut s = Vec::with_capacity(b * m * n);
            for t in 0..b {
                s.extend(abs_matmul(&x[0][t * m * k..(t + 1) * m * k], &x[1][t * k * n..(t + 1) * k * n], m, k, n));
            }
            vec![ErrorProfile { depth: k, scale: s }]
        }),
        backward: Some(super::linear_bwd::bmm()),
    }
}

/// Activation of [`gemm_bias_act`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// max(z, 0).
    Relu,
    /// GELU in its tanh form: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
    Gelu,
    /// z * sigmoid(z).
    Silu,
}

impl Act {
    fn apply<T: Float>(self, z: T) -> T {
        match self {
            Act::Relu => {
                if z.is_nan() {
                    z
                } else if z > T::zero() {
                    z
                } else {
                    T::zero()
                }
            }
            Act::Gelu => {
                let inner = c::<T>(0.7978845608028654) * (z + c::<T>(0.044715) * z * z * z);
                c::<T>(0.5) * z * (T::one() + inner.tanh())
            }
            Act::Silu => z / (T::one() + (-z).exp()),
        }
    }
    /// Bound on |act'(z)| (relu 1; GELU-tanh < 1.13; SiLU < 1.1).
    fn lipschitz(self) -> f64 {
        match self {
            Act::Relu => 1.0,
            Act::Gelu => 1.13,
            Act::Silu => 1.1,
        }
    }
}

fn gba_kernel<T: Float>(act: Act, d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (m, k, n) = mnk(d);
    let mut z = matmul_kernel(x[0], x[1], m, k, n);
    for i in 0..m {
        for j in 0..n {
            let v = z[i * n + j] + x[2][j];
            z[i * n + j] = act.apply(v);
        }
    }
    vec![z]
}

/// `gemm_bias_<act>`: Y[M,N] = act(X[M,K] W[K,N] + b[N]).
/// Profile: the pre-activation z has scale |X||W| + |b| (depth K+1); the activation scales
/// that error by at most its Lipschitz constant L and adds a few roundings of its own,
/// charged as |z| + |y| over 12 extra steps: scale = L (|X||W| + |b|) + |z| + |y|, depth K+12.
pub fn gemm_bias_act(act: Act) -> Op {
    let id = match act {
        Act::Relu => "gemm_bias_relu",
        Act::Gelu => "gemm_bias_gelu",
        Act::Silu => "gemm_bias_silu",
    };
    let mut dims = mm_dims();
    for dd in &mut dims {
        dd.max = dd.max.min(2048);
    }
    Op {
        input_rule: None,
        wide_outputs: &[],
        id,
        summary: "Y[M,N] = act(X[M,K] @ W[K,N] + b[N])",
        dims,
        constraint: ok,
        inputs: vec![
            InputSpec { name: "X", shape: |d| vec![d.get("M"), d.get("K")], reduction_axis: Some(1), data: true },
            InputSpec { name: "W", shape: |d| vec![d.get("K"), d.get("N")], reduction_axis: Some(0), data: true },
            InputSpec { name: "b", shape: |d| vec![d.get("N")], reduction_axis: None, data: false },
        ],
        outputs: vec![|d| vec![d.get("M"), d.get("N")]],
        k64: Arc::new(move |d, x| gba_kernel::<f64>(act, d, x)),
        k32: Arc::new(move |d, x| gba_kernel::<f32>(act, d, x)),
        profile: Arc::new(move |d, x, outs| {
            let (m, k, n) = mnk(d);
            let s = abs_matmul(x[0], x[1], m, k, n);
            let z = matmul_kernel(x[0], x[1], m, k, n);
            let mut scale = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    let idx = i * n + j;
                    let zz = z[idx] + x[2][j];
                    scale[idx] = act.lipschitz() * (s[idx] + x[2][j].abs()) + zz.abs() + outs[0][idx].abs();
                }
            }
            vec![ErrorProfile { depth: k + 12, scale }]
        }),
        backward: Some(super::linear_bwd::gemm_bias_act(act)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn matmul_small_exact() {
        let op = matmul();
        let d = Dims(vec![("M".into(), 2), ("K".into(), 2), ("N".into(), 2)]);
        let a = Tensor::f64(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = Tensor::f64(vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]);
        let r = op.forward(&d, &[a, b]).unwrap();
        assert_eq!(r.outputs[0].as_f64().unwrap(), &[19.0, 22.0, 43.0, 50.0]);
        assert_eq!(r.profiles[0].scale, vec![19.0, 22.0, 43.0, 50.0]);
    }

    #[test]
    fn matmul_backward_matches_finite_difference() {
        let op = matmul();
        let d = Dims(vec![("M".into(), 2), ("K".into(), 3), ("N".into(), 2)]);
        let a: Vec<f64> = (0..6).map(|i| 0.3 * i as f64 - 0.7).collect();
        let b: Vec<f64> = (0..6).map(|i| 0.2 * i as f64 + 0.1).collect();
        let g = vec![1.0, -2.0, 0.5, 3.0];
        let r = op
            .backward(&d, &[Tensor::f64(vec![2, 3], a.clone()), Tensor::f64(vec![3, 2], b.clone())], &[Tensor::f64(vec![2, 2], g.clone())])
            .unwrap();
        // loss = sum g * (A B); d loss / d A[0,1] by central difference
        let loss = |a: &[f64]| -> f64 { matmul_kernel(a, &b, 2, 3, 2).iter().zip(&g).map(|(y, w)| y * w).sum() };
        let h = 1e-6;
        let mut ap = a.clone();
        ap[1] += h;
        let mut am = a.clone();
        am[1] -= h;
        let fd = (loss(&ap) - loss(&am)) / (2.0 * h);
        assert!((r.outputs[0].as_f64().unwrap()[1] - fd).abs() < 1e-8);
    }

    #[test]
    fn gelu_and_silu_values() {
        assert!((Act::Gelu.apply(1.0f64) - 0.8411919906082768).abs() < 1e-12);
        assert!((Act::Silu.apply(1.0f64) - 0.7310585786300049).abs() < 1e-12);
        assert_eq!(Act::Relu.apply(-2.0f64), 0.0);
    }
}
