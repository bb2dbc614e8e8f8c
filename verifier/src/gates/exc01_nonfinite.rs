//! EXC-01 non-finite propagation.
//!
//! * Question: where the reference gives NaN / +Inf / -Inf, does the candidate give the same
//!   class, and nowhere else?
//! * Decision: two fixed seeds of standard-normal inputs with NaN, +Inf and -Inf injected into
//!   the data inputs (one per 256 elements). The class mask {NaN, +Inf, -Inf, finite} of the
//!   candidate must equal that of the reference rounded to the declared output dtype (so an
//!   fp64 value beyond the output's range legitimately becomes Inf), element for element.
//! * Bound source: none: tolerance-free (exact mask equality).

use super::compare::{nonfinite_class, NonFiniteClass};
use super::{inputs, inputs::gate_seed, Ctx, GateInfo, GateResult, Status};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "EXC-01",
    name: "non-finite propagation",
    tolerance_free: true,
    question: "Where the reference gives NaN/+Inf/-Inf, does the candidate give the same class, and nowhere else?",
};

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let mut mismatches = 0usize;
    let mut checked = 0usize;
    let mut nonfinite_expected = 0usize;
    let mut first: Option<String> = None;
    let mut any = false;
    for s in 0..2u64 {
        let x = inputs::generate(ctx.op, &ctx.dims, inputs::Dist::NonFinite, gate_seed(INFO.id, s), ctx.precision.input);
        let Ok(r) = ctx.op.forward(&ctx.dims, &x.reference) else { continue };
        any = true;
        let call = ctx.harness.forward(INFO.id, &ctx.dims, x.candidate);
        let outs = match call.outcome {
            Ok(o) => o,
            Err(e) if e.is_runtime_failure() => return GateResult::new(INFO, Status::Error, format!("seed#{s}: {e}")),
            Err(e) => return GateResult::new(INFO, Status::Fail, format!("rejected at seed#{s}: {e}")),
        };
        if outs.len() != r.outputs.len() || outs.iter().zip(&r.outputs).any(|(a, b)| a.shape != b.shape) {
            return GateResult::new(INFO, Status::Fail, format!("seed#{s}: output count or shape differs from the reference"));
        }
        for (o, (rt, ct)) in r.outputs.iter().zip(&outs).enumerate() {
            for (i, (y, c)) in rt.to_f64_vec().into_iter().zip(ct.to_f64_vec()).enumerate() {
                let want = nonfinite_class(ctx.precision.output.round(y));
                let got = nonfinite_class(c);
                checked += 1;
                if want != NonFiniteClass::Finite {
                    nonfinite_expected += 1;
                }
                if want != got {
                    mismatches += 1;
                    if first.is_none() {
                        first = Some(format!("seed#{s} output {o} element {i}: reference {want:?}, candidate {got:?} ({c})"));
                    }
                }
            }
        }
    }
    if !any {
        return GateResult::new(INFO, Status::NotApplicable, "reference not applicable to the probes");
    }
    super::mask_result(INFO, mismatches, format!("{mismatches} class mismatches in {checked} elements ({nonfinite_expected} non-finite expected)"), first)
}
