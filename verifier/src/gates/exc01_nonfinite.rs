//! EXC-01 non-finite propagation.
//!
//! * Question: where the reference gives NaN / +Inf / -Inf, does the candidate give the same
//!   class, and nowhere else?
//! * Decision: the class mask {NaN, +Inf, -Inf, finite} of the candidate must equal that of the
//!   reference rounded to the declared output dtype (so an fp64 value beyond the output's range
//!   legitimately becomes Inf), element for element, on every probe:
//!   - two fixed seeds of standard-normal inputs with NaN, +Inf and -Inf injected into the data
//!     inputs (one per 256 elements);
//!   - one probe of rows that are entirely non-finite (all -inf, all +inf, NaN beside +inf;
//!     [`super::exc01_probes::nonfinite_rows`]);
//!   - a poison-then-partial sequence: all inputs NaN at the base shape, then ordinary inputs at
//!     each partial-tile shape ([`super::exc01_probes::partial_shapes`]), so a read of what the
//!     poisoned call left behind shows up as a non-finite output where the reference is finite.
//! * Charging: over-propagation (non-finite where the reference is finite) counts exactly as
//!   under-propagation (finite where the reference is not) and a wrong non-finite class; the
//!   report counts each.
//! * Index outputs (argmax, argmin): an integer is never non-finite, so what NaN and ±Inf
//!   decide is *which* index comes out (the first NaN; an all-±inf row's first index): every
//!   index must equal the reference's, each difference counted as a wrong index.
//! * Classes whose reference refuses non-finite inputs (the recurrence family,
//!   [`crate::references::Op::finite_domain`]): the injected and row probes are `n/a` (rule 1)
//!   and counted as such in the detail; the poisoned calls still go to the candidate (not
//!   compared) and the ordinary calls after them are judged, so a kernel that carries a state
//!   or workspace from one call into the next is caught by over-propagation.
//! * Bound source: none: tolerance-free (exact mask equality).

use super::compare::{nonfinite_class, NonFiniteClass};
use super::inputs::{self, gate_seed, Inputs};
use super::{exc01_probes, Ctx, GateInfo, GateResult, Status};
use crate::references::{Dims, RefOutput};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "EXC-01",
    name: "non-finite propagation",
    tolerance_free: true,
    question: "Where the reference gives NaN/+Inf/-Inf, does the candidate give the same class, and nowhere else?",
};

#[derive(Default)]
struct Tally {
    probes: usize,
    not_applicable: usize,
    why_na: Option<String>,
    checked: usize,
    expected: usize,
    under: usize,
    over: usize,
    wrong_class: usize,
    wrong_index: usize,
    first: Option<String>,
}

/// Run one probe — the reference's answer `reference` (run here when `None`) — and add its mask
/// comparison to `t`. `Ok(false)` when the reference does not apply (rule 1); `Err` with the
/// gate's result on a runtime failure, refusal or wrong shape.
fn judge(ctx: &Ctx, label: &str, dims: &Dims, x: Inputs, reference: Option<RefOutput>, t: &mut Tally) -> Result<bool, GateResult> {
    let r = match reference.map_or_else(|| ctx.op.forward(dims, &x.reference), Ok) {
        Ok(r) => r,
        Err(e) => {
            t.not_applicable += 1;
            t.why_na.get_or_insert_with(|| e.to_string());
            return Ok(false);
        }
    };
    let outs = match ctx.harness.forward(INFO.id, dims, x.candidate).outcome {
        Ok(o) => o,
        Err(e) if e.is_runtime_failure() => return Err(GateResult::new(INFO, Status::Error, format!("{label}: {e}"))),
        Err(e) => return Err(GateResult::new(INFO, Status::Fail, format!("rejected at {label}: {e}"))),
    };
    if outs.len() != r.outputs.len() || outs.iter().zip(&r.outputs).any(|(a, b)| a.shape != b.shape) {
        return Err(GateResult::new(INFO, Status::Fail, format!("{label}: output count or shape differs from the reference")));
    }
    t.probes += 1;
    for (o, (rt, ct)) in r.outputs.iter().zip(&outs).enumerate() {
        for (i, (y, c)) in rt.to_f64_vec().into_iter().zip(ct.to_f64_vec()).enumerate() {
            let want = nonfinite_class(ctx.precision.output.round(y));
            let got = nonfinite_class(c);
            t.checked += 1;
            if ctx.op.index_output() && want == NonFiniteClass::Finite && c != y {
                t.wrong_index += 1;
                if t.first.is_none() {
                    t.first = Some(format!("{label} output {o} element {i}: reference index {y}, candidate {c}"));
                }
                continue;
            }
            if want != NonFiniteClass::Finite {
                t.expected += 1;
            }
            if want == got {
                continue;
            }
            match (want, got) {
                (_, NonFiniteClass::Finite) => t.under += 1,
                (NonFiniteClass::Finite, _) => t.over += 1,
                _ => t.wrong_class += 1,
            }
            if t.first.is_none() {
                t.first = Some(format!("{label} output {o} element {i}: reference {want:?}, candidate {got:?} ({c})"));
            }
        }
    }
    Ok(true)
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let mut t = Tally::default();
    let (dims, inp) = (&ctx.dims, ctx.precision.input);
    // (label, dims, inputs, whether it is a poisoned call)
    let mut probes: Vec<(String, Dims, Inputs, bool)> = (0..2u64)
        .map(|s| (format!("seed#{s}"), dims.clone(), inputs::generate(ctx.op, dims, inputs::Dist::NonFinite, gate_seed(INFO.id, s), inp), false))
        .collect();
    probes.push(("non-finite rows".into(), dims.clone(), exc01_probes::nonfinite_rows(ctx.op, dims, gate_seed(INFO.id, 2), inp), false));
    let poisoned = exc01_probes::poison(ctx.op, dims, inp);
    for (k, (label, d)) in exc01_probes::partial_shapes(ctx).into_iter().enumerate() {
        probes.push((format!("poison [{dims}] before {label}"), dims.clone(), poisoned.clone(), true));
        let x = inputs::generate(ctx.op, &d, inputs::Dist::Normal, gate_seed(INFO.id, 10 + k as u64), inp);
        probes.push((format!("after poison: {label} [{d}]"), d, x, false));
    }
    for (label, d, x, poison) in probes {
        let mut reference = None;
        if poison {
            match ctx.op.forward(&d, &x.reference) {
                Ok(r) => reference = Some(r),
                // A poisoned call whose inputs the reference refuses (the recurrence classes
                // refuse NaN) still reaches the candidate: what it leaves behind is what the next
                // call judges.
                Err(_) => match ctx.harness.forward(INFO.id, &d, x.candidate).outcome {
                    Err(e) if e.is_runtime_failure() => return GateResult::new(INFO, Status::Error, format!("{label}: {e}")),
                    _ => continue,
                },
            }
        }
        if let Err(g) = judge(ctx, &label, &d, x, reference, &mut t) {
            return g;
        }
    }
    if t.probes == 0 {
        return GateResult::new(INFO, Status::NotApplicable, "reference not applicable to the probes");
    }
    let m = t.under + t.over + t.wrong_class + t.wrong_index;
    let mut summary = format!(
        "{m} class mismatches in {} elements of {} probes ({} non-finite expected): {} under-propagated, {} over-propagated, {} of the wrong class",
        t.checked, t.probes, t.expected, t.under, t.over, t.wrong_class
    );
    if ctx.op.index_output() {
        summary += &format!(", {} wrong indices", t.wrong_index);
    }
    if t.not_applicable > 0 {
        summary += &format!("; {} probes n/a ({})", t.not_applicable, t.why_na.unwrap_or_default());
    }
    super::mask_result(INFO, m, summary, t.first)
}
