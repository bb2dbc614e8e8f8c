//! CMP-03 shape polymorphism.
//!
//! * Question: does the candidate stay correct at other legal shapes of the same operator?
//! * Decision: the value check of CMP-01 (one fixed seed, deterministic bound) at every shape of
//!   [`shape_set`]: reduction dims x2 and x4, batch dims 1, all changeable dims odd (native+1
//!   and native-1: never a multiple of a power-of-two tile), and each changeable dim at the
//!   envelope's maximum with the others at their minimum. Shapes that break the operator's
//!   constraint are skipped and listed. A refusal fails as `rejected`, a wrong value as `wrong`,
//!   a crash or hang is an error (rule 9).
//! * Bound source: as CMP-01; the shapes come only from the operator's fixed conventions (rule 6).

use super::{inputs::gate_seed, inputs::Dist, value_probe, value_result, Ctx, GateInfo, GateResult, Probe, Status};
use crate::error_model::BoundKind;
use crate::references::{DimKind, DimSpec, Dims, Op};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "CMP-03",
    name: "shape polymorphism",
    tolerance_free: false,
    question: "Does it stay correct at other legal shapes (2x/4x reduction, batch 1, odd, envelope max)?",
};

/// The shapes CMP-03 visits, derived from `base` and the op's conventions only. Returns the
/// legal (label, dims) pairs (deduplicated, base excluded) and the labels of skipped shapes.
pub fn shape_set(op: &Op, base: &Dims) -> (Vec<(String, Dims)>, Vec<String>) {
    let clamp = |s: &DimSpec, v: usize| -> usize { v.clamp(s.min, s.max) };
    let mut cands: Vec<(String, Dims)> = Vec::new();
    let changeable: Vec<_> = op.dims.iter().filter(|d| d.kind != DimKind::Fixed).collect();
    for factor in [2usize, 4] {
        let mut d = base.clone();
        for s in op.dims.iter().filter(|d| d.kind == DimKind::Reduction) {
            d = d.with(s.name, clamp(s, base.get(s.name) * factor));
        }
        cands.push((format!("reduction x{factor}"), d));
    }
    if op.dims.iter().any(|d| d.kind == DimKind::Batch) {
        let mut d = base.clone();
        for s in op.dims.iter().filter(|d| d.kind == DimKind::Batch) {
            d = d.with(s.name, clamp(s, 1));
        }
        cands.push(("batch 1".into(), d));
    }
    for (label, delta) in [("odd (+1)", 1i64), ("odd (-1)", -1)] {
        let mut d = base.clone();
        for s in &changeable {
            let b = base.get(s.name) as i64;
            let v = if b % 2 == 0 { b + delta } else { b + 2 * delta };
            d = d.with(s.name, clamp(s, v.max(1) as usize));
        }
        cands.push((label.into(), d));
    }
    for s in &changeable {
        let mut d = base.clone();
        for o in &changeable {
            d = d.with(o.name, o.min.max(1));
        }
        d = d.with(s.name, s.max);
        cands.push((format!("envelope max {}={}", s.name, s.max), d));
    }
    let mut out: Vec<(String, Dims)> = Vec::new();
    let mut skipped = Vec::new();
    for (label, d) in cands {
        if &d == base || out.iter().any(|(_, x)| x == &d) {
            continue;
        }
        match op.check_dims(&d) {
            Ok(()) => out.push((label, d)),
            Err(e) => skipped.push(format!("{label} ({e})")),
        }
    }
    (out, skipped)
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let (shapes, skipped) = shape_set(ctx.op, &ctx.dims);
    let mut worst: Option<GateResult> = None;
    let mut worst_ratio = -1.0f64;
    let mut rejected = Vec::new();
    let mut wrong = Vec::new();
    let mut visited = 0;
    for (i, (label, d)) in shapes.iter().enumerate() {
        let l = format!("{label} [{d}]");
        match value_probe(ctx, INFO.id, d, Dist::Normal, gate_seed(INFO.id, i as u64), BoundKind::Deterministic) {
            Probe::NotApplicable(_) => continue,
            Probe::Runtime(e) => return GateResult::new(INFO, Status::Error, format!("{l}: {e}")),
            Probe::Refused(why) => rejected.push(format!("{l}: {why}")),
            Probe::Values(v) => {
                visited += 1;
                let ratio = v.worst_ratio;
                if !v.passed() {
                    wrong.push(match &v.structural {
                        Some(s) => format!("{l}: {s}"),
                        None => format!("{l}: err/bound {:.3e}", v.worst_ratio),
                    });
                }
                if ratio > worst_ratio {
                    worst_ratio = ratio;
                    worst = Some(value_result(INFO, &l, &v));
                }
            }
        }
    }
    if !rejected.is_empty() || !wrong.is_empty() {
        let mut g = worst.unwrap_or_else(|| GateResult::new(INFO, Status::Fail, ""));
        g.status = Status::Fail;
        let mut parts = Vec::new();
        if !rejected.is_empty() {
            parts.push(format!("rejected: {}", rejected.join("; ")));
        }
        if !wrong.is_empty() {
            parts.push(format!("wrong: {}", wrong.join("; ")));
        }
        g.detail = parts.join(" | ");
        return g;
    }
    match worst {
        None => GateResult::new(INFO, Status::NotApplicable, "no legal alternative shape"),
        Some(mut g) => {
            g.detail = format!("{visited} shapes ok; worst {}; skipped: {}", g.detail, if skipped.is_empty() { "none".into() } else { skipped.join("; ") });
            g
        }
    }
}
