//! Input generators of the gates. Every generator is a pure function of (op, dims,
//! distribution, seed, declared input dtype), so a verdict depends on the kernel, not on luck
//! (fairness rule 5). Values are rounded to the candidate's declared input dtype first and the
//! reference gets the very same values in f64, each side in its own allocation (rules 3, 7, 10).

use crate::references::{Dims, Op};
use crate::tensor::{numel, DType, Tensor};
use rand::Rng;
use tilec_abi::hash::fnv1a64;
use tilec_abi::rng::NormalRng;

/// Input distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    /// Standard normal.
    Normal,
    /// sign * U[1,2) * 2^U(-E,E): many binades (ORD-03). E is 20 for f32/bf16 inputs, 6 for f16.
    WideRange,
    /// Standard normal with NaN / +Inf / -Inf injected into data inputs (EXC-01): one per 256
    /// elements, anywhere in the first data input, within the first leading slice of the others.
    NonFinite,
    /// Subnormal data (EXC-02): first data input sign * U[1,2) * max(min_normal 2^-10,
    /// min_subnormal) with one sign per leading index, other inputs U[1,2).
    Subnormal,
    /// Normal but tiny data whose products are subnormal (EXC-02): first data input
    /// sign * U[1,2) * 2^-(e/2+4) (e = |exponent of min_normal|), other data inputs likewise positive.
    Tiny,
    /// U[1,2) everywhere, full mantissa (PRC-01: no cancellation hides reduced precision).
    Positive,
    /// PRC-02's accumulator probe: along the long reduction axis of the first data input whose
    /// axis has the probe length: +1, then U[1,2)*2^-12 terms, then -1; every other input 1.0.
    AccumProbe,
}

/// Inputs of one probe: the reference's f64 copy and the candidate's copy in its input dtype.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// f64 tensors for the reference.
    pub reference: Vec<Tensor>,
    /// Tensors in the candidate's declared input dtype (separate allocations).
    pub candidate: Vec<Tensor>,
}

/// A fixed seed per gate and probe index: FNV-1a of the gate id, xor the index.
pub fn gate_seed(gate: &str, index: u64) -> u64 {
    fnv1a64(gate.as_bytes()) ^ index
}

fn sign(rng: &mut NormalRng) -> f64 {
    if rng.gen::<bool>() {
        1.0
    } else {
        -1.0
    }
}

/// Generate the inputs of `op` at `dims`: raw values of `dist`, mapped onto the class's domain
/// by its [`crate::references::InputRule`] when it has one, then rounded to `in_dtype`.
pub fn generate(op: &Op, dims: &Dims, dist: Dist, seed: u64, in_dtype: DType) -> Inputs {
    let mut rng = NormalRng::new(seed);
    let shapes = op.input_shapes(dims);
    let first_data = op.inputs.iter().position(|s| s.data).unwrap_or(0);
    let probe_input = if dist == Dist::AccumProbe { accum_probe_input(op, dims) } else { None };
    let mut vals: Vec<Vec<f64>> = Vec::new();
    for (idx, (spec, shape)) in op.inputs.iter().zip(&shapes).enumerate() {
        let n = numel(shape);
        let lead = if shape.len() > 1 { shape[0] } else { 1 };
        let per_lead = if lead > 0 { n / lead.max(1) } else { 0 };
        let mut v = Vec::with_capacity(n);
        match dist {
            Dist::Normal | Dist::NonFinite => v.extend((0..n).map(|_| rng.normal())),
            Dist::WideRange => {
                let e = if in_dtype == DType::F16 { 6.0 } else { 20.0 };
                v.extend((0..n).map(|_| sign(&mut rng) * rng.gen_range(1.0..2.0) * 2f64.powf(rng.gen_range(-e..e))))
            }
            Dist::Subnormal | Dist::Tiny => {
                let e = -in_dtype.min_normal().log2();
                // Subnormal: 2^-10 below the smallest normal, but never below the smallest
                // subnormal (bf16 has only 7 subnormal binades; 2^-136 would round to 0).
                let sub = (in_dtype.min_normal() * 2f64.powi(-10)).max(in_dtype.min_subnormal());
                let mag = if dist == Dist::Subnormal { sub } else { 2f64.powf(-(e / 2.0 + 4.0).floor()) };
                if idx == first_data {
                    let signs: Vec<f64> = (0..lead.max(1)).map(|_| sign(&mut rng)).collect();
                    v.extend((0..n).map(|i| signs[if per_lead > 0 { i / per_lead } else { 0 }] * rng.gen_range(1.0..2.0) * mag));
                } else if spec.data && dist == Dist::Tiny {
                    v.extend((0..n).map(|_| rng.gen_range(1.0..2.0) * mag));
                } else {
                    v.extend((0..n).map(|_| rng.gen_range(1.0..2.0)));
                }
            }
            Dist::Positive => v.extend((0..n).map(|_| rng.gen_range(1.0..2.0))),
            Dist::AccumProbe => {
                if Some(idx) == probe_input {
                    let axis = spec.reduction_axis.unwrap_or(0);
                    let len = shape[axis];
                    let inner: usize = shape[axis + 1..].iter().product();
                    for i in 0..n {
                        let pos = (i / inner) % len;
                        v.push(if pos == 0 {
                            1.0
                        } else if pos == len - 1 {
                            -1.0
                        } else {
                            rng.gen_range(1.0..2.0) * 2f64.powi(-12)
                        });
                    }
                } else {
                    v.extend(std::iter::repeat_n(1.0, n));
                }
            }
        }
        if dist == Dist::NonFinite && spec.data {
            // The first data input anywhere; every other data input only within its first
            // leading slice: one non-finite key (attention) or weight row reaches a whole batch
            // entry or output column, and the probe must leave finite outputs to compare.
            let span = if idx == first_data || shape.len() < 2 { n } else { per_lead };
            let count = (n / 256).max(1);
            for _ in 0..count {
                let at = rng.gen_range(0..span.max(1));
                if at < v.len() {
                    v[at] = match rng.gen_range(0..3) {
                        0 => f64::NAN,
                        1 => f64::INFINITY,
                        _ => f64::NEG_INFINITY,
                    };
                }
            }
        }
        vals.push(v);
    }
    // Classes with structured inputs (the recurrence family: unit keys, log-decays <= 0, gates
    // in (0, 1)) map the raw draws onto their domain before the rounding.
    if let Some(rule) = &op.input_rule {
        (rule.condition)(dims, &mut vals);
    }
    let vals: Vec<Vec<f64>> = vals.into_iter().map(|v| v.into_iter().map(|x| in_dtype.round(x)).collect()).collect();
    let reference = vals.iter().zip(&shapes).map(|(v, s)| Tensor::f64(s.clone(), v.clone())).collect();
    let candidate = vals.iter().zip(&shapes).map(|(v, s)| Tensor::from_f64(s.clone(), v, in_dtype.storage())).collect();
    Inputs { reference, candidate }
}

/// Output gradients for CMP-02 (standard normal, rounded to the input dtype).
pub fn grads(op: &Op, dims: &Dims, seed: u64, in_dtype: DType) -> Inputs {
    let mut rng = NormalRng::new(seed);
    let mut reference = Vec::new();
    let mut candidate = Vec::new();
    for s in op.output_shapes(dims) {
        let v: Vec<f64> = (0..numel(&s)).map(|_| in_dtype.round(rng.normal())).collect();
        reference.push(Tensor::f64(s.clone(), v.clone()));
        candidate.push(Tensor::from_f64(s, &v, in_dtype.storage()));
    }
    Inputs { reference, candidate }
}

/// Index of the input that carries PRC-02's pattern: the first data input whose reduction axis
/// spans a reduction dimension at the probe length.
pub fn accum_probe_input(op: &Op, dims: &Dims) -> Option<usize> {
    let shapes = op.input_shapes(dims);
    let long: Vec<usize> = op
        .dims
        .iter()
        .filter(|d| d.kind == crate::references::DimKind::Reduction)
        .map(|d| dims.get(d.name))
        .collect();
    op.inputs.iter().zip(&shapes).position(|(spec, shape)| {
        spec.data && spec.reduction_axis.map(|a| long.contains(&shape[a]) && shape[a] >= 2048).unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::references::op_by_id;

    #[test]
    fn generation_is_deterministic_and_copies_are_separate() {
        let op = op_by_id("matmul").unwrap();
        let d = op.native();
        let a = generate(&op, &d, Dist::Normal, 7, DType::F32);
        let b = generate(&op, &d, Dist::Normal, 7, DType::F32);
        assert_eq!(a.reference[0].to_f64_vec(), b.reference[0].to_f64_vec());
        assert_ne!(a.reference[0].storage_id(), a.candidate[0].storage_id());
        assert_eq!(a.reference[0].to_f64_vec(), a.candidate[0].to_f64_vec());
    }

    #[test]
    fn subnormal_probe_is_subnormal_in_f32() {
        let op = op_by_id("matmul").unwrap();
        let x = generate(&op, &op.native(), Dist::Subnormal, 1, DType::F32);
        let v = x.candidate[0].as_f32().unwrap();
        assert!(v.iter().all(|x| x.is_subnormal()));
    }
}
