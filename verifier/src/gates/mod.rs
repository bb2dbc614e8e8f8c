//! The twelve gates. Each module documents the question it asks, its decision rule and the
//! source of its bound; this module holds the shared vocabulary (status, result, context) and
//! the probe machinery the value gates share.

pub mod cmp01_value;
pub mod cmp02_gradient;
pub mod cmp03_flat;
pub mod cmp03_probes;
pub mod cmp03_shapes;
pub mod compare;
pub mod exc01_nonfinite;
pub mod exc01_probes;
pub mod exc02_probes;
pub mod exc02_subnormal;
pub mod inputs;
pub mod ord01_reduction_order;
pub mod ord02_determinism;
pub mod ord03_backstop;
pub mod prc01_precision;
pub mod prc02_accumulation;
pub mod res01_runtime;
pub mod res02_compile;

use crate::candidate::harness::Harness;
use crate::candidate::CandidateError;
use crate::error_model::{BoundKind, Precision};
use crate::references::{Dims, Op};
use crate::tensor::Tensor;
use compare::ValueReport;
use inputs::Dist;
use serde::Serialize;
use tilec_abi::meta::KernelMeta;

/// Outcome of one gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The property holds on every probe.
    Pass,
    /// The property fails.
    Fail,
    /// The gate cannot apply (never reported as pass; rule 8).
    #[serde(rename = "n/a")]
    NotApplicable,
    /// The candidate crashed, hung or exited during the gate (rule 9).
    Error,
}

impl Status {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::NotApplicable => "n/a",
            Status::Error => "ERROR",
        }
    }
}

/// Static description of a gate.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GateInfo {
    /// Id such as `CMP-01`.
    pub id: &'static str,
    /// Short name.
    pub name: &'static str,
    /// True for gates that compare by mask, bytes or hard limits.
    pub tolerance_free: bool,
    /// The question the gate asks.
    pub question: &'static str,
}

/// The twelve gates, in battery order.
pub const GATES: [GateInfo; 12] = [
    cmp01_value::INFO,
    cmp02_gradient::INFO,
    cmp03_shapes::INFO,
    ord01_reduction_order::INFO,
    ord02_determinism::INFO,
    ord03_backstop::INFO,
    exc01_nonfinite::INFO,
    exc02_subnormal::INFO,
    prc01_precision::INFO,
    prc02_accumulation::INFO,
    res01_runtime::INFO,
    res02_compile::INFO,
];

/// Look a gate up by id (case-insensitive).
pub fn gate_info(id: &str) -> Option<GateInfo> {
    GATES.iter().copied().find(|g| g.id.eq_ignore_ascii_case(id))
}

/// Result of one gate on one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct GateResult {
    /// Gate id.
    pub id: &'static str,
    /// Gate name.
    pub name: &'static str,
    /// Whether the gate is tolerance-free.
    pub tolerance_free: bool,
    /// Outcome.
    pub status: Status,
    /// The measured figure (worst error, or a mismatch count for tolerance-free gates).
    pub measured: Option<f64>,
    /// The bound it was held to (at the worst element).
    pub bound: Option<f64>,
    /// bound / measured: how many times the figure could grow before failing (inf when 0).
    pub margin: Option<f64>,
    /// Human-readable details: which probe, where, why.
    pub detail: String,
}

impl GateResult {
    /// A result of `info` with everything but status and detail empty.
    pub fn new(info: GateInfo, status: Status, detail: impl Into<String>) -> GateResult {
        GateResult {
            id: info.id,
            name: info.name,
            tolerance_free: info.tolerance_free,
            status,
            measured: None,
            bound: None,
            margin: None,
            detail: detail.into(),
        }
    }
}

/// Everything a gate needs.
pub struct Ctx<'a> {
    /// Operator class (with its fp64 reference).
    pub op: &'a Op,
    /// The candidate behind its harness.
    pub harness: &'a Harness,
    /// The candidate's declared precision.
    pub precision: Precision,
    /// Base dims (the op's native dims unless overridden).
    pub dims: Dims,
    /// Compile-time metadata, when the candidate is a compiled artifact.
    pub meta: Option<&'a KernelMeta>,
}

/// What one value probe produced.
#[derive(Debug, Clone)]
pub enum Probe {
    /// The reference refused or failed on these inputs (rule 1: never charged).
    NotApplicable(String),
    /// The candidate crashed, hung or exited (rule 9).
    Runtime(CandidateError),
    /// The candidate declined the input.
    Refused(String),
    /// The values were compared.
    Values(ValueReport),
}

/// What a compared value probe fed the reference and what the candidate answered, kept for a
/// gate that explains its verdict beyond the worst ratio (PRC-01).
#[derive(Debug, Clone)]
pub struct ProbeData {
    /// The probe's inputs as the reference saw them: f64 tensors, already rounded to the
    /// declared input dtype (a separate allocation from the candidate's copy, rule 10).
    pub inputs: Vec<Tensor>,
    /// The candidate's outputs.
    pub outputs: Vec<Tensor>,
}

/// Run one value probe: generate inputs, run the reference and the candidate, compare.
pub fn value_probe(ctx: &Ctx, gate: &str, dims: &Dims, dist: Dist, seed: u64, kind: BoundKind) -> Probe {
    value_probe_data(ctx, gate, dims, dist, seed, kind).0
}

/// [`value_probe`], also handing back the inputs and the candidate's outputs when the values
/// were compared (`Some` exactly when the probe is [`Probe::Values`]).
pub fn value_probe_data(ctx: &Ctx, gate: &str, dims: &Dims, dist: Dist, seed: u64, kind: BoundKind) -> (Probe, Option<ProbeData>) {
    value_probe_with(ctx, gate, dims, inputs::generate(ctx.op, dims, dist, seed, ctx.precision.input), kind)
}

/// [`value_probe_data`] on inputs the gate built itself.
pub fn value_probe_with(ctx: &Ctx, gate: &str, dims: &Dims, inp: inputs::Inputs, kind: BoundKind) -> (Probe, Option<ProbeData>) {
    let r = match ctx.op.forward(dims, &inp.reference) {
        Ok(r) => r,
        Err(e) => return (Probe::NotApplicable(e.to_string()), None),
    };
    let call = ctx.harness.forward(gate, dims, inp.candidate);
    match call.outcome {
        Err(e) if e.is_runtime_failure() => (Probe::Runtime(e), None),
        Err(e) => (Probe::Refused(e.to_string()), None),
        Ok(outs) => {
            let v = compare::compare(&r, &outs, &ctx.precision, kind);
            (Probe::Values(v), Some(ProbeData { inputs: inp.reference, outputs: outs }))
        }
    }
}

/// Fold labelled value probes into a gate result: all n/a -> n/a; any runtime failure -> error;
/// any refusal -> fail (`rejected`); otherwise pass iff the worst err/bound ratio <= 1.
pub fn fold_value_probes(info: GateInfo, probes: Vec<(String, Probe)>) -> GateResult {
    let mut worst: Option<(String, ValueReport)> = None;
    let mut na = Vec::new();
    for (label, p) in probes {
        match p {
            Probe::NotApplicable(why) => na.push(format!("{label}: {why}")),
            Probe::Runtime(e) => return GateResult::new(info, Status::Error, format!("{label}: {e}")),
            Probe::Refused(why) => return GateResult::new(info, Status::Fail, format!("rejected at {label}: {why}")),
            Probe::Values(v) => {
                if worst.as_ref().map(|(_, w)| v.worst_ratio > w.worst_ratio || v.structural.is_some()).unwrap_or(true) {
                    worst = Some((label, v));
                }
                if worst.as_ref().map(|(_, w)| w.structural.is_some()).unwrap_or(false) {
                    break;
                }
            }
        }
    }
    let Some((label, v)) = worst else {
        return GateResult::new(info, Status::NotApplicable, format!("reference not applicable: {}", na.join("; ")));
    };
    value_result(info, &label, &v)
}

/// Turn one value report into a gate result with measured figure, bound and margin.
pub fn value_result(info: GateInfo, label: &str, v: &ValueReport) -> GateResult {
    if let Some(s) = &v.structural {
        return GateResult::new(info, Status::Fail, format!("wrong at {label}: {s}"));
    }
    let status = if v.passed() { Status::Pass } else { Status::Fail };
    let mut g = GateResult::new(
        info,
        status,
        format!(
            "{}{label}: worst |err| {:.3e} vs bound {:.3e} at output {} element {} (ref {:.4e}); {} compared, {} non-finite left to EXC-01",
            if status == Status::Fail { "wrong at " } else { "" },
            v.worst_err,
            v.worst_bound,
            v.worst_at.0,
            v.worst_at.1,
            v.worst_ref,
            v.compared,
            v.excluded_nonfinite
        ),
    );
    g.measured = Some(v.worst_err);
    g.bound = Some(v.worst_bound);
    g.margin = Some(if v.worst_ratio == 0.0 { f64::INFINITY } else { 1.0 / v.worst_ratio });
    g
}

/// The verdict of a tolerance-free mask gate (EXC-01, EXC-02): pass only with zero
/// mismatches; `summary` says what was counted, `first` names the first mismatch.
pub fn mask_result(info: GateInfo, mismatches: usize, summary: String, first: Option<String>) -> GateResult {
    let status = if mismatches == 0 { Status::Pass } else { Status::Fail };
    let mut g = GateResult::new(info, status, format!("{summary}{}", first.map(|f| format!("; first: {f}")).unwrap_or_default()));
    g.measured = Some(mismatches as f64);
    g.bound = Some(0.0);
    g
}

/// An id that names none of the twelve gates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown gate `{0}` (see `kverify gates`)")]
pub struct UnknownGate(pub String);

/// Each gate with the function that runs it, in battery order (the order of [`GATES`]).
const RUNNERS: [(GateInfo, fn(&Ctx) -> GateResult); 12] = [
    (cmp01_value::INFO, cmp01_value::run),
    (cmp02_gradient::INFO, cmp02_gradient::run),
    (cmp03_shapes::INFO, cmp03_shapes::run),
    (ord01_reduction_order::INFO, ord01_reduction_order::run),
    (ord02_determinism::INFO, ord02_determinism::run),
    (ord03_backstop::INFO, ord03_backstop::run),
    (exc01_nonfinite::INFO, exc01_nonfinite::run),
    (exc02_subnormal::INFO, exc02_subnormal::run),
    (prc01_precision::INFO, prc01_precision::run),
    (prc02_accumulation::INFO, prc02_accumulation::run),
    (res01_runtime::INFO, res01_runtime::run),
    (res02_compile::INFO, res02_compile::run),
];

/// Run one gate by id (case-insensitive, like [`gate_info`]).
///
/// # Errors
/// [`UnknownGate`] for an id that names no gate: no result is made up for it (it used to come
/// back as an n/a result labelled RES-02).
pub fn run_gate(id: &str, ctx: &Ctx) -> Result<GateResult, UnknownGate> {
    let (_, run) = RUNNERS.iter().find(|(info, _)| info.id.eq_ignore_ascii_case(id)).ok_or_else(|| UnknownGate(id.to_string()))?;
    Ok(run(ctx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::harness::Harness;
    use crate::references::op_by_id;
    use std::sync::Arc;
    use std::time::Duration;

    fn with_ctx(f: impl FnOnce(&Ctx)) {
        let op = op_by_id("matmul").expect("matmul");
        let cand = crate::candidate::inprocess::honest(&op, Precision::F32);
        let harness = Harness::new(Arc::new(cand), Duration::from_secs(30));
        let ctx = Ctx { op: &op, harness: &harness, precision: Precision::F32, dims: op.native(), meta: None };
        f(&ctx);
    }

    #[test]
    fn unknown_gate_is_an_error_naming_it() {
        with_ctx(|ctx| {
            let e = run_gate("XYZ-99", ctx).expect_err("no such gate");
            assert_eq!(e, UnknownGate("XYZ-99".into()));
            assert!(e.to_string().contains("`XYZ-99`"), "{e}");
        });
    }

    #[test]
    fn every_gate_has_its_runner() {
        let ids = |v: &[GateInfo]| v.iter().map(|g| g.id).collect::<Vec<_>>();
        assert_eq!(ids(&RUNNERS.map(|(g, _)| g)), ids(&GATES));
        with_ctx(|ctx| {
            // RES-02 needs no candidate run, so the check is cheap; its lower-case spelling must
            // reach it (the battery accepts `res-02`), and its result carries its own id.
            let r = run_gate("res-02", ctx).expect("known");
            assert_eq!(r.id, "RES-02");
        });
    }
}
