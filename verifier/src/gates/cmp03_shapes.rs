//! CMP-03 shape polymorphism.
//!
//! * Question: does the candidate stay correct at other legal shapes of the same operator?
//! * Decision: the value check of CMP-01 (one fixed seed, deterministic bound) at every shape of
//!   [`shape_set`]: reduction dims x2 and x4, batch dims 1, all changeable dims odd (native+1
//!   and native-1: never a multiple of a power-of-two tile), and each changeable dim at the
//!   envelope's maximum with the others at their minimum. Shapes that break the operator's
//!   constraint are skipped and listed. A refusal fails as `rejected`, a wrong value as `wrong`,
//!   a crash or hang is an error (rule 9).
//!   Then the probes of [`super::cmp03_probes`]: each changeable dim just past every power of
//!   two up to its envelope and past the envelope (a refusal there is listed, not failed), and
//!   for candidates that receive arrays, transposed, offset and stride-0 views of the inputs;
//!   for candidates that compute on a GPU, one shape past 2^31 flat elements
//!   ([`super::cmp03_flat`]; skipped with the reason in the detail otherwise).
//! * Bound source: as CMP-01; the shapes come only from the operator's fixed conventions (rule 6).

use super::cmp03_flat;
use super::cmp03_probes::{layout_probe, layout_set, size_set, widened, PAST_ENVELOPE_BYTES};
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

/// A labelled probe to run (None: the layouts were not applied) and whether it is past the
/// envelope (a refusal there is not a failure).
type Labelled<'a> = (String, Box<dyn Fn() -> Option<Probe> + 'a>, bool);

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let (shapes, skipped) = shape_set(ctx.op, &ctx.dims);
    let mut worst: Option<GateResult> = None;
    let mut worst_ratio = -1.0f64;
    let mut rejected = Vec::new();
    let mut wrong = Vec::new();
    let mut visited = 0;
    let (sizes, skipped_sizes) = size_set(ctx.op, &ctx.dims, PAST_ENVELOPE_BYTES);
    let flat = cmp03_flat::plan(ctx);
    let flat_note = match &flat {
        Ok(p) => format!("flat offsets past 2^31: probed at {}", p.dims),
        Err(why) => format!("flat offsets past 2^31: not probed ({why})"),
    };
    let mut declined = Vec::new();
    let mut probes: Vec<Labelled<'_>> = Vec::new();
    for (i, (label, d)) in shapes.iter().enumerate() {
        let seed = gate_seed(INFO.id, i as u64);
        probes.push((format!("{label} [{d}]"), Box::new(move || Some(value_probe(ctx, INFO.id, d, Dist::Normal, seed, BoundKind::Deterministic))), false));
    }
    for (i, p) in sizes.iter().enumerate() {
        let seed = gate_seed(INFO.id, 100 + i as u64);
        let past = p.past_envelope;
        probes.push((
            p.label.clone(),
            Box::new(move || {
                let op = if past { widened(ctx.op, p.dim, p.dims.get(p.dim)) } else { ctx.op.clone() };
                let wide = Ctx { op: &op, harness: ctx.harness, precision: ctx.precision, dims: ctx.dims.clone(), meta: ctx.meta };
                Some(value_probe(&wide, INFO.id, &p.dims, Dist::Normal, seed, BoundKind::Deterministic))
            }),
            past,
        ));
    }
    let mut layouts_note = String::from("layouts: not probed (the candidate receives dense tensors)");
    if ctx.harness.cand.supports_layouts() {
        layouts_note = "layouts: transposed, offset, expanded views".into();
        for (i, (label, l)) in layout_set(&ctx.op.input_shapes(&ctx.dims)).into_iter().enumerate() {
            probes.push((format!("{label} [{}]", ctx.dims), Box::new(move || layout_probe(ctx, INFO.id, i as u64, &l)), false));
        }
    }
    if let Ok(p) = &flat {
        probes.push((p.label.clone(), Box::new(move || Some(cmp03_flat::run_probe(ctx, INFO.id, p, gate_seed(INFO.id, 200)))), true));
    }
    let mut unconfirmed = Vec::new();
    for (l, probe, past) in &probes {
        let l = l.clone();
        let Some(p) = probe() else {
            unconfirmed.push(l);
            continue;
        };
        match p {
            Probe::NotApplicable(_) => continue,
            Probe::Runtime(e) => return GateResult::new(INFO, Status::Error, format!("{l}: {e}")),
            Probe::Refused(why) if *past => declined.push(format!("{l}: {why}")),
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
            let mut skipped = skipped;
            skipped.extend(skipped_sizes);
            if !unconfirmed.is_empty() {
                layouts_note = format!("layouts: not applied by the worker (no `layouts` echo): {}", unconfirmed.join("; "));
            }
            g.detail = format!(
                "{visited} shapes ok; worst {}; declined past the envelope: {}; {layouts_note}; {flat_note}; skipped: {}",
                g.detail,
                if declined.is_empty() { "none".into() } else { declined.join("; ") },
                if skipped.is_empty() { "none".into() } else { skipped.join("; ") }
            );
            g
        }
    }
}

