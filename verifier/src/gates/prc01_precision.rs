//! PRC-01 declared precision.
//!
//! * Question: does the candidate compute at the precision it declares (fp32 declared but bf16
//!   or TF32 used fails)?
//! * Decision: positive U[1,2) inputs with full mantissas (rounded to the declared input dtype),
//!   reduction dims shortened to 4 (or their minimum) so that accumulation error cannot hide
//!   input or product rounding; every element within the deterministic bound of the declared
//!   precision. At that length the fp32 bound is about 5 u_f32 |ref| while a TF32 or bf16
//!   rounding of the inputs costs about 2^-12 or 2^-9 |ref|: hundreds to thousands of times
//!   over. The report names the precision level the measured error implies.
//! * Bound source: the deterministic bound (Higham Lemma 3.1) with u of the declared dtypes.

use super::{inputs::gate_seed, inputs::Dist, value_probe, value_result, Ctx, GateInfo, GateResult, Probe, Status};
use crate::error_model::{implied_precision, BoundKind};
use crate::references::{DimKind, Dims};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "PRC-01",
    name: "declared precision",
    tolerance_free: false,
    question: "Does it compute at the precision it declares (no silent bf16/TF32)?",
};

/// Reduction length of the probe.
pub const PROBE_REDUCTION: usize = 4;

/// The probe's dims: reduction dims set to [`PROBE_REDUCTION`] within their legal range.
pub fn probe_dims(ctx: &Ctx) -> Dims {
    let mut d = ctx.dims.clone();
    for s in ctx.op.dims.iter().filter(|s| s.kind == DimKind::Reduction) {
        d = d.with(s.name, PROBE_REDUCTION.clamp(s.min, s.max));
    }
    if ctx.op.check_dims(&d).is_err() {
        ctx.dims.clone()
    } else {
        d
    }
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let d = probe_dims(ctx);
    let label = format!("positive probe [{d}]");
    match value_probe(ctx, INFO.id, &d, Dist::Positive, gate_seed(INFO.id, 0), BoundKind::Deterministic) {
        Probe::NotApplicable(why) => GateResult::new(INFO, Status::NotApplicable, why),
        Probe::Runtime(e) => GateResult::new(INFO, Status::Error, format!("{label}: {e}")),
        Probe::Refused(why) => GateResult::new(INFO, Status::Fail, format!("rejected at {label}: {why}")),
        Probe::Values(v) => {
            let mut g = value_result(INFO, &label, &v);
            let u = ctx.precision.accumulator.unit_roundoff().max(ctx.precision.output.unit_roundoff());
            let u_eff = v.worst_ratio * u;
            g.detail = format!("{}; error level implies {} (u_eff <= {:.2e})", g.detail, implied_precision(u_eff), u_eff);
            g
        }
    }
}
