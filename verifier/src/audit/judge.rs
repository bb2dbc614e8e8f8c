//! Decisions of the audit: from the facts a worker measured to a gate status. The worker
//! (`verifier/python/audit_worker.py`) only measures; every bound, rule and applicability
//! decision is here, so it is tested without PyTorch (`tests/audit_judge.rs`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// fp32 unit roundoff.
pub const U32: f64 = 1.0 / 16_777_216.0;

/// Safety factor of CMP-01's bound over the honest fp32 spread (docs/audit.md, "CMP-01").
pub const CMP01_FACTOR: f64 = 16.0;

/// KernelBench's tolerances (atol = rtol): those of its v0.1 check (`run_and_check_correctness`
/// at commit 48642c5, kernelbench.rs), the `1e-2` of its published results and of CUDA-L1's
/// harness. (KernelBench's main branch takes `1e-4` for fp32 since 2c3dbda, 2025-11-04.)
pub const KB_TOL: f64 = 1e-2;

/// Status of one gate on one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Applicable and satisfied.
    Pass,
    /// Applicable and violated.
    Fail,
    /// The candidate crashed, hung, exited or raised: charged (rule 9: reported as such).
    Error,
    /// Not applicable (with a reason): never charged, never a pass.
    #[serde(rename = "n/a")]
    Na,
}

/// One gate's result on one kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// Status.
    pub status: Status,
    /// What was measured or why it does not apply.
    pub detail: String,
    /// Measured figure, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<f64>,
    /// Bound, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
}

impl GateResult {
    /// A result without figures.
    pub fn new(status: Status, detail: impl Into<String>) -> GateResult {
        GateResult { status, detail: detail.into(), measured: None, bound: None }
    }
}

/// Gates whose failure is `broken` (tolerance-free).
pub const TOLERANCE_FREE: [&str; 4] = ["RES-01", "ORD-02", "EXC-01", "EXC-02"];

/// The gates the audit runs, in order (`KB` is KernelBench's own check, kept apart from the
/// verdict; it is the other side of the differential). CMP-03 runs last: a candidate that
/// breaks its device (a CUDA fault) at another size then spoils no other gate's run.
pub const GATES: [&str; 11] = ["KB", "CMP-01", "RES-01", "ORD-01", "ORD-02", "ORD-03", "EXC-01", "EXC-02", "PRC-01", "PRC-02", "CMP-03"];

pub(super) fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn b(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

pub(super) fn arr<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map(|a| a.as_slice()).unwrap_or(&[])
}

pub(super) fn bad_facts(gate: &str, v: &Value) -> GateResult {
    GateResult::new(Status::Na, format!("{gate}: worker facts incomplete: {v}"))
}

/// KernelBench's check (kernelbench.rs): every trial has the reference's shape and is
/// `allclose` at atol = rtol = [`KB_TOL`] (the worker runs the trials as KernelBench does and
/// evaluates `allclose`; a NaN anywhere is not close). A trial whose reference run or
/// comparison raised (`error`) fails, as it does in KernelBench.
pub fn kernelbench(run: &Value) -> GateResult {
    let t = arr(run, "trials");
    if t.is_empty() {
        return bad_facts("KB", run);
    }
    let bad: Vec<String> = t
        .iter()
        .enumerate()
        .filter(|(_, x)| !(b(x, "shape_ok") && b(x, "allclose")) || x.get("error").is_some())
        .map(|(i, x)| match x.get("error").and_then(Value::as_str) {
            Some(e) => format!("trial {i}: {e}"),
            None => format!("trial {i}: {}", if b(x, "shape_ok") { "not allclose" } else { "shape differs" }),
        })
        .collect();
    if bad.is_empty() {
        GateResult::new(Status::Pass, format!("{} trials allclose (atol = rtol = {KB_TOL})", t.len()))
    } else {
        GateResult::new(Status::Fail, bad.join("; "))
    }
}

/// CMP-01 for an arbitrary task. Per seed, `h` is the largest normalised error of the task's
/// own Model run honestly in fp32 (two orderings) against its fp64 run, and the bound is
/// `16 · max(h, u32)`; the candidate's normalised error must be within it at every seed, with
/// no non-finite value where the reference is finite (docs/audit.md derives this).
pub fn cmp01(prep: &Value, run: &Value) -> GateResult {
    let ps = arr(prep, "seeds");
    let rs = arr(run, "seeds");
    if ps.is_empty() || ps.len() != rs.len() {
        return bad_facts("CMP-01", run);
    }
    let mut worst_margin = f64::INFINITY;
    let (mut measured, mut bound) = (0.0_f64, 0.0_f64);
    for (p, r) in ps.iter().zip(rs) {
        let seed = p.get("seed").cloned().unwrap_or(Value::Null);
        if !b(r, "shape_ok") {
            return GateResult::new(Status::Fail, format!("seed {seed}: output shape or count differs from the reference"));
        }
        let nf = r.get("nonfinite_where_ref_finite").and_then(Value::as_u64).unwrap_or(0);
        if nf > 0 {
            return GateResult::new(Status::Fail, format!("seed {seed}: {nf} non-finite values where the fp64 reference is finite"));
        }
        let h = arr(p, "honest").iter().filter_map(Value::as_f64).fold(0.0, f64::max);
        let bd = CMP01_FACTOR * h.max(U32);
        let Some(e) = f(r, "err") else { return bad_facts("CMP-01", r) };
        let margin = if e > 0.0 { bd / e } else { f64::INFINITY };
        if margin < worst_margin || (worst_margin.is_infinite() && margin.is_infinite() && bd > bound) {
            worst_margin = margin;
            measured = e;
            bound = bd;
        }
        if e > bd {
            return GateResult { status: Status::Fail, detail: format!("seed {seed}: normalised error {e:.3e} > bound {bd:.3e} (16 x honest fp32 spread {h:.3e})"), measured: Some(e), bound: Some(bd) };
        }
    }
    GateResult { status: Status::Pass, detail: format!("{} seeds; worst normalised error {measured:.3e} within {bound:.3e}", ps.len()), measured: Some(measured), bound: Some(bound) }
}

/// RES-01 on plain-tensor, same-device, same-dtype, non-aliasing, non-mutating, non-stale
/// outputs; an alias or mutation the task's own Model also shows is its contract (exempt).
pub fn res01(prep: &Value, run: &Value) -> GateResult {
    let calls = arr(run, "calls");
    if calls.is_empty() {
        return bad_facts("RES-01", run);
    }
    let ref_alias: Vec<&Value> = arr(prep, "ref_alias").iter().collect();
    let ref_mut: Vec<&Value> = arr(prep, "ref_mutated").iter().collect();
    let mut why = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if !b(c, "type_exact") {
            why.push(format!("call {i}: output is not a plain torch.Tensor ({})", c.get("types").map(|t| t.to_string()).unwrap_or_default()));
        }
        if !b(c, "device_ok") {
            why.push(format!("call {i}: output on {} (inputs' device expected)", c.get("devices").map(|t| t.to_string()).unwrap_or_default()));
        }
        if !b(c, "dtype_ok") {
            why.push(format!("call {i}: output dtype {} differs from the reference's", c.get("dtypes").map(|t| t.to_string()).unwrap_or_default()));
        }
        if !b(c, "shape_ok") {
            why.push(format!("call {i}: output shape or count differs from the reference's"));
        }
        let al: Vec<String> = arr(c, "alias").iter().filter(|a| !ref_alias.contains(a)).map(|a| a.to_string()).collect();
        if !al.is_empty() {
            why.push(format!("call {i}: output aliases input [output, input] {}", al.join(", ")));
        }
        let mu: Vec<String> = arr(c, "mutated").iter().filter(|a| !ref_mut.contains(a)).map(|a| a.to_string()).collect();
        if !mu.is_empty() {
            why.push(format!("call {i}: input(s) {} changed", mu.join(", ")));
        }
    }
    if b(run, "stale_candidate") && b(prep, "ref_changes") {
        why.push("stale: the second call returned the first call's answer while the reference changed".into());
    }
    if why.is_empty() {
        GateResult::new(Status::Pass, format!("{} calls: plain tensors on the inputs' device, dtype and shape as the reference, no alias, no input change, not stale", calls.len()))
    } else {
        GateResult::new(Status::Fail, why.join("; "))
    }
}

/// ORD-02's run in a fresh process: the candidate's output hash there and, when the reference
/// side could run there too, the task's own fp32 Model's.
#[derive(Clone, Copy, Debug)]
pub struct FreshRun<'a> {
    /// The candidate's output hash in the fresh process.
    pub candidate: &'a str,
    /// The task's own fp32 Model's output hash there (`None`: its reference side did not run).
    pub reference: Option<&'a str>,
}

/// ORD-02: bitwise identical outputs over the runs and once in a fresh process; `n/a` when the
/// task's own fp32 Model is not deterministic. When the Model itself gives other bits in the
/// fresh process (a library's algorithm choice: cuDNN picks convolution algorithms per process,
/// by heuristics that see the free memory), the fresh run is not judged: the runs in one
/// process are (fairness: the positive control must pass its own gate).
pub fn ord02(prep: &Value, run: &Value, fresh: Option<FreshRun<'_>>) -> GateResult {
    let rh: Vec<&str> = arr(prep, "ref_hashes").iter().filter_map(Value::as_str).collect();
    let ch: Vec<&str> = arr(run, "hashes").iter().filter_map(Value::as_str).collect();
    if rh.is_empty() || ch.is_empty() {
        return bad_facts("ORD-02", run);
    }
    if rh.iter().any(|h| *h != rh[0]) {
        let distinct = distinct(&rh);
        return GateResult::new(Status::Na, format!("the task's own fp32 Model is not deterministic ({distinct} distinct outputs over {} runs)", rh.len()));
    }
    let reference_moved = fresh.is_some_and(|f| f.reference.is_some_and(|r| r != rh[0]));
    let mut all = ch.clone();
    let fresh_note = match fresh {
        Some(_) if reference_moved => "; the fresh process not judged: the task's own fp32 Model gives other bits there",
        Some(f) => {
            all.push(f.candidate);
            " (incl. one in a fresh process)"
        }
        None => "",
    };
    let d = distinct(&all);
    let runs = all.len();
    let differing = all.iter().filter(|h| **h != all[0]).count();
    if d == 1 {
        GateResult { status: Status::Pass, detail: format!("{runs} runs{fresh_note}; all bitwise identical"), measured: Some(0.0), bound: Some(0.0) }
    } else {
        let first = all.iter().position(|h| *h != all[0]).unwrap_or(0);
        GateResult { status: Status::Fail, detail: format!("{d} distinct outputs over {runs} runs{fresh_note}, first difference at run {first}"), measured: Some(differing as f64), bound: Some(0.0) }
    }
}

fn distinct(v: &[&str]) -> usize {
    let mut s: Vec<&str> = v.to_vec();
    s.sort_unstable();
    s.dedup();
    s.len()
}

/// EXC-01: NaN injected into every floating input (1 per 256 elements); the class masks
/// {NaN, +Inf, -Inf, finite} of the candidate's output must equal those of the fp64 reference
/// rounded to the output dtype. `n/a` without a floating input, or where the task's own fp32
/// Model disagrees with its fp64 reference (fairness rule 1).
pub fn exc01(prep: &Value, run: &Value) -> GateResult {
    if !b(prep, "applicable") {
        return GateResult::new(Status::Na, prep.get("reason").and_then(Value::as_str).unwrap_or("not applicable").to_string());
    }
    if !b(prep, "own_fp32_agrees") {
        return GateResult::new(Status::Na, "the task's own fp32 Model's non-finite pattern differs from its fp64 reference's");
    }
    let Some(m) = run.get("mismatches").and_then(Value::as_i64) else { return bad_facts("EXC-01", run) };
    let total = run.get("total").and_then(Value::as_u64).unwrap_or(0);
    let swallowed = run.get("swallowed").and_then(Value::as_u64).unwrap_or(0);
    match m {
        0 => GateResult { status: Status::Pass, detail: format!("class masks equal over {total} elements"), measured: Some(0.0), bound: Some(0.0) },
        m if m < 0 => GateResult::new(Status::Fail, "output count or size differs under NaN inputs"),
        m => GateResult {
            status: Status::Fail,
            detail: format!("{m} of {total} elements in another class than the reference ({swallowed} non-finite turned finite)"),
            measured: Some(m as f64),
            bound: Some(0.0),
        },
    }
}

/// Overall verdict of a kernel from its gates: `broken` when a tolerance-free gate failed or the
/// candidate crashed, hung or raised in any call (KernelBench's runs included: a crash is a crash
/// wherever it happens), `violation` when a thresholded gate failed, else `clean`. KernelBench's
/// own pass/fail does not enter the verdict.
pub fn verdict(gates: &std::collections::BTreeMap<String, GateResult>) -> &'static str {
    let mut v = "clean";
    for (id, g) in gates {
        if id == "KB" && g.status != Status::Error {
            continue;
        }
        match g.status {
            Status::Error => return "broken",
            Status::Fail if TOLERANCE_FREE.contains(&id.as_str()) => return "broken",
            Status::Fail => v = "violation",
            _ => {}
        }
    }
    v
}
