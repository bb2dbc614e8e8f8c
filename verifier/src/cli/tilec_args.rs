//! `kverify check` options that name a tilec kernel as the candidate
//! (`--tilec-kernel FILE.tile[:KERNEL]` on the CPU interpreter, `--tilec-artifact META.json` on
//! the GPU), and their resolution into a [`TilecCandidate`].

use crate::candidate::tilec::{default_binding, locate, parse_binding, split_kernel_spec, BackwardOperator, Executor, TilecCandidate, TilecError};
use crate::error_model::Precision;
use crate::tensor::DType;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// tilec candidate options of `kverify check`.
#[derive(Debug, Args, Default)]
pub struct TilecArgs {
    /// Judge a tilec kernel on tilec's CPU interpreter: `FILE.tile[:KERNEL]` (needs --op).
    #[arg(long, value_name = "FILE[:KERNEL]", conflicts_with_all = ["tilec_artifact", "tilec_operator"])]
    pub tilec_kernel: Option<String>,
    /// Judge a multi-kernel tilec operator on tilec's CPU interpreter: `FILE.tile:OPERATOR`
    /// (needs --op; a recurrence class passes its scale K^-0.5 as the operator's `scale`).
    #[arg(long, value_name = "FILE:OPERATOR", conflicts_with = "tilec_artifact")]
    pub tilec_operator: Option<String>,
    /// The operator computing the backward of --tilec-operator's: `FILE.tile:OPERATOR`, judged
    /// by CMP-02 and ORD-02's backward repeats (compiled with the same --tilec-const).
    #[arg(long, value_name = "FILE:OPERATOR", requires = "tilec_operator")]
    pub tilec_backward: Option<String>,
    /// The backward operator's parameters, `INPUTS:OUTPUTS`: one per class input, then one per
    /// output gradient (the class's output order), then one `out` per input gradient, e.g.
    /// `q,k,v,g@f32,beta,s0@f32,do,dht@f32:dq,dk,dv,dg,dbeta,ds0` (needed with --tilec-backward).
    #[arg(long, value_name = "IN,..:OUT,..", requires = "tilec_backward")]
    pub bind_backward: Option<String>,
    /// Size parameters the operator is compiled with, `NAME=VALUE` (repeatable or
    /// comma-separated; `tilec run --const`), e.g. `--tilec-const K=64,V=64`.
    #[arg(long = "tilec-const", value_name = "NAME=VALUE", value_delimiter = ',')]
    pub consts: Vec<String>,
    /// Judge a built tilec artifact on the GPU through `tilec-run`: its `*.meta.json` (needs
    /// --op); RES-02 reads the same file.
    #[arg(long, value_name = "META.json")]
    pub tilec_artifact: Option<PathBuf>,
    /// Operator class the tilec kernel implements (e.g. `matmul`).
    #[arg(long)]
    pub op: Option<String>,
    /// The `tilec` binary (default: $TILEC).
    #[arg(long, value_name = "PATH")]
    pub tilec: Option<PathBuf>,
    /// The `tilec-run` binary (default: $TILEC_RUN).
    #[arg(long, value_name = "PATH")]
    pub tilec_run: Option<PathBuf>,
    /// Declared precision of the tilec kernel: input, accumulator, output dtypes, and optionally
    /// the intermediate storage of a multi-kernel operator as DTYPExR (R rounding points to
    /// DTYPE on the way to each output; `tilec build --verify` prints R), e.g. `bf16,f32,bf16,bf16x9`.
    /// Default `bf16,f32,f32`; only for a tilec candidate (an external candidate declares its
    /// precision in its manifest, a builtin has its own).
    #[arg(long, value_name = "IN,ACC,OUT[,MIDxR]")]
    pub precision: Option<String>,
    /// Kernel parameters bound to the operator's inputs and outputs, `INPUTS:OUTPUTS` in the
    /// operator's order, e.g. `a,b:c` (default: the operator's input names lower-cased, `c`);
    /// `g@f32` widens an input to its parameter's dtype.
    #[arg(long, value_name = "IN,..:OUT,..")]
    pub bind: Option<String>,
    /// A size the kernel's tensors do not determine, `NAME=VALUE` (repeatable).
    #[arg(long = "tilec-size", value_name = "NAME=VALUE")]
    pub sizes: Vec<String>,
}

/// Errors resolving the tilec options.
#[derive(Debug, thiserror::Error)]
pub enum TilecArgsError {
    /// --op missing.
    #[error("--tilec-kernel / --tilec-operator / --tilec-artifact need --op (the operator class the kernel implements)")]
    NoOp,
    /// An intermediate storage that judges nothing.
    #[error("bad --precision storage `{0}`: R must be at least 1, and R times the unit roundoff of its dtype below 1 (bf16: R < 256), or every bound is vacuous")]
    Storage(String),
    /// Bad --precision.
    #[error("bad --precision `{0}`: expected three dtypes IN,ACC,OUT among f64, f32, tf32, bf16, f16, and optionally a fourth field DTYPExR (intermediate storage: R roundings to DTYPE, e.g. bf16x9)")]
    Precision(String),
    /// Bad --tilec-size or --tilec-const.
    #[error("bad --tilec-size / --tilec-const `{0}`: expected NAME=VALUE with a non-negative integer")]
    Size(String),
    /// Candidate description problems.
    #[error(transparent)]
    Tilec(#[from] TilecError),
}

/// The precision a tilec candidate is declared with when `--precision` is not given.
pub const DEFAULT_PRECISION: &str = "bf16,f32,f32";

impl TilecArgs {
    /// Whether a tilec candidate was named.
    pub fn given(&self) -> bool {
        self.tilec_kernel.is_some() || self.tilec_artifact.is_some() || self.tilec_operator.is_some()
    }

    /// The declared precision.
    pub fn parse_precision(&self) -> Result<Precision, TilecArgsError> {
        let text = self.precision.as_deref().unwrap_or(DEFAULT_PRECISION);
        let bad = || TilecArgsError::Precision(text.to_string());
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let (dtypes, storage) = match parts.as_slice() {
            [i, a, o] => ([*i, *a, *o], None),
            [i, a, o, m] => ([*i, *a, *o], Some(*m)),
            _ => return Err(bad()),
        };
        let v: Vec<DType> = dtypes.iter().map(|s| DType::parse(s).ok_or_else(bad)).collect::<Result<_, _>>()?;
        let p = Precision::new(v[0], v[1], v[2]);
        match storage {
            None => Ok(p),
            // `bf16x9`: 9 intermediate roundings to bf16 (error_model.rs, "Intermediate storage").
            Some(m) => {
                let (d, r) = m.split_once('x').ok_or_else(bad)?;
                let d = DType::parse(d).filter(|d| !d.is_integer()).ok_or_else(bad)?;
                let r: u32 = r.parse().map_err(|_| bad())?;
                // R u_mid >= 1 would make every bound vacuous (judging nothing); R = 0 is no
                // storage: both are declarations to refuse, not to honour.
                if r == 0 || r as f64 * d.unit_roundoff() >= 1.0 {
                    return Err(TilecArgsError::Storage(m.to_string()));
                }
                Ok(p.storing(d, r))
            }
        }
    }

    /// Build the candidate (None when no tilec candidate was named).
    pub fn resolve(&self, time_limit: Duration, mem_limit_mb: u64) -> Result<Option<TilecCandidate>, TilecArgsError> {
        if !self.given() {
            return Ok(None);
        }
        let op = self.op.as_deref().ok_or(TilecArgsError::NoOp)?;
        let precision = self.parse_precision()?;
        let mut binding = match &self.bind {
            Some(b) => parse_binding(b)?,
            None => default_binding(op)?,
        };
        for s in &self.sizes {
            let (k, v) = name_value(s)?;
            binding.sizes.insert(k, v);
        }
        if !self.consts.is_empty() && self.tilec_operator.is_none() {
            return Err(TilecError::Syntax("--tilec-const applies to --tilec-operator only (a kernel takes its sizes from its tensors, or --tilec-size)".into()).into());
        }
        if let Some(spec) = &self.tilec_operator {
            let (source, operator) = split_kernel_spec(spec);
            let operator = operator.ok_or_else(|| TilecError::Syntax(format!("--tilec-operator `{spec}`: expected FILE.tile:OPERATOR")))?;
            let consts = self.consts.iter().map(|c| name_value(c).map(|(k, v)| format!("{k}={v}"))).collect::<Result<Vec<_>, _>>()?;
            let tilec = locate(self.tilec.as_deref(), "tilec", "--tilec", "TILEC")?;
            let executor = Executor::InterpOperator { tilec: tilec.clone(), source, operator, consts: consts.clone() };
            let cand = TilecCandidate::new(op, precision, executor, binding.clone(), time_limit, mem_limit_mb)?;
            let Some(spec) = &self.tilec_backward else { return Ok(Some(cand)) };
            let (source, operator) = split_kernel_spec(spec);
            let operator = operator.ok_or_else(|| TilecError::Syntax(format!("--tilec-backward `{spec}`: expected FILE.tile:OPERATOR")))?;
            let text = self.bind_backward.as_deref().ok_or_else(|| TilecError::Syntax("--tilec-backward needs --bind-backward (the class's inputs, its output gradients, then its input gradients)".into()))?;
            let mut bb = parse_binding(text)?;
            bb.sizes = binding.sizes;
            let backward = BackwardOperator { executor: Executor::InterpOperator { tilec, source, operator, consts }, binding: bb };
            return Ok(Some(cand.with_backward(backward)?));
        }
        let executor = match (&self.tilec_kernel, &self.tilec_artifact) {
            (Some(spec), _) => {
                let (source, kernel) = split_kernel_spec(spec);
                Executor::Interp { tilec: locate(self.tilec.as_deref(), "tilec", "--tilec", "TILEC")?, source, kernel }
            }
            (None, Some(meta)) => {
                Executor::Gpu { tilec_run: locate(self.tilec_run.as_deref(), "tilec-run", "--tilec-run", "TILEC_RUN")?, meta: meta.clone() }
            }
            (None, None) => return Ok(None),
        };
        Ok(Some(TilecCandidate::new(op, precision, executor, binding, time_limit, mem_limit_mb)?))
    }
}

/// `NAME=VALUE` with a non-empty name and a non-negative integer value (`--tilec-size`,
/// `--tilec-const`), trimmed.
fn name_value(s: &str) -> Result<(String, usize), TilecArgsError> {
    match s.split_once('=').map(|(k, v)| (k.trim(), v.trim().parse::<usize>())) {
        Some((k, Ok(v))) if !k.is_empty() => Ok((k.to_string(), v)),
        _ => Err(TilecArgsError::Size(s.to_string())),
    }
}
