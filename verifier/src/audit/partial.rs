//! Per-gate progress of the kernels in flight: `DIR/partial-<i>of<n>.jsonl`, one line per gate
//! judged (key, gate, result, seconds), appended and synced as each gate ends. A kill loses at
//! most the gate in flight: the rerun fills in the gates already judged and runs the rest, in
//! a fresh worker — as ORD-02's fresh process and every process failure already do mid-kernel
//! (each gate is its own prepare/run pair; nothing of one gate's measurement feeds another's).
//! Time-boxed machines made this matter: on the H200, units of up to 7 minutes were killed at
//! each call's end with all their gates lost. A key with a complete record in `kernels-*` is
//! finished; its partial lines are ignored, and the summary never reads them.

use super::judge::GateResult;
use super::{io, AuditError};
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
}

/// Gates judged so far per kernel key.
pub type Progress = HashMap<String, BTreeMap<String, (GateResult, f64)>>;

/// The progress file of a shard.
pub fn path(dir: &Path, shard: (usize, usize)) -> PathBuf {
    dir.join(format!("partial-{}of{}.jsonl", shard.0, shard.1))
}

/// Every complete progress line in `dir` (all shards); torn lines are ignored, and a later line
/// for the same key and gate wins (the gate was judged again).
pub fn load(dir: &Path) -> Result<Progress, AuditError> {
    let mut out = Progress::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(out) };
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("partial-") && n.ends_with(".jsonl"))).collect();
    files.sort();
    for p in files {
        let text = std::fs::read_to_string(&p).map_err(io(&p))?;
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            if let Ok(g) = serde_json::from_str::<GateDone>(line) {
                out.entry(g.key).or_default().insert(g.gate, (g.result, g.s));
            }
        }
    }
    Ok(out)
}
