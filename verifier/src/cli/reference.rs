//! `kverify ref`: writes fp64 inputs, outputs and gradients of a gated-linear-recurrence model
//! to one safetensors file in fla's layout (see docs/oracle.md).

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::recurrence::batch::{self, Method};
use crate::recurrence::family::Model;
use crate::recurrence::io::{self, Dims};
use crate::recurrence::RecurrenceError;

/// Model choice on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// General recurrence: channel-wise g, erase gate b, write gate w.
    General,
    /// Linear attention (no gates).
    La,
    /// Gated linear attention: channel-wise g.
    Gla,
    /// SSD / Mamba-2: scalar g per token and head.
    Ssd,
    /// Kimi Delta Attention: channel-wise g, β.
    Kda,
    /// Gated DeltaNet: scalar g, β.
    Gdn,
}

impl From<ModelArg> for Model {
    fn from(m: ModelArg) -> Model {
        match m {
            ModelArg::General => Model::General,
            ModelArg::La => Model::La,
            ModelArg::Gla => Model::Gla,
            ModelArg::Ssd => Model::Ssd,
            ModelArg::Kda => Model::Kda,
            ModelArg::Gdn => Model::Gdn,
        }
    }
}

/// Method choice on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// Token-serial (for a family member: the member's own definition).
    Serial,
    /// Chunkwise B0..B6 on the general recurrence.
    Chunk,
}

/// Arguments of `kverify ref`.
#[derive(Args, Debug, Clone)]
pub struct RefArgs {
    /// Recurrence to evaluate.
    #[arg(long, value_enum)]
    pub model: ModelArg,
    /// Batch size B (with --seed; checked against the file with --inputs).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Heads H (of q and k).
    #[arg(long)]
    pub heads: Option<usize>,
    /// Value heads HV for GVA with --seed (a multiple of H; v, gates, do and the states get HV
    /// heads, each group of HV/H sharing one key head). Default: H.
    #[arg(long = "value-heads", conflicts_with = "inputs")]
    pub value_heads: Option<usize>,
    /// Sequence length T (total tokens when --cu-seqlens is given).
    #[arg(long = "seq-len")]
    pub seq_len: Option<usize>,
    /// Key dim K.
    #[arg(long)]
    pub dk: Option<usize>,
    /// Value dim V.
    #[arg(long)]
    pub dv: Option<usize>,
    /// Chunk size for --method chunk (16, 32 or 64).
    #[arg(long, default_value_t = 64)]
    pub chunk: usize,
    /// Output scale (default: the input file's `scale` metadata, else K^-0.5).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Generate inputs from this seed.
    #[arg(long, conflicts_with = "inputs")]
    pub seed: Option<u64>,
    /// Read inputs (fp64 safetensors, fla names) instead of generating them.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Variable-length sequence boundaries for --seed, comma-separated (requires --batch 1).
    #[arg(long = "cu-seqlens", value_delimiter = ',')]
    pub cu_seqlens: Option<Vec<usize>>,
    /// Algorithm.
    #[arg(long, value_enum, default_value_t = MethodArg::Chunk)]
    pub method: MethodArg,
    /// Output safetensors file.
    #[arg(long)]
    pub out: PathBuf,
}

pub use crate::recurrence::io::MAX_ELEMENTS;

/// Rough count of the fp64 elements a run holds: the inputs, their gradients, and the
/// per-head state history (every token's state for `serial`, one per chunk for `chunk`).
/// Computed in `u128` with saturating arithmetic so absurd sizes cannot wrap (five sizes of
/// 2³² multiply past 2¹²⁸).
///
/// # Errors
/// [`RecurrenceError::Invalid`] when the count exceeds [`MAX_ELEMENTS`]: without this check,
/// `--batch 100000 --seq-len 100000` or `--dk 100000 --dv 100000` aborted the process on
/// allocation failure (or panicked on `usize` overflow) instead of reporting an error.
pub fn check_budget(b: usize, t: usize, h: usize, k: usize, v: usize, method: Method, chunk: usize) -> Result<(), RecurrenceError> {
    let [b, t, h, k, v, c] = [b, t, h, k, v, chunk.max(1)].map(|x| x as u128);
    let states = match method {
        Method::Serial => t + 1,
        Method::Chunk => t.div_ceil(c) + 1,
    };
    let prod = |xs: &[u128]| xs.iter().fold(1u128, |acc, &x| acc.saturating_mul(x));
    let per_token = 5u128.saturating_mul(k).saturating_add(4u128.saturating_mul(v));
    let need = prod(&[2, b, t, h, per_token]).saturating_add(prod(&[4, b, h, k, v])).saturating_add(prod(&[b, h, states, k, v]));
    if need > MAX_ELEMENTS {
        return Err(RecurrenceError::Invalid(format!(
            "problem too large: B={b} T={t} H={h} K={k} V={v} needs about {need} fp64 values ({:.1} GiB), the limit is {MAX_ELEMENTS} ({} GiB)",
            need as f64 * 8.0 / (1u128 << 30) as f64,
            MAX_ELEMENTS * 8 >> 30
        )));
    }
    Ok(())
}

/// Runs `kverify ref`. Returns a one-line summary.
///
/// Errors: missing sizes with --seed, sizes that disagree with the input file, and every
/// [`RecurrenceError`] of reading, validation, computation and writing.
pub fn run(a: &RefArgs) -> Result<String, RecurrenceError> {
    let model: Model = a.model.into();
    let method = match a.method {
        MethodArg::Serial => Method::Serial,
        MethodArg::Chunk => Method::Chunk,
    };
    let sizes = [("--batch", a.batch), ("--heads", a.heads), ("--seq-len", a.seq_len), ("--dk", a.dk), ("--dv", a.dv)];
    let problem = match (&a.inputs, a.seed) {
        (Some(path), _) => {
            let p = io::read_problem(path, model, a.scale)?;
            if a.cu_seqlens.is_some() {
                return Err(RecurrenceError::Invalid("--cu-seqlens is for --seed; with --inputs put `cu_seqlens` in the file".into()));
            }
            let (b, t, h, k, v) = batch::dims(&p);
            check_budget(b, t, batch::value_heads(&p).max(h), k, v, method, a.chunk)?;
            for ((flag, want), got) in sizes.iter().zip([b, h, t, k, v]) {
                if let Some(w) = want {
                    if *w != got {
                        return Err(RecurrenceError::Invalid(format!("{flag} {w} disagrees with the input file ({got})")));
                    }
                }
            }
            p
        }
        (None, Some(seed)) => {
            let mut vals = [0usize; 5];
            for (i, (flag, val)) in sizes.iter().enumerate() {
                vals[i] = val.ok_or_else(|| RecurrenceError::Invalid(format!("{flag} is required with --seed")))?;
            }
            let d = Dims { batch: vals[0], heads: vals[1], seq_len: vals[2], dk: vals[3], dv: vals[4], value_heads: a.value_heads };
            check_budget(d.batch, d.seq_len, d.value_heads.unwrap_or(d.heads).max(d.heads), d.dk, d.dv, method, a.chunk)?;
            io::generate(model, d, seed, a.scale, a.cu_seqlens.clone())?
        }
        (None, None) => return Err(RecurrenceError::Invalid("give --seed N or --inputs FILE".into())),
    };
    let results = batch::run(&problem, method, a.chunk)?;
    let mut meta = HashMap::new();
    meta.insert("model".to_string(), model.name().to_string());
    meta.insert("method".to_string(), format!("{:?}", a.method).to_lowercase());
    meta.insert("chunk".to_string(), a.chunk.to_string());
    meta.insert("scale".to_string(), format!("{:e}", problem.scale));
    meta.insert("dtype".to_string(), "float64".to_string());
    if let Some(seed) = a.seed {
        meta.insert("seed".to_string(), seed.to_string());
    }
    io::write(&a.out, &problem, &results, meta)?;
    let (b, t, h, k, v) = batch::dims(&problem);
    let method_name = format!("{:?}", a.method).to_lowercase();
    Ok(format!("kverify ref: model={} method={method_name} B={b} T={t} H={h} K={k} V={v} -> {}", model.name(), a.out.display()))
}
