//! The build cache: PTX per unoptimised LLVM module, cubins (with ptxas's report) per PTX.
//!
//! Why: LLVM's IR pipeline and NVPTX code generation are nearly all of `tilec build`'s time
//! (gdn.tile: ~13 s of CPU over 50 modules on this 2-core machine) and ptxas most of the rest,
//! while an edit usually changes one kernel. As Triton's and TileLang's kernel caches do, the
//! compiled artefacts are stored by content: the key of a PTX text is the SHA-256 of the
//! module's LLVM bitcode before optimisation (not its text: printing a long module cost more
//! than hashing it), the target and this compiler's fingerprint; the key
//! of a cubin that of the PTX, the target and ptxas's identity. The front end, the planners
//! and the LLVM IR emission still run every time (a few percent of the build), so every
//! diagnostic, plan and metadata field is computed afresh; only LLVM's and ptxas's work on an
//! input they have already seen is skipped.
//!
//! What the compiler fingerprint covers: the bytes of the running executable (so a rebuilt
//! tilec, whose peephole passes or pipeline may differ, never reads a stale entry) and the
//! version of the LLVM it is linked to. ptxas's identity: its path and its `--version` text.
//!
//! Where: `TILEC_CACHE_DIR`, else `$XDG_CACHE_HOME/tilec`, else `$HOME/.cache/tilec`;
//! `TILEC_CACHE=0` (or `tilec build --no-cache`) turns it off. Entries are written to a
//! temporary file and renamed into place, so a killed build leaves no torn entry; a cache that
//! cannot be read or written is skipped (the build compiles as without one). Nothing is evicted:
//! deleting the folder is always safe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

/// A content-addressed store of compiled artefacts in one folder.
#[derive(Debug)]
pub struct BuildCache {
    dir: PathBuf,
    /// Per kind of entry: lookups that found it, and that did not.
    stats: Mutex<BTreeMap<String, (u32, u32)>>,
}

impl BuildCache {
    /// A cache in `dir` (created on the first write).
    pub fn at(dir: impl Into<PathBuf>) -> BuildCache {
        BuildCache { dir: dir.into(), stats: Mutex::new(BTreeMap::new()) }
    }

    /// The cache the environment names (module docs), `None` when `TILEC_CACHE=0` or no folder
    /// can be named.
    pub fn from_env() -> Option<BuildCache> {
        if std::env::var_os("TILEC_CACHE").is_some_and(|v| v == "0") {
            return None;
        }
        let dir = match std::env::var_os("TILEC_CACHE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => match std::env::var_os("XDG_CACHE_HOME") {
                Some(x) if !x.is_empty() => PathBuf::from(x).join("tilec"),
                _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".cache").join("tilec"),
            },
        };
        Some(BuildCache::at(dir))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `(hits, misses)` of [`BuildCache::get`] for entries of `kind` so far.
    pub fn stats(&self, kind: &str) -> (u32, u32) {
        self.stats.lock().map(|m| m.get(kind).copied().unwrap_or_default()).unwrap_or_default()
    }

    /// The entry `key` of `kind` (a file-name suffix: `ptx`, `cubin`, `ptxas.txt`), if stored.
    pub fn get(&self, key: &str, kind: &str) -> Option<Vec<u8>> {
        let r = std::fs::read(self.path(key, kind)).ok();
        if let Ok(mut m) = self.stats.lock() {
            let e = m.entry(kind.to_string()).or_default();
            if r.is_some() {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
        r
    }

    /// Stores entry `key` of `kind`; best effort (a failed write leaves no entry).
    pub fn put(&self, key: &str, kind: &str, bytes: &[u8]) {
        static N: AtomicU32 = AtomicU32::new(0);
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let tmp = self.dir.join(format!(".tmp-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        if std::fs::write(&tmp, bytes).is_err() || std::fs::rename(&tmp, self.path(key, kind)).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    fn path(&self, key: &str, kind: &str) -> PathBuf {
        self.dir.join(format!("{key}.{kind}"))
    }
}

/// The SHA-256 (hex) of `parts`, each length-prefixed so that no two part lists collide by
/// concatenation.
pub fn key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// This compiler's fingerprint (module docs): the executable's bytes and LLVM's version.
pub fn compiler_fingerprint() -> &'static str {
    static FP: OnceLock<String> = OnceLock::new();
    FP.get_or_init(|| {
        let exe = std::env::current_exe().and_then(std::fs::read).unwrap_or_default();
        let (major, minor, patch) = inkwell::support::get_llvm_version();
        key(&[&exe, format!("llvm {major}.{minor}.{patch}").as_bytes(), env!("CARGO_PKG_VERSION").as_bytes()])
    })
}

/// ptxas's identity (module docs), or `None` when it does not run.
pub fn ptxas_identity(ptxas: &Path) -> Option<String> {
    static ID: OnceLock<Option<(PathBuf, String)>> = OnceLock::new();
    let id = ID.get_or_init(|| {
        let out = std::process::Command::new(ptxas).arg("--version").output().ok().filter(|o| o.status.success())?;
        Some((ptxas.to_path_buf(), key(&[ptxas.as_os_str().as_encoded_bytes(), &out.stdout])))
    });
    id.as_ref().filter(|(p, _)| p == ptxas).map(|(_, k)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_their_parts() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_eq!(key(&[b"x"]), key(&[b"x"]));
        // SHA-256 of the empty input, preceded by no parts: the digest of nothing.
        assert_eq!(key(&[]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn an_entry_round_trips_and_a_missing_one_counts_as_a_miss() {
        let dir = std::env::temp_dir().join(format!("tilec-cache-unit-{}", std::process::id()));
        let c = BuildCache::at(&dir);
        assert_eq!(c.get("k", "ptx"), None);
        c.put("k", "ptx", b"text");
        assert_eq!(c.get("k", "ptx").as_deref(), Some(&b"text"[..]));
        assert_eq!(c.stats("ptx"), (1, 1));
        assert_eq!(c.stats("cubin"), (0, 0));
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        assert_eq!(names, vec!["k.ptx".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
