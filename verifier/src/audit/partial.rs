//! Per-gate progress of the kernels in flight: `DIR/partial-<i>of<n>.jsonl`, one line per gate
//! judged (key, gate, result, seconds), appended and synced as each gate ends. A kill loses at
//! most the gate in flight: the rerun fills in the gates already judged and runs the rest, in
//! a fresh worker — as ORD-02's fresh process and every process failure already do mid-kernel
//! (each gate is its own prepare/run pair; nothing of one gate's measurement feeds another's).
//! Time-boxed machines made this matter: on the H200, units of up to 7 minutes were killed at
//! each call's end with all their gates lost. A key with a complete record in `kernels-*` is
//! finished; its partial lines are ignored, and the summary never reads them. Each line carries
//! the fingerprint of what it judged ([`fingerprint`]: the seed and both programs), so a line
//! left from another seed or an edited corpus is not reused; and an audit that ends prunes the
//! lines of every recorded kernel ([`prune`]), so a record deleted afterwards (to judge the
//! kernel again) is judged from scratch, not rebuilt from old progress.

use super::judge::GateResult;
use super::{complete_lines, io, AuditError, Kernel, Record};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One gate judged for one kernel.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateDone {
    /// Kernel key.
    pub key: String,
    /// Gate (`KB`, `CMP-01`, ...).
    pub gate: String,
    /// Its result.
    pub result: GateResult,
    /// Seconds it took.
    pub s: f64,
    /// [`fingerprint`] of the kernel it was judged for.
    pub fp: String,
}

/// What a gate's result depends on besides the worker: the base seed, the reference and the
/// candidate program (FNV-1a, `tilec_abi::hash`), and [`SCHEME`].
pub fn fingerprint(k: &Kernel, seed: u64) -> String {
    let mut h = tilec_abi::hash::Fnv1a::new();
    h.write(SCHEME.as_bytes()).write(&seed.to_le_bytes()).write(k.ref_code.as_bytes()).write(&[0]).write(k.custom_code.as_bytes());
    format!("{:016x}", h.finish())
}

/// How seeds are derived from the base seed: progress judged under another derivation (before
/// KB took KernelBench's own trial seeds, `kernelbench.rs`, KB used base + 1..5) is not reused.
pub const SCHEME: &str = "kb-seeds=kernelbench\0";

/// Gates judged so far per kernel key, with the fingerprint they were judged under.
pub type Progress = HashMap<String, BTreeMap<String, (GateResult, f64, String)>>;

/// The progress file of a shard.
pub fn path(dir: &Path, shard: (usize, usize)) -> PathBuf {
    dir.join(format!("partial-{}of{}.jsonl", shard.0, shard.1))
}

/// Every complete progress line in `dir` (all shards); torn or unparsable lines are ignored,
/// and a later line for the same key and gate wins (the gate was judged again).
pub fn load(dir: &Path) -> Result<Progress, AuditError> {
    let mut out = Progress::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(out) };
    for line in complete_lines(rd, "partial-")? {
        if let Ok(g) = serde_json::from_slice::<GateDone>(&line) {
            out.entry(g.key).or_default().insert(g.gate, (g.result, g.s, g.fp));
        }
    }
    Ok(out)
}

/// Drop from `dir`'s progress files every line whose kernel has a record in `records` (run
/// when an audit ends; the lines of kernels still unrecorded stay for the rerun).
pub fn prune(dir: &Path, records: &BTreeMap<String, Record>) -> Result<(), AuditError> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(()) };
    for e in rd.flatten() {
        let p = e.path();
        if !(p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("partial-") && n.ends_with(".jsonl"))) {
            continue;
        }
        let bytes = std::fs::read(&p).map_err(io(&p))?;
        let keep: Vec<u8> = bytes
            .split_inclusive(|&b| b == b'\n')
            .filter(|l| l.ends_with(b"\n") && serde_json::from_slice::<GateDone>(l).is_ok_and(|g| !records.contains_key(&g.key)))
            .flatten()
            .copied()
            .collect();
        if keep.len() != bytes.len() {
            std::fs::write(&p, keep).map_err(io(&p))?;
        }
    }
    Ok(())
}
