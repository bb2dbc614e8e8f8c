//! `kverify audit`: judge a KernelBench-style corpus (each row a reference `Model` and a
//! candidate `ModelNew`) with the gates that apply to arbitrary tasks, next to KernelBench's own
//! check, and summarise the differential (docs/audit.md).
//!
//! * this module: the corpus, the kernels it selects, shards, and the resumable record store
//!   (one JSON line per kernel, appended and flushed as each kernel finishes).
//! * [`run`]: one worker process per job (the containment of [`crate::candidate::process`]),
//!   on the devices of [`devices`] (one judge per GPU by default); [`progress`]: the
//!   progress line.
//! * [`judge`]: decisions from the worker's measurements; [`judge_probes`] those of the probe
//!   gates (CMP-03, ORD-01, ORD-03, EXC-02, PRC-01, PRC-02).
//! * [`summary`]: funnel, per-gate rates with applicability, the 2x2 differential; table, JSON
//!   and SVG.

pub mod build_ahead;
pub mod devices;
pub mod judge;
pub mod judge_probes;
pub mod kernelbench;
pub mod partial;
pub mod progress;
pub mod run;
pub mod session;
pub mod summary;

use judge::GateResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One corpus row (the fields the audit reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Row {
    /// KernelBench level.
    #[serde(default)]
    pub level_id: i64,
    /// KernelBench task number.
    #[serde(default)]
    pub task_id: i64,
    /// The reference program (`Model`, `get_inputs`, `get_init_inputs`).
    pub ref_code: String,
    /// The candidate program (`ModelNew`), possibly empty.
    #[serde(default)]
    pub custom_code: Option<String>,
    /// The speed-up its own harness recorded; numeric means accepted.
    #[serde(default)]
    pub score_default: Option<serde_json::Value>,
}

/// A kernel to judge.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Unique, sortable key: `RRRR-L<level>-T<task>` (row number in the corpus).
    pub key: String,
    /// Row index in the corpus (0-based).
    pub row: usize,
    /// Level.
    pub level: i64,
    /// Task.
    pub task: i64,
    /// Reference code.
    pub ref_code: String,
    /// Candidate code.
    pub custom_code: String,
    /// Accepted by its own harness (numeric `score_default`).
    pub accepted: bool,
    /// Positive control (the task's own Model submitted as ModelNew).
    pub control: bool,
    /// Builds CUDA with `load_inline`.
    pub load_inline: bool,
}

/// Errors of the audit.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// File trouble.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A corpus line that is not a row.
    #[error("{path}:{line}: {msg}")]
    Corpus {
        /// Path.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// Bad argument.
    #[error("{0}")]
    Usage(String),
    /// The worker could not be started at all (an environment problem, not a kernel's).
    #[error("audit worker could not start: {0}")]
    Worker(String),
    /// Plotting.
    #[error("plot: {0}")]
    Plot(String),
}

/// `map_err` of a file operation on `path`: [`AuditError::Io`] naming it.
pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> AuditError + '_ {
    move |source| AuditError::Io { path: path.display().to_string(), source }
}

/// The key suffix of a positive-control kernel.
pub const CONTROL_SUFFIX: &str = "-control";

/// Read the corpus and select its kernels: rows whose `custom_code` defines `ModelNew`, or, for
/// the positive control, every row with its own `Model` submitted as `ModelNew`.
pub fn load_corpus(path: &Path, control: bool) -> Result<(usize, Vec<Kernel>), AuditError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut rows = 0;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Row = serde_json::from_str(line).map_err(|e| AuditError::Corpus { path: path.display().to_string(), line: i + 1, msg: e.to_string() })?;
        let row = rows;
        rows += 1;
        let custom = if control { format!("{}\n\nModelNew = Model\n", r.ref_code) } else { r.custom_code.clone().unwrap_or_default() };
        if !custom.contains("ModelNew") {
            continue;
        }
        let accepted = r.score_default.as_ref().map(|v| v.is_number()).unwrap_or(false);
        let key = format!("{row:04}-L{}-T{}{}", r.level_id, r.task_id, if control { CONTROL_SUFFIX } else { "" });
        out.push(Kernel { key, row, level: r.level_id, task: r.task_id, load_inline: custom.contains("load_inline"), ref_code: r.ref_code, custom_code: custom, accepted, control });
    }
    Ok((rows, out))
}

/// `i/n` (0-based i < n).
pub fn parse_shard(s: &str) -> Result<(usize, usize), AuditError> {
    let bad = || AuditError::Usage(format!("--shard wants i/n with 0 <= i < n, got `{s}`"));
    let (a, b) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The kernels of shard `i` of `n` (every n-th by corpus order), at most `limit` of them.
pub fn select(kernels: Vec<Kernel>, shard: (usize, usize), limit: Option<usize>) -> Vec<Kernel> {
    let v: Vec<Kernel> = kernels.into_iter().enumerate().filter(|(k, _)| k % shard.1 == shard.0).map(|(_, k)| k).collect();
    match limit {
        Some(l) => v.into_iter().take(l).collect(),
        None => v,
    }
}

/// What the audit recorded for one kernel (one JSON line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Kernel key.
    pub key: String,
    /// Corpus row.
    pub row: usize,
    /// Level.
    pub level: i64,
    /// Task.
    pub task: i64,
    /// Accepted by its own harness.
    pub accepted: bool,
    /// Positive control.
    #[serde(default)]
    pub control: bool,
    /// Uses `load_inline`.
    #[serde(default)]
    pub load_inline: bool,
    /// `judged`, `skipped` (cannot run on this machine: reason in `note`) or `reference-error`
    /// (the task's own Model fails: n/a, never charged).
    pub status: String,
    /// Why skipped, or what failed to build.
    #[serde(default)]
    pub note: String,
    /// Per gate (`KB` = KernelBench's check), when judged.
    #[serde(default)]
    pub gates: BTreeMap<String, GateResult>,
    /// `clean | violation | broken`, when judged.
    #[serde(default)]
    pub verdict: Option<String>,
    /// Device it ran on.
    #[serde(default)]
    pub device: String,
    /// Seconds this kernel took (not part of the summary).
    #[serde(default)]
    pub elapsed_s: f64,
    /// Seconds per gate, loading and building included in the first gate's (not part of the
    /// summary: where an audit's time goes).
    #[serde(default)]
    pub gate_s: BTreeMap<String, f64>,
}

impl Record {
    /// A record for `k` about to be judged on `device` (status `judged`, no gates yet).
    pub fn judged(k: &Kernel, device: &str) -> Record {
        Record {
            key: k.key.clone(),
            row: k.row,
            level: k.level,
            task: k.task,
            accepted: k.accepted,
            control: k.control,
            load_inline: k.load_inline,
            status: "judged".into(),
            note: String::new(),
            gates: BTreeMap::new(),
            verdict: None,
            device: device.to_string(),
            elapsed_s: 0.0,
            gate_s: BTreeMap::new(),
        }
    }

    /// Ends the record unjudged: `status` (`skipped`, `reference-error`) with its reason; the
    /// gates measured so far are dropped (none of them is a verdict).
    pub fn end(&mut self, status: &str, note: &str) {
        self.status = status.into();
        self.note = note.into();
        self.gates.clear();
    }
}

/// The record files of `dir`: `kernels-<i>of<n>.jsonl`, one per shard.
pub fn record_path(dir: &Path, shard: (usize, usize)) -> PathBuf {
    dir.join(format!("kernels-{}of{}.jsonl", shard.0, shard.1))
}

/// Every complete record in `dir` (all shards), by key; a torn last line (a kill while writing)
/// is ignored. The first record of a key wins.
pub fn load_records(dir: &Path) -> Result<BTreeMap<String, Record>, AuditError> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(out) };
    for line in complete_lines(rd, "kernels-")? {
        if let Ok(r) = serde_json::from_slice::<Record>(&line) {
            out.entry(r.key.clone()).or_insert(r);
        }
    }
    Ok(out)
}

/// The complete lines (newline-terminated; a torn last one — a kill while writing, perhaps
/// inside a multi-byte character — is left out) of the regular files `<prefix>*.jsonl` of a
/// folder listing, in file-name order, as bytes: one bad line is one unparsable record, never
/// an audit that cannot start.
pub(crate) fn complete_lines(rd: std::fs::ReadDir, prefix: &str) -> Result<Vec<Vec<u8>>, AuditError> {
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix) && n.ends_with(".jsonl"))).collect();
    files.sort();
    let mut out = Vec::new();
    for p in files {
        let bytes = std::fs::read(&p).map_err(io(&p))?;
        out.extend(bytes.split_inclusive(|&b| b == b'\n').filter(|l| l.ends_with(b"\n")).map(<[u8]>::to_vec));
    }
    Ok(out)
}

/// Appends records to one shard file, one line each, flushed and synced before returning.
pub struct Store {
    file: std::fs::File,
    path: PathBuf,
}

impl Store {
    /// Open (create) the shard file of records.
    pub fn open(dir: &Path, shard: (usize, usize)) -> Result<Store, AuditError> {
        Store::open_file(dir, record_path(dir, shard))
    }

    /// Open (create) the per-gate progress file of a shard (`partial-<i>of<n>.jsonl`).
    pub fn open_partial(dir: &Path, shard: (usize, usize)) -> Result<Store, AuditError> {
        Store::open_file(dir, partial::path(dir, shard))
    }

    /// Open `path` in `dir` for appending, cutting a torn last line left by a kill.
    fn open_file(dir: &Path, path: PathBuf) -> Result<Store, AuditError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if let Ok(bytes) = std::fs::read(&path) {
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                let keep = bytes.iter().rposition(|&c| c == b'\n').map(|p| p + 1).unwrap_or(0);
                std::fs::write(&path, &bytes[..keep]).map_err(io(&path))?;
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io(&path))?;
        Ok(Store { file, path })
    }

    /// Append one line (a record, or a gate done).
    pub fn append<T: Serialize>(&mut self, r: &T) -> Result<(), AuditError> {
        let mut line = serde_json::to_string(r).map_err(|e| AuditError::Usage(e.to_string()))?;
        line.push('\n');
        self.file.write_all(line.as_bytes()).and_then(|_| self.file.sync_data()).map_err(io(&self.path))
    }
}
