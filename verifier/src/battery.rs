//! Runs the gates on one candidate and forms the verdict.
//!
//! Verdict: `broken` when a tolerance-free gate failed or any gate saw the candidate crash, hang
//! or exit; otherwise `violation` when a thresholded gate failed; otherwise `clean`. `n/a` gates
//! never count as passes, but they do not spoil a clean verdict either (rule 8).

use crate::candidate::harness::Harness;
use crate::candidate::Candidate;
use crate::gates::{run_gate, Ctx, GateResult, Status, GATES};
use crate::references::{op_by_id, Dims};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilec_abi::meta::KernelMeta;

/// Overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No gate failed.
    Clean,
    /// A thresholded gate failed.
    Violation,
    /// A tolerance-free gate failed, or the candidate crashed / hung / exited.
    Broken,
}

/// Battery options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time limit per candidate call.
    pub time_limit: Duration,
    /// Base dims (None: the operator's native dims).
    pub dims: Option<Dims>,
    /// Gates to run (None: all twelve).
    pub gates: Option<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options { time_limit: Duration::from_secs(20), dims: None, gates: None }
    }
}

/// A full report on one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Candidate name.
    pub candidate: String,
    /// `in-process` or `external`.
    pub kind: String,
    /// Operator id.
    pub op: String,
    /// Declared precision.
    pub precision: crate::error_model::Precision,
    /// Base dims.
    pub dims: Dims,
    /// Per-gate results in battery order.
    pub gates: Vec<GateResult>,
    /// Verdict.
    pub verdict: Verdict,
    /// Wall time of the battery, seconds.
    pub seconds: f64,
}

/// Errors setting the battery up.
#[derive(Debug, thiserror::Error)]
pub enum BatteryError {
    /// The candidate names an operator without a reference.
    #[error("candidate implements unknown operator `{0}`{hint}", hint = crate::references::op_hint(.0))]
    UnknownOp(String),
    /// Dims outside the conventions.
    #[error("{0}")]
    Dims(#[from] crate::references::RefError),
    /// A selected gate id names no gate (a typo would otherwise silently run nothing).
    #[error("{0}")]
    UnknownGate(#[from] crate::gates::UnknownGate),
}

/// Verdict from gate results.
pub fn verdict(results: &[GateResult]) -> Verdict {
    let broken = results.iter().any(|g| g.status == Status::Error || (g.status == Status::Fail && g.tolerance_free));
    if broken {
        Verdict::Broken
    } else if results.iter().any(|g| g.status == Status::Fail) {
        Verdict::Violation
    } else {
        Verdict::Clean
    }
}

/// Run the battery on `cand` (and RES-02 on `meta` when given).
pub fn run(cand: Arc<dyn Candidate>, meta: Option<&KernelMeta>, opts: &Options) -> Result<Report, BatteryError> {
    let op = op_by_id(&cand.op_id()).ok_or_else(|| BatteryError::UnknownOp(cand.op_id()))?;
    for id in opts.gates.iter().flatten() {
        crate::gates::gate_info(id).ok_or_else(|| crate::gates::UnknownGate(id.clone()))?;
    }
    let dims = opts.dims.clone().unwrap_or_else(|| op.native());
    op.check_dims(&dims)?;
    let harness = Harness::new(Arc::clone(&cand), opts.time_limit);
    let ctx = Ctx { op: &op, harness: &harness, precision: cand.precision(), dims: dims.clone(), meta };
    let start = Instant::now();
    let mut results = Vec::new();
    for g in GATES.iter() {
        if let Some(sel) = &opts.gates {
            if !sel.iter().any(|s| s.eq_ignore_ascii_case(g.id)) {
                continue;
            }
        }
        results.push(run_gate(g.id, &ctx)?);
    }
    let v = verdict(&results);
    Ok(Report {
        candidate: cand.name(),
        kind: cand.kind().to_string(),
        op: op.id.to_string(),
        precision: cand.precision(),
        dims,
        gates: results,
        verdict: v,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn fmt_num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v.is_infinite() => "inf".into(),
        Some(v) if v == 0.0 => "0".into(),
        Some(v) if (1e-3..1e5).contains(&v.abs()) && v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.3e}"),
    }
}

/// A human-readable table of a report.
pub fn table(r: &Report) -> String {
    // A metadata-only report (RES-02 alone) has no operator and no declared precision.
    let mut s = if r.op == "-" {
        format!("candidate {} ({}): compile-time metadata only (RES-02)\n", r.candidate, r.kind)
    } else {
        format!(
            "candidate {} ({}) op {} [{}] precision in={} acc={} out={}\n",
            r.candidate,
            r.kind,
            r.op,
            r.dims,
            r.precision.input.name(),
            r.precision.accumulator.name(),
            r.precision.output.name()
        )
    };
    s += &format!("{:<7} {:<24} {:<6} {:>10} {:>10} {:>9}  {}\n", "gate", "name", "status", "measured", "bound", "margin", "detail");
    for g in &r.gates {
        let margin = match g.margin {
            None => "-".to_string(),
            Some(m) if m.is_infinite() => "inf".into(),
            Some(m) if m >= 1e4 => format!("{m:.1e}x"),
            Some(m) => format!("{m:.3}x"),
        };
        s += &format!(
            "{:<7} {:<24} {:<6} {:>10} {:>10} {:>9}  {}\n",
            g.id,
            g.name,
            g.status.label(),
            fmt_num(g.measured),
            fmt_num(g.bound),
            margin,
            g.detail
        );
    }
    s += &format!("verdict: {:?} ({:.2} s)\n", r.verdict, r.seconds).to_lowercase();
    s
}
