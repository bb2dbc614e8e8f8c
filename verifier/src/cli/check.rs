//! `kverify check`: run the battery on one candidate (and/or RES-02 on a metadata file),
//! print the per-gate table and the verdict, write a JSON report, exit 0 only when clean.

use super::candidates::resolve;
use crate::battery::{self, Options, Report, Verdict};
use crate::gates::res02_compile;
use crate::references::{op_by_id, Dims};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `kverify check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Candidate: `builtin:honest`, `builtin:<trick>`, `builtin:honest:<op>`, or an external
    /// manifest (`*.json`, see docs/candidate-protocol.md). Optional with --meta.
    pub candidate: Option<String>,
    /// tilec metadata (`*.meta.json`) for RES-02.
    #[arg(long)]
    pub meta: Option<PathBuf>,
    /// Where to write the JSON report (default: kverify-report.json).
    #[arg(long, default_value = "kverify-report.json")]
    pub json: PathBuf,
    /// Time limit per candidate call, seconds.
    #[arg(long, default_value_t = 20.0, value_parser = super::seconds)]
    pub time_limit: f64,
    /// Memory limit of an external candidate's process, MiB.
    #[arg(long, default_value_t = 4096)]
    pub mem_limit_mb: u64,
    /// Base dims instead of the operator's native ones, e.g. `M=128,K=256,N=64`.
    #[arg(long)]
    pub dims: Option<String>,
    /// Run only these gates (repeatable).
    #[arg(long = "gate")]
    pub gates: Vec<String>,
    /// A tilec kernel as the candidate (instead of CANDIDATE).
    #[command(flatten)]
    pub tilec: super::tilec_args::TilecArgs,
}

/// Errors of `kverify check`.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Nothing to check.
    #[error("give a candidate (or --tilec-kernel / --tilec-artifact), --meta FILE, or both")]
    Nothing,
    /// --precision without a tilec candidate.
    #[error("--precision `{0}` declares a tilec candidate's precision, and none is named (--tilec-kernel / --tilec-operator / --tilec-artifact); an external candidate declares its precision in its manifest")]
    PrecisionWithoutTilec(String),
    /// Both a CANDIDATE and a tilec kernel.
    #[error("give either CANDIDATE or --tilec-kernel / --tilec-artifact, not both")]
    TwoCandidates,
    /// The tilec options do not describe a candidate.
    #[error(transparent)]
    Tilec(#[from] super::tilec_args::TilecArgsError),
    /// A GPU artifact was named on a machine without a GPU: nothing can be judged but RES-02.
    #[error("{0}; judge it on a GPU machine (RES-02 alone: kverify check --meta FILE)")]
    NoGpu(String),
    /// Bad --dims.
    #[error("bad --dims `{0}`: expected NAME=VALUE pairs separated by commas, naming every dim of the operator")]
    Dims(String),
    /// Candidate could not be resolved.
    #[error(transparent)]
    Resolve(#[from] super::candidates::ResolveError),
    /// Battery set-up failed.
    #[error(transparent)]
    Battery(#[from] battery::BatteryError),
    /// Metadata could not be read.
    #[error(transparent)]
    Meta(#[from] res02_compile::MetaError),
    /// Report could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// An unknown gate id.
    #[error("unknown gate `{0}` (see `kverify gates`)")]
    Gate(String),
}

/// Parse `M=1,K=2` against an operator's dims.
pub fn parse_dims(op: &str, s: &str) -> Result<Dims, CheckError> {
    let o = op_by_id(op).ok_or_else(|| CheckError::Dims(s.into()))?;
    let mut d = o.native();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| CheckError::Dims(s.into()))?;
        let v: usize = v.trim().parse().map_err(|_| CheckError::Dims(s.into()))?;
        if !o.dims.iter().any(|x| x.name == k.trim()) {
            return Err(CheckError::Dims(s.into()));
        }
        d = d.with(k.trim(), v);
    }
    Ok(d)
}

/// Run `kverify check`; returns the process exit code (0 only when clean).
pub fn run(a: &CheckArgs) -> Result<i32, CheckError> {
    for g in &a.gates {
        if crate::gates::gate_info(g).is_none() {
            return Err(CheckError::Gate(g.clone()));
        }
    }
    if a.candidate.is_some() && a.tilec.given() {
        return Err(CheckError::TwoCandidates);
    }
    if let (Some(p), false) = (&a.tilec.precision, a.tilec.given()) {
        return Err(CheckError::PrecisionWithoutTilec(p.clone()));
    }
    // A GPU artifact carries its own compile-time metadata: RES-02 reads it unless --meta says otherwise.
    let meta_path = a.meta.clone().or_else(|| a.tilec.tilec_artifact.clone());
    let meta = meta_path.as_deref().map(res02_compile::load_meta);
    if a.tilec.given() {
        let limit = Duration::from_secs_f64(a.time_limit.max(0.1));
        let cand = a.tilec.resolve(limit, a.mem_limit_mb)?.ok_or(CheckError::Nothing)?;
        let dims = match &a.dims {
            Some(s) => parse_dims(&cand.op, s)?,
            None => op_by_id(&cand.op).map(|o| o.native()).ok_or(CheckError::Nothing)?,
        };
        cand.gpu_available(&dims).map_err(CheckError::NoGpu)?;
        let meta_ok = meta.transpose()?;
        let opts = Options { time_limit: limit, dims: Some(dims), gates: if a.gates.is_empty() { None } else { Some(a.gates.clone()) } };
        let report = battery::run(std::sync::Arc::new(cand), meta_ok.as_ref(), &opts)?;
        return emit(a, &report);
    }
    let report: Report = match &a.candidate {
        None => {
            let Some(meta_path) = &a.meta else { return Err(CheckError::Nothing) };
            let g = match &meta {
                Some(Ok(m)) => res02_compile::check(m),
                _ => res02_compile::check_path(meta_path),
            };
            let v = battery::verdict(std::slice::from_ref(&g));
            Report {
                candidate: meta_path.display().to_string(),
                kind: "artifact".into(),
                op: "-".into(),
                precision: crate::error_model::Precision::F32,
                dims: Dims(vec![]),
                gates: vec![g],
                verdict: v,
                seconds: 0.0,
            }
        }
        Some(spec) => {
            let limit = Duration::from_secs_f64(a.time_limit.max(0.1));
            let cand = resolve(spec, limit, a.mem_limit_mb)?;
            let dims = match &a.dims {
                Some(s) => Some(parse_dims(&cand.op_id(), s)?),
                None => None,
            };
            let meta_ok = match meta {
                Some(Ok(m)) => Some(m),
                Some(Err(e)) => return Err(e.into()),
                None => None,
            };
            let opts = Options { time_limit: limit, dims, gates: if a.gates.is_empty() { None } else { Some(a.gates.clone()) } };
            battery::run(cand, meta_ok.as_ref(), &opts)?
        }
    };
    emit(a, &report)
}

/// Print the table, write the JSON report, and return the exit code (0 only when clean).
fn emit(a: &CheckArgs, report: &Report) -> Result<i32, CheckError> {
    print!("{}", battery::table(report));
    let json = serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    std::fs::write(&a.json, json).map_err(|source| CheckError::Write { path: a.json.display().to_string(), source })?;
    println!("report: {}", a.json.display());
    Ok(if report.verdict == Verdict::Clean { 0 } else { 1 })
}
