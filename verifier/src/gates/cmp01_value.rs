//! CMP-01 value.
//!
//! * Question: does the output match the fp64 reference on ordinary random inputs at the
//!   native shape?
//! * Decision: for three fixed seeds of standard-normal inputs, every finite reference element
//!   satisfies |cand - ref| <= gamma(depth, u_acc) scale + u_out |ref| + depth eta (the
//!   deterministic bound of [`crate::error_model`]).
//! * Bound source: Higham, *Accuracy and Stability of Numerical Algorithms*, Lemma 3.1 and
//!   eq. 3.4 (worst case over all summation orders), with each reference's own scale.

use super::{fold_value_probes, inputs::gate_seed, inputs::Dist, value_probe, Ctx, GateInfo, GateResult};
use crate::error_model::BoundKind;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "CMP-01",
    name: "value",
    tolerance_free: false,
    question: "Does the output match the fp64 reference on ordinary random inputs at the native shape?",
};

/// Number of seeds (the first is the "default seed" a naive test would use).
pub const SEEDS: u64 = 3;

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let probes = (0..SEEDS)
        .map(|s| {
            let seed = gate_seed(INFO.id, s);
            (format!("seed#{s} {}", ctx.dims), value_probe(ctx, INFO.id, &ctx.dims, Dist::Normal, seed, BoundKind::Deterministic))
        })
        .collect();
    fold_value_probes(INFO, probes)
}
