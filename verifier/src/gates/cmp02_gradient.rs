//! CMP-02 gradient.
//!
//! * Question: do the backward outputs (every input gradient) match the fp64 reference gradient?
//! * Decision: two fixed seeds of standard-normal inputs and output gradients at the native
//!   shape; every gradient element within the deterministic bound of its own profile (e.g. for
//!   matmul dA = dC B^T has depth N and scale |dC| |B|^T).
//! * Bound source: as CMP-01 (Higham Lemma 3.1 / eq. 3.4) applied to the backward formulas.
//! * n/a when the candidate is forward-only or the operator has no reference backward (rule 8).

use super::{compare, fold_value_probes, inputs, inputs::gate_seed, Ctx, GateInfo, GateResult, Probe, Status};
use crate::error_model::BoundKind;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "CMP-02",
    name: "gradient",
    tolerance_free: false,
    question: "Do the backward outputs match the fp64 reference gradient?",
};

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    if !ctx.harness.cand.has_backward() {
        return GateResult::new(INFO, Status::NotApplicable, "candidate is forward-only");
    }
    if ctx.op.backward.is_none() {
        return GateResult::new(INFO, Status::NotApplicable, format!("operator {} has no reference backward", ctx.op.id));
    }
    let mut probes = Vec::new();
    for s in 0..2u64 {
        let label = format!("seed#{s} {}", ctx.dims);
        let x = inputs::generate(ctx.op, &ctx.dims, inputs::Dist::Normal, gate_seed(INFO.id, s), ctx.precision.input);
        let g = inputs::grads(ctx.op, &ctx.dims, gate_seed(INFO.id, 100 + s), ctx.precision.input);
        let r = match ctx.op.backward(&ctx.dims, &x.reference, &g.reference) {
            Ok(r) => r,
            Err(e) => {
                probes.push((label, Probe::NotApplicable(e.to_string())));
                continue;
            }
        };
        let call = ctx.harness.backward(INFO.id, &ctx.dims, x.candidate, g.candidate);
        let p = match call.outcome {
            Err(e) if e.is_runtime_failure() => Probe::Runtime(e),
            Err(e) => Probe::Refused(e.to_string()),
            Ok(outs) => Probe::Values(compare::compare(&r, &outs, &ctx.precision, BoundKind::Deterministic)),
        };
        probes.push((label, p));
    }
    fold_value_probes(INFO, probes)
}
