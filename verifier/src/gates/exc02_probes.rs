//! EXC-02's probe inputs: the general subnormal-input and tiny-normal probes, and, per operator
//! class whose output those cannot make subnormal, a probe whose *reference output* lies in the
//! subnormal range of the declared output dtype (target magnitude t = min_normal(out) 2^-4 times
//! U[1,2)):
//!
//! * softmax: each row is 0 then ln(t_j), so y_0 ~ 1 and y_j = t_j / S with S = 1 + sum t ~ 1
//!   (x = [0, -90] gives 8.19e-40 at f32);
//! * layer_norm / rms_norm: x standard normal, w = U[1,2) t, b = 0, so y = xh w is subnormal;
//! * sdpa / sdpa_causal: q, k standard normal, v = s_b U[1,2) t with one sign per batch entry,
//!   so o = sum_j p_j v_j keeps that sign and a subnormal magnitude;
//! * gemm_bias_*: the tiny-normal probe (products underflow) with b = 0, so z = X W is subnormal
//!   and relu, GELU (0.5 z) and SiLU (z / 2) keep it so;
//! * exp, sigmoid, softplus: x = ln t (each is ~ e^x there); exp2: x = log2 t; logsigmoid:
//!   x = -ln t (y ~ -e^-x).
//!
//! The other classes already reach subnormal outputs through the general probes: matmul, bmm and
//! conv through the tiny-normal one (products underflow), sum, mean, max and cumsum through the
//! subnormal-input one (same-sign subnormals), as are the elementwise relu, clamp, tanh, gelu
//! and silu (f(x) ~ x or x/2 there). log_softmax has no such input: y_j = (x_j - m) - ln S is 0
//! or at least ln S >= ln 2 away from it when x_j - m is subnormal; nor has log (ln x is
//! subnormal only for x within a subnormal of 1, which no format holds) ([`NO_SUBNORMAL_OUTPUT`]);
//! nor have argmax and argmin (integer indices: their EXC-02 compares every index instead).

use super::inputs::{generate, Dist, Inputs};
use crate::error_model::Precision;
use crate::references::{Dims, Op};
use crate::tensor::Tensor;
use rand::Rng;
use tilec_abi::rng::NormalRng;

/// Classes whose output cannot be subnormal (see the module doc).
pub const NO_SUBNORMAL_OUTPUT: [&str; 4] = ["log_softmax", "log", "argmax", "argmin"];

/// A labelled probe of EXC-02.
pub struct Probe {
    /// Label for reports (`Subnormal`, `Tiny`, `subnormal output`).
    pub label: &'static str,
    /// The inputs.
    pub inputs: Inputs,
}

fn build(op: &Op, dims: &Dims, vals: Vec<Vec<f64>>, p: &Precision) -> Inputs {
    let shapes = op.input_shapes(dims);
    let vals: Vec<Vec<f64>> = vals.into_iter().map(|v| v.into_iter().map(|x| p.input.round(x)).collect()).collect();
    Inputs {
        reference: vals.iter().zip(&shapes).map(|(v, s)| Tensor::f64(s.clone(), v.clone())).collect(),
        candidate: vals.iter().zip(&shapes).map(|(v, s)| Tensor::from_f64(s.clone(), v, p.input.storage())).collect(),
    }
}

/// The class-specific probe whose reference output is subnormal, when the class needs one.
pub fn subnormal_output(op: &Op, dims: &Dims, seed: u64, p: &Precision) -> Option<Inputs> {
    let mut rng = NormalRng::new(seed);
    let t = p.output.min_normal() * 2f64.powi(-4);
    let sizes: Vec<usize> = op.input_shapes(dims).iter().map(|s| s.iter().product()).collect();
    let tiny = |rng: &mut NormalRng| rng.gen_range(1.0..2.0) * t;
    let vals: Vec<Vec<f64>> = match op.id {
        "softmax" => {
            let n = dims.get("N");
            vec![(0..sizes[0]).map(|i| if i % n == 0 { 0.0 } else { tiny(&mut rng).ln() }).collect()]
        }
        "layer_norm" | "rms_norm" => {
            let mut v = vec![(0..sizes[0]).map(|_| rng.normal()).collect::<Vec<f64>>(), (0..sizes[1]).map(|_| tiny(&mut rng)).collect()];
            if op.id == "layer_norm" {
                v.push(vec![0.0; sizes[2]]);
            }
            v
        }
        "sdpa" | "sdpa_causal" => {
            let per_batch = sizes[2] / dims.get("Bt").max(1);
            let signs: Vec<f64> = (0..dims.get("Bt")).map(|_| if rng.gen::<bool>() { 1.0 } else { -1.0 }).collect();
            let q = (0..sizes[0]).map(|_| rng.normal()).collect();
            let k = (0..sizes[1]).map(|_| rng.normal()).collect();
            let v = (0..sizes[2]).map(|i| signs[i / per_batch.max(1)] * tiny(&mut rng)).collect();
            vec![q, k, v]
        }
        "gemm_bias_relu" | "gemm_bias_gelu" | "gemm_bias_silu" => {
            let mut x = generate(op, dims, Dist::Tiny, seed, p.input);
            let b = op.inputs.iter().position(|s| s.name == "b")?;
            let shape = x.reference[b].shape.clone();
            x.reference[b] = Tensor::f64(shape.clone(), vec![0.0; sizes[b]]);
            x.candidate[b] = Tensor::from_f64(shape, &vec![0.0; sizes[b]], p.input.storage());
            return Some(x);
        }
        "exp" | "sigmoid" | "softplus" => vec![(0..sizes[0]).map(|_| tiny(&mut rng).ln()).collect()],
        "exp2" => vec![(0..sizes[0]).map(|_| tiny(&mut rng).log2()).collect()],
        "logsigmoid" => vec![(0..sizes[0]).map(|_| -tiny(&mut rng).ln()).collect()],
        _ => return None,
    };
    Some(build(op, dims, vals, p))
}

/// Every probe of EXC-02 at `dims`, seeded from `seed(index)`: subnormal inputs, tiny normal
/// inputs, then the class's subnormal-output probe when it has one.
pub fn probes(op: &Op, dims: &Dims, p: &Precision, seed: impl Fn(u64) -> u64) -> Vec<Probe> {
    let mut v = vec![
        Probe { label: "Subnormal", inputs: generate(op, dims, Dist::Subnormal, seed(0), p.input) },
        Probe { label: "Tiny", inputs: generate(op, dims, Dist::Tiny, seed(1), p.input) },
    ];
    if let Some(inputs) = subnormal_output(op, dims, seed(2), p) {
        v.push(Probe { label: "subnormal output", inputs });
    }
    v
}
