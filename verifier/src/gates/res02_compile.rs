//! RES-02 compile-time resource metadata.
//!
//! * Question: does the compiled artifact respect the hardware budgets it declares?
//! * Decision (tilec metadata, `abi/src/meta.rs`, and its `ptxas -v` figures): fail when
//!   - TMEM: `alloc_columns` > 512, or not a power of two in 32..=512, or smaller than the
//!     planned peak, or a buffer reaching past the allocation, or two co-live buffers whose
//!     columns overlap (same lanes share columns);
//!   - the lifecycle is not exactly one alloc / one relinquish / one dealloc per CTA;
//!   - static + dynamic shared memory exceeds the target's per-CTA limit (sm_90a and sm_100a:
//!     227 KiB = 232448 bytes usable);
//!   - ptxas reports more than 255 registers per thread;
//!   - the contract says `no_spill` and ptxas reports spill stores or loads.
//! * Bound source: hardware limits. TMEM: 512 columns x 128 lanes per SM and the tcgen05.alloc
//!   legal sizes (PTX ISA, "Tensor Memory" / tcgen05.alloc); shared memory: CUDA C Programming
//!   Guide, compute-capability table (227 KB per block on 9.0 and 10.0); registers: 255 per thread.
//! * n/a when there is no compile-time metadata (rule 8).

use super::{Ctx, GateInfo, GateResult, Status};
use serde::Serialize;
use std::path::Path;
use tilec_abi::meta::{KernelMeta, SCHEMA_VERSION};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "RES-02",
    name: "compile-time resources",
    tolerance_free: true,
    question: "Does the compiled artifact respect TMEM (<=512 cols, legal size, 1/1/1 lifecycle), smem, register and spill budgets?",
};

/// Tensor-memory columns per SM (sm_100a's [`tilec_abi::target::TmemInfo::columns`]; the
/// tcgen05.alloc sizes are judged on this even when the metadata names another target).
pub const TMEM_COLUMNS: u32 = 512;

/// Errors reading metadata.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Not valid metadata JSON.
    #[error("{path} is not valid tilec metadata: {source}")]
    Parse {
        /// Path.
        path: String,
        /// Cause.
        source: serde_json::Error,
    },
    /// Metadata that parses but breaks the schema's rules (the loader's message).
    #[error("{path}: {message}")]
    Invalid {
        /// Path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A schema version this verifier does not read.
    #[error("{path}: schema_version {found}, this kverify reads 1 to {expected}")]
    Version {
        /// Path.
        path: String,
        /// Found.
        found: u32,
        /// Expected.
        expected: u32,
    },
}

/// Read a `*.meta.json` file with the same loader as the runtime (`KernelMeta::from_json_str`:
/// the version checked before anything else, then the schema, then validation), so RES-02 never
/// judges metadata `tilec-run` would refuse.
pub fn load_meta(path: &Path) -> Result<KernelMeta, MetaError> {
    use tilec_abi::meta::MetaError as Abi;
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| MetaError::Io { path: p.clone(), source })?;
    KernelMeta::from_json_str(&text).map_err(|e| match e {
        Abi::Json(source) => MetaError::Parse { path: p.clone(), source },
        Abi::UnsupportedVersion { found } => MetaError::Version { path: p.clone(), found: u32::try_from(found).unwrap_or(u32::MAX), expected: SCHEMA_VERSION },
        other => MetaError::Invalid { path: p.clone(), message: other.to_string() },
    })
}

/// One broken budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which budget (`tmem`, `lifecycle`, `smem`, `registers`, `spill`, `target`).
    pub budget: &'static str,
    /// What the artifact does and what the limit is.
    pub message: String,
}

/// Per-CTA shared-memory limit of a target, bytes (from the target table every tool shares,
/// [`tilec_abi::target`]); `None` for a target it does not know.
pub fn smem_limit(target: &str) -> Option<u32> {
    tilec_abi::target::lookup(target).ok().map(|t| t.smem_per_cta)
}

/// Every budget `meta` breaks (empty when it respects all of them).
pub fn check_meta(meta: &KernelMeta) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut push = |budget: &'static str, message: String| v.push(Violation { budget, message });
    if let Some(t) = &meta.tmem {
        let a = t.alloc_columns;
        if a > TMEM_COLUMNS {
            push("tmem", format!("allocates {a} TMEM columns, hardware limit {TMEM_COLUMNS}"));
        } else if !(32..=TMEM_COLUMNS).contains(&a) || !a.is_power_of_two() {
            push("tmem", format!("allocates {a} TMEM columns: not a legal tcgen05.alloc size (power of two, 32..=512)"));
        }
        if t.peak_columns > a {
            push("tmem", format!("peak of {} live columns exceeds the {a}-column allocation", t.peak_columns));
        }
        for b in &t.buffers {
            if u64::from(b.offset) + u64::from(b.columns) > u64::from(a) {
                push("tmem", format!("buffer `{}` spans columns {}..{}, past the {a}-column allocation", b.name, b.offset, u64::from(b.offset) + u64::from(b.columns)));
            }
        }
        for (i, x) in t.buffers.iter().enumerate() {
            for y in &t.buffers[i + 1..] {
                let live = x.live[0] <= y.live[1] && y.live[0] <= x.live[1];
                // In 64 bits: a hostile offset near 2^32 must not wrap into range.
                let (xo, xe, yo, ye) = (u64::from(x.offset), u64::from(x.offset) + u64::from(x.columns), u64::from(y.offset), u64::from(y.offset) + u64::from(y.columns));
                let cols = xo < ye && yo < xe;
                if live && cols {
                    push("tmem", format!("co-live buffers `{}` and `{}` overlap in columns", x.name, y.name));
                }
            }
        }
        let l = t.lifecycle;
        if (l.alloc, l.relinquish, l.dealloc) != (1, 1, 1) {
            push(
                "lifecycle",
                format!("{} alloc / {} relinquish / {} dealloc per CTA; the contract is exactly 1/1/1", l.alloc, l.relinquish, l.dealloc),
            );
        }
    }
    let static_smem = meta.smem_bytes.max(meta.ptxas.as_ref().map(|p| p.shared_bytes).unwrap_or(0));
    let total = static_smem as u64 + meta.launch.dynamic_smem_bytes as u64;
    match smem_limit(&meta.target) {
        Some(lim) if total > lim as u64 => push(
            "smem",
            format!("{total} bytes of shared memory per CTA ({static_smem} static + {} dynamic), {} limit {lim}", meta.launch.dynamic_smem_bytes, meta.target),
        ),
        Some(_) => {}
        None => push("target", format!("unknown target `{}`: no shared-memory limit known", meta.target)),
    }
    if let Some(p) = &meta.ptxas {
        let max_registers = tilec_abi::target::lookup(&meta.target).map_or(255, |t| t.max_registers_per_thread);
        if p.registers > max_registers {
            push("registers", format!("{} registers per thread, limit {max_registers}", p.registers));
        }
        if meta.contract.no_spill && (p.spill_store_bytes > 0 || p.spill_load_bytes > 0) {
            push(
                "spill",
                format!("contract forbids spills; ptxas reports {} bytes spill stores, {} bytes spill loads", p.spill_store_bytes, p.spill_load_bytes),
            );
        }
    }
    v
}

/// RES-02 on a metadata value.
pub fn check(meta: &KernelMeta) -> GateResult {
    let v = check_meta(meta);
    let status = if v.is_empty() { Status::Pass } else { Status::Fail };
    let detail = if v.is_empty() {
        format!(
            "{} ({}): TMEM {} cols, smem {} B, registers {}, spills ok",
            meta.kernel,
            meta.target,
            meta.tmem.as_ref().map(|t| t.alloc_columns).unwrap_or(0),
            meta.smem_bytes + meta.launch.dynamic_smem_bytes,
            meta.ptxas.as_ref().map(|p| p.registers.to_string()).unwrap_or_else(|| "n/a (no ptxas)".into())
        )
    } else {
        v.iter().map(|x| format!("{}: {}", x.budget, x.message)).collect::<Vec<_>>().join("; ")
    };
    let mut g = GateResult::new(INFO, status, detail);
    g.measured = Some(v.len() as f64);
    g.bound = Some(0.0);
    g
}

/// RES-02 on a metadata file. Errors reading it are reported as a failing gate.
pub fn check_path(path: &Path) -> GateResult {
    match load_meta(path) {
        Ok(m) => check(&m),
        Err(e) => GateResult::new(INFO, Status::Fail, e.to_string()),
    }
}

/// Run the gate on the context's metadata.
pub fn run(ctx: &Ctx) -> GateResult {
    match ctx.meta {
        Some(m) => check(m),
        None => GateResult::new(INFO, Status::NotApplicable, "no compile-time metadata for this candidate"),
    }
}
