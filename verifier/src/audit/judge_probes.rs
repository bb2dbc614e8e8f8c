//! Decisions of the audit's probe gates for arbitrary tasks: CMP-03 (the task's size constants
//! changed consistently), ORD-01 (typical error of a reordering), ORD-03 (~40 binades), EXC-02
//! (subnormals), PRC-01 (declared precision) and PRC-02 (fp32 accumulation). The worker
//! (`verifier/python/audit_gates.py`) measures; the bounds and applicability rules are here and
//! derived in docs/audit.md ("The gates for arbitrary tasks").
//!
//! Facts of a value gate (all but EXC-02): `prepare` = `{"probes": [{"name", "na"?, "ref_error"?,
//! "honest": [a, b], "own_nonfinite", "finite", "ref_max", "sizes"?, "layouts"?}]}`, `run` = `{"probes":
//! [{"name", "err", "nonfinite_where_ref_finite", "shape_ok", "raised"?, "fits"?}]}`. `honest`
//! and `err` are dimensionless normalised errors `|y − r| / (|r| + mean|r|)` against the task's
//! fp64 Model (their maximum; for ORD-01 their root mean square).

use super::judge::{arr, bad_facts, f, GateResult, Status, CMP01_FACTOR, U32};
use serde_json::Value;

/// PRC-02 applies when some output of the fp64 reference at U[1,2) inputs reaches 2^11: from
/// there on the spacing of fp16 is 2 or more, so an fp16 running sum rounds away up to a whole
/// unit of every U[1,2)-sized term it adds (docs/audit.md, "PRC-02").
pub const PRC02_MIN_REF: f64 = 2048.0;

fn name(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or("?")
}

/// Why a prepared probe does not apply (`None`: it applies).
fn probe_na(gate: &str, p: &Value) -> Option<String> {
    if let Some(why) = p.get("na").and_then(Value::as_str) {
        return Some(why.into()); // the worker found nothing to probe (no size constant, no input to lay out)
    }
    if let Some(e) = p.get("ref_error").and_then(Value::as_str) {
        return Some(format!("the task's own Model cannot run here: {e}"));
    }
    if f(p, "finite").unwrap_or(0.0) == 0.0 {
        return Some("the fp64 reference has no finite output".into());
    }
    if f(p, "own_nonfinite").unwrap_or(0.0) > 0.0 {
        return Some("the task's own fp32 Model is non-finite where its fp64 reference is finite".into());
    }
    if gate == "PRC-02" && f(p, "ref_max").unwrap_or(0.0) < PRC02_MIN_REF {
        return Some(format!("no output reaches {PRC02_MIN_REF} at U[1,2) inputs: no long positive reduction to accumulate in fp16"));
    }
    None
}

fn sizes(p: &Value) -> String {
    p.get("sizes").and_then(Value::as_object).map(|m| format!(" [{}]", m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))).unwrap_or_default()
}

/// A value gate: per applicable probe, the candidate's error `err` (against the fp64 reference
/// at the probe's inputs) must be at most `16 · max(h, u32)`, `h` the larger of the two honest
/// fp32 runs' errors at the same inputs (the factor and floor of CMP-01); its shapes must agree
/// and it may not be non-finite where the reference is finite. At CMP-03's sizes an exception
/// (building or calling ModelNew) is a refusal: `fail`, named `rejected`. `n/a` when no probe
/// applies, with each probe's reason (the reference cannot run, no finite reference output,
/// the task's own fp32 Model non-finite where fp64 is finite, for PRC-02 no output ≥ 2^11).
/// The result carries the measured error and bound of the probe with the smallest margin.
/// Errors: facts missing a field the decision needs give `n/a` naming them (never a panic).
pub fn value_gate(gate: &str, prep: &Value, run: &Value) -> GateResult {
    let ps = arr(prep, "probes");
    if ps.is_empty() {
        if gate == "CMP-03" && prep.get("constants").is_some() {
            return GateResult::new(Status::Na, "no module-level size constant shapes the inputs (sizes are literals): nothing to change consistently");
        }
        return bad_facts(gate, prep);
    }
    let stat = if gate == "ORD-01" { "rms normalised error" } else { "normalised error" };
    let (mut na, mut applied) = (Vec::new(), 0usize);
    let (mut worst_margin, mut measured, mut bound) = (f64::INFINITY, 0.0_f64, 0.0_f64);
    for p in ps {
        if let Some(why) = probe_na(gate, p) {
            na.push(format!("{}{}: {why}", name(p), sizes(p)));
            continue;
        }
        let Some(r) = arr(run, "probes").iter().find(|r| name(r) == name(p)) else { return bad_facts(gate, run) };
        applied += 1;
        let at = format!("{}{}", name(p), sizes(p));
        if let Some(e) = r.get("raised").and_then(Value::as_str) {
            return GateResult::new(Status::Fail, format!("rejected at {at}: {e}"));
        }
        if r.get("shape_ok").and_then(Value::as_bool) != Some(true) {
            return GateResult::new(Status::Fail, format!("wrong at {at}: output shape or count differs from the reference"));
        }
        let nf = f(r, "nonfinite_where_ref_finite").unwrap_or(0.0);
        if nf > 0.0 {
            return GateResult::new(Status::Fail, format!("wrong at {at}: {nf} non-finite values where the fp64 reference is finite"));
        }
        let h = arr(p, "honest").iter().filter_map(Value::as_f64).fold(0.0, f64::max);
        let bd = CMP01_FACTOR * h.max(U32);
        let Some(e) = f(r, "err") else { return bad_facts(gate, r) };
        if e > bd {
            let why = if gate == "PRC-01" { format!("; {}", reduced_precision(r, bd)) } else { String::new() };
            return GateResult { status: Status::Fail, detail: format!("wrong at {at}: {stat} {e:.3e} > bound {bd:.3e} (16 x honest fp32 {h:.3e}){why}"), measured: Some(e), bound: Some(bd) };
        }
        let margin = if e > 0.0 { bd / e } else { f64::INFINITY };
        if margin < worst_margin || (margin.is_infinite() && worst_margin.is_infinite() && bd > bound) {
            (worst_margin, measured, bound) = (margin, e, bd);
        }
    }
    let na_note = if na.is_empty() { String::new() } else { format!("; n/a: {}", na.join("; ")) };
    if applied == 0 {
        return GateResult::new(Status::Na, format!("no probe applies: {}", na.join("; ")));
    }
    GateResult { status: Status::Pass, detail: format!("{applied} of {} probes; worst {stat} {measured:.3e} within {bound:.3e}{na_note}", ps.len()), measured: Some(measured), bound: Some(bound) }
}

/// PRC-01's diagnosis: the first (widest) reduced-precision model — the fp64 reference at the
/// inputs rounded to P — whose error against the candidate is within the bound.
fn reduced_precision(r: &Value, bound: f64) -> String {
    for f in arr(r, "fits") {
        let (Some(label), Some(e)) = (f.get(0).and_then(Value::as_str), f.get(1).and_then(Value::as_f64)) else { continue };
        if e <= bound {
            return format!("matches {label} (error {e:.3e} against the fp64 Model at inputs rounded so)");
        }
    }
    "matches no reduced-precision model".into()
}

/// EXC-02: at subnormal inputs and at tiny inputs whose products underflow, the sign classes
/// {0, +, −, NaN, +Inf, −Inf} of the candidate's outputs must equal those of the fp64 reference
/// rounded to the output dtype, at every compared position (where both honest fp32 runs have
/// the reference's class and |r| exceeds 16 × their largest absolute error; all positions when
/// the honest runs are exact). Tolerance-free. `n/a` when no probe compares any position.
/// Errors: incomplete facts give `n/a` naming them.
pub fn exc02(prep: &Value, run: &Value) -> GateResult {
    let ps = arr(prep, "probes");
    if ps.is_empty() {
        return bad_facts("EXC-02", prep);
    }
    let (mut na, mut compared, mut subs) = (Vec::new(), 0u64, 0u64);
    for p in ps {
        if let Some(e) = p.get("ref_error").and_then(Value::as_str) {
            na.push(format!("{}: the task's own Model cannot run here: {e}", name(p)));
            continue;
        }
        let c = p.get("compared").and_then(Value::as_u64).unwrap_or(0);
        if c == 0 {
            na.push(format!("{}: no position where the honest fp32 runs keep the reference's class beyond their rounding band", name(p)));
            continue;
        }
        let Some(r) = arr(run, "probes").iter().find(|r| name(r) == name(p)) else { return bad_facts("EXC-02", run) };
        if r.get("shape_ok").and_then(Value::as_bool) != Some(true) {
            return GateResult::new(Status::Fail, format!("{}: output count or size differs", name(p)));
        }
        let Some(m) = r.get("mismatches").and_then(Value::as_u64) else { return bad_facts("EXC-02", r) };
        if m > 0 {
            let fl = r.get("flushed").and_then(Value::as_u64).unwrap_or(0);
            return GateResult { status: Status::Fail, detail: format!("{} inputs: {m} of {c} compared elements in another sign class than the reference ({fl} non-zero flushed to 0)", name(p)), measured: Some(m as f64), bound: Some(0.0) };
        }
        compared += c;
        subs += p.get("ref_subnormal").and_then(Value::as_u64).unwrap_or(0);
    }
    if compared == 0 {
        return GateResult::new(Status::Na, format!("no probe applies: {}", na.join("; ")));
    }
    let na_note = if na.is_empty() { String::new() } else { format!("; n/a: {}", na.join("; ")) };
    GateResult { status: Status::Pass, detail: format!("sign classes equal at {compared} compared elements ({subs} subnormal in the rounded reference){na_note}"), measured: Some(0.0), bound: Some(0.0) }
}
