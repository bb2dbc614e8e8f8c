//! EXC-02 subnormal handling.
//!
//! * Question: with subnormal inputs (and inputs whose products are subnormal), does the
//!   zero / non-zero / sign pattern match?
//! * Decision: the probes of [`super::exc02_probes`] at the native shape (subnormal data; tiny
//!   normal data whose products underflow; and, for the classes those cannot reach, inputs that
//!   make the reference *output* subnormal in the declared output dtype, e.g. softmax rows
//!   [0, ln t, ...]), signs fixed so no cancellation makes the sign ambiguous. The
//!   sign class {-, 0, +} of the candidate must equal that of the reference rounded to the
//!   output dtype at every finite position whose |reference| exceeds the deterministic bound;
//!   below it, rounding alone could legitimately change the class, so those positions are left
//!   out (ambiguity favours the candidate). Flush-to-zero where the reference keeps a
//!   subnormal therefore fails.
//! * Index outputs (argmax, argmin): every index must equal the reference's (a flushed input
//!   turns a row of subnormals into a row of ties, answered by index 0).
//! * Bound source: none for the decision (exact mask equality); the exclusion band is the
//!   CMP-01 bound including the underflow term depth * eta (Higham §2.1).

use super::compare::sign_class;
use super::{exc02_probes, inputs::gate_seed, Ctx, GateInfo, GateResult, Status};
use crate::error_model::{element_bound, BoundKind};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "EXC-02",
    name: "subnormal handling",
    tolerance_free: true,
    question: "With subnormal inputs (and inputs producing subnormal outputs), does the zero/non-zero/sign pattern match?",
};

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let mut mismatches = 0usize;
    let mut checked = 0usize;
    let mut sub_expected = 0usize;
    let mut first: Option<String> = None;
    let mut any = false;
    let out_dt = ctx.precision.output;
    for probe in exc02_probes::probes(ctx.op, &ctx.dims, &ctx.precision, |s| gate_seed(INFO.id, s)) {
        let (dist, x) = (probe.label, probe.inputs);
        let Ok(r) = ctx.op.forward(&ctx.dims, &x.reference) else { continue };
        any = true;
        let call = ctx.harness.forward(INFO.id, &ctx.dims, x.candidate);
        let outs = match call.outcome {
            Ok(o) => o,
            Err(e) if e.is_runtime_failure() => return GateResult::new(INFO, Status::Error, format!("{dist}: {e}")),
            Err(e) => return GateResult::new(INFO, Status::Fail, format!("rejected at {dist}: {e}")),
        };
        if outs.len() != r.outputs.len() || outs.iter().zip(&r.outputs).any(|(a, b)| a.shape != b.shape) {
            return GateResult::new(INFO, Status::Fail, format!("{dist}: output count or shape differs from the reference"));
        }
        for (o, ((rt, prof), ct)) in r.outputs.iter().zip(&r.profiles).zip(&outs).enumerate() {
            for (i, (y, c)) in rt.to_f64_vec().into_iter().zip(ct.to_f64_vec()).enumerate() {
                if !y.is_finite() {
                    continue;
                }
                if ctx.op.index_output() {
                    checked += 1;
                    if c != y {
                        mismatches += 1;
                        if first.is_none() {
                            first = Some(format!("{dist} output {o} element {i}: reference index {y}, candidate {c}"));
                        }
                    }
                    continue;
                }
                let b = element_bound(BoundKind::Deterministic, &ctx.precision, prof.depth, prof.scale[i], y);
                if y.abs() <= b {
                    continue;
                }
                let yr = out_dt.round(y);
                if yr != 0.0 && yr.abs() < out_dt.min_normal() {
                    sub_expected += 1;
                }
                checked += 1;
                if sign_class(yr) != sign_class(c) || !c.is_finite() {
                    mismatches += 1;
                    if first.is_none() {
                        first = Some(format!("{dist} output {o} element {i}: reference {yr:e}, candidate {c:e}"));
                    }
                }
            }
        }
    }
    if !any {
        return GateResult::new(INFO, Status::NotApplicable, "reference not applicable to the probes");
    }
    super::mask_result(INFO, mismatches, format!("{mismatches} sign/zero mismatches in {checked} unambiguous elements ({sub_expected} subnormal outputs expected)"), first)
}
