//! CMP-01 value.
//!
//! * Question: does the output match the fp64 reference on ordinary random inputs at the
//!   native shape?
//! * Decision: for three fixed seeds of standard-normal inputs, every finite reference element
//!   satisfies |cand - ref| <= gamma(depth, u_acc) scale + u_out |ref| + depth eta (the
//!   deterministic bound of [`crate::error_model`]). The normalisations and row reductions
//!   ([`CANCELLATION_CLASSES`]) get a fourth probe under the same bound: a cancellation probe,
//!   x = [`OFFSET`] + [`SPREAD`] N(0,1) (a large common offset, a small spread), where a one-pass
//!   variance E[x^2] - E[x]^2 loses every significant digit (its rounding error, ~ OFFSET^2 u
//!   sqrt(N), dwarfs the variance SPREAD^2 + eps and goes negative about every other row).
//! * Bound source: Higham, *Accuracy and Stability of Numerical Algorithms*, Lemma 3.1 and
//!   eq. 3.4 (worst case over all summation orders), with each reference's own scale. The
//!   profiles already charge the offset's magnitude (e.g. layer norm's r (mean|x| + |mu|) term:
//!   the error of a two-pass mean), so honest arithmetic stays within the bound.

use super::inputs::{self, gate_seed, Dist};
use super::{fold_value_probes, value_probe, value_probe_with, Ctx, GateInfo, GateResult};
use crate::error_model::BoundKind;
use crate::references::{Dims, Op};
use crate::tensor::{DType, Tensor};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "CMP-01",
    name: "value",
    tolerance_free: false,
    question: "Does the output match the fp64 reference on ordinary random inputs at the native shape?",
};

/// Number of seeds (the first is the "default seed" a naive test would use).
pub const SEEDS: u64 = 3;

/// Classes that get the cancellation probe (normalisations and row reductions of x[R,N]).
pub const CANCELLATION_CLASSES: [&str; 8] = ["softmax", "log_softmax", "layer_norm", "rms_norm", "sum", "mean", "max", "cumsum"];
/// Common offset of the cancellation probe.
pub const OFFSET: f64 = 100.0;
/// Spread of the cancellation probe.
pub const SPREAD: f64 = 1e-3;

/// The cancellation probe's inputs: standard normal, with the first data input mapped to
/// OFFSET + SPREAD x (then rounded to the input dtype); None outside [`CANCELLATION_CLASSES`].
pub fn cancellation(op: &Op, dims: &Dims, seed: u64, in_dtype: DType) -> Option<inputs::Inputs> {
    if !CANCELLATION_CLASSES.contains(&op.id) {
        return None;
    }
    let mut x = inputs::generate(op, dims, Dist::Normal, seed, in_dtype);
    let i = op.inputs.iter().position(|s| s.data)?;
    let shape = x.reference[i].shape.clone();
    let v: Vec<f64> = x.reference[i].to_f64_vec().iter().map(|e| in_dtype.round(OFFSET + SPREAD * e)).collect();
    x.candidate[i] = Tensor::from_f64(shape.clone(), &v, in_dtype.storage());
    x.reference[i] = Tensor::f64(shape, v);
    Some(x)
}

/// The ties probe of the index classes ([`crate::references::index::INDEX_CLASSES`]): the first
/// data input is round(N(0,1)) clamped to [-1, 1], so nearly every row attains its maximum and
/// its minimum many times and the answer is decided by the tie rule (first index); None for the
/// other classes.
pub fn ties(op: &Op, dims: &Dims, seed: u64, in_dtype: DType) -> Option<inputs::Inputs> {
    if !op.index_output() {
        return None;
    }
    let mut x = inputs::generate(op, dims, Dist::Normal, seed, in_dtype);
    let i = op.inputs.iter().position(|s| s.data)?;
    let shape = x.reference[i].shape.clone();
    let v: Vec<f64> = x.reference[i].to_f64_vec().iter().map(|e| e.round().clamp(-1.0, 1.0)).collect();
    x.candidate[i] = Tensor::from_f64(shape.clone(), &v, in_dtype.storage());
    x.reference[i] = Tensor::f64(shape, v);
    Some(x)
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let mut probes: Vec<_> = (0..SEEDS)
        .map(|s| {
            let seed = gate_seed(INFO.id, s);
            (format!("seed#{s} {}", ctx.dims), value_probe(ctx, INFO.id, &ctx.dims, Dist::Normal, seed, BoundKind::Deterministic))
        })
        .collect();
    if let Some(x) = cancellation(ctx.op, &ctx.dims, gate_seed(INFO.id, SEEDS), ctx.precision.input) {
        let label = format!("cancellation (offset {OFFSET}, spread {SPREAD:e}) {}", ctx.dims);
        probes.push((label, value_probe_with(ctx, INFO.id, &ctx.dims, x, BoundKind::Deterministic).0));
    }
    if let Some(x) = ties(ctx.op, &ctx.dims, gate_seed(INFO.id, SEEDS + 1), ctx.precision.input) {
        let label = format!("ties (round(N(0,1)) in [-1, 1]) {}", ctx.dims);
        probes.push((label, value_probe_with(ctx, INFO.id, &ctx.dims, x, BoundKind::Deterministic).0));
    }
    fold_value_probes(INFO, probes)
}
