//! PRC-02 fp32 accumulation.
//!
//! * Question: does a long reduction (N >= 2048) accumulate in fp32, not fp16 / bf16?
//! * Decision: every reduction dim that may reach 2048 is set to 2048, other changeable dims to
//!   at most 8; the first data input along the long axis is +1, then 2046 terms of
//!   U[1,2) 2^-12, then -1, every other input 1.0. Each small term is below half an fp16 ulp
//!   of the running sum (2^-11), so an fp16 carry loses all of them (error ~0.75) while the
//!   fp32 deterministic bound is gamma(2048) * 3.75 ~ 5e-4. Every element must be within the
//!   deterministic bound of the declared accumulator.
//! * Bound source: Higham Lemma 3.1 (rigorous, so an honest fp32 sum can never fail).
//! * n/a when no reduction dim of the envelope reaches 2048, and for the index classes (argmax,
//!   argmin), which compare and never accumulate.

use super::{inputs::accum_probe_input, inputs::gate_seed, inputs::Dist, value_probe, value_result, Ctx, GateInfo, GateResult, Probe, Status};
use crate::error_model::BoundKind;
use crate::references::{DimKind, Dims};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "PRC-02",
    name: "fp32 accumulation",
    tolerance_free: false,
    question: "Does a long reduction (N >= 2048) accumulate in fp32, not fp16/bf16?",
};

/// Probe length.
pub const PROBE_N: usize = 2048;

/// The probe's dims, or None when no reduction dim may reach [`PROBE_N`].
pub fn probe_dims(ctx: &Ctx) -> Option<Dims> {
    let mut d = ctx.dims.clone();
    let mut long = false;
    for s in &ctx.op.dims {
        match s.kind {
            DimKind::Reduction if s.max >= PROBE_N => {
                d = d.with(s.name, PROBE_N);
                long = true;
            }
            DimKind::Batch | DimKind::Free => d = d.with(s.name, ctx.dims.get(s.name).min(8).max(s.min)),
            _ => {}
        }
    }
    if !long || ctx.op.check_dims(&d).is_err() || accum_probe_input(ctx.op, &d).is_none() {
        return None;
    }
    Some(d)
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    if ctx.op.index_output() {
        return GateResult::new(INFO, Status::NotApplicable, format!("{} compares and never accumulates (index output)", ctx.op.id));
    }
    let Some(d) = probe_dims(ctx) else {
        return GateResult::new(INFO, Status::NotApplicable, format!("no reduction of {} reaches {PROBE_N}", ctx.op.id));
    };
    let label = format!("accumulator probe [{d}]");
    match value_probe(ctx, INFO.id, &d, Dist::AccumProbe, gate_seed(INFO.id, 0), BoundKind::Deterministic) {
        Probe::NotApplicable(why) => GateResult::new(INFO, Status::NotApplicable, why),
        Probe::Runtime(e) => GateResult::new(INFO, Status::Error, format!("{label}: {e}")),
        Probe::Refused(why) => GateResult::new(INFO, Status::Fail, format!("rejected at {label}: {why}")),
        Probe::Values(v) => value_result(INFO, &label, &v),
    }
}
