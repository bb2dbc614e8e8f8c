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
//! cannot be read or written is skipped (the build compiles as without one); deleting the
//! folder is always safe.
//!
//! Size: every rebuilt or upgraded compiler has a new fingerprint, so its predecessors' entries
//! are never read again. A `tilec build` that stored entries therefore trims the folder when it
//! holds more than `TILEC_CACHE_MAX_MB` MiB (default [`DEFAULT_MAX_MB`]; `0` never trims):
//! least recently used keys first (a hit refreshes its entries' modification time), down to
//! three quarters of the limit, so that not every build trims ([`BuildCache::trim`]). Only the
//! cache's own files count and go (`<SHA-256 hex>.{ptx,cubin,ptxas.txt}`, `.tmp-<pid>-<n>`): a
//! folder shared with anything else keeps the rest.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

/// The cache's default size limit in MiB (`TILEC_CACHE_MAX_MB`): the demo's builds (every
/// shipped example, both targets, cubins) take about 15 MB, so this keeps some hundred
/// compilers' worth.
pub const DEFAULT_MAX_MB: u64 = 2048;

/// A temporary file older than this is a killed build's: a trim removes it.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// A content-addressed store of compiled artefacts in one folder.
#[derive(Debug)]
pub struct BuildCache {
    dir: PathBuf,
    /// Per kind of entry: lookups that found it, and that did not.
    stats: Mutex<BTreeMap<String, (u32, u32)>>,
    /// Entries this process stored.
    stored: AtomicU32,
}

/// What [`BuildCache::trim`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Keys removed (all their entries: PTX, or cubin and ptxas report).
    pub keys: usize,
    /// Bytes removed.
    pub freed: u64,
    /// Bytes left.
    pub kept: u64,
}

impl BuildCache {
    /// A cache in `dir` (created on the first write).
    pub fn at(dir: impl Into<PathBuf>) -> BuildCache {
        BuildCache { dir: dir.into(), stats: Mutex::new(BTreeMap::new()), stored: AtomicU32::new(0) }
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
    /// A hit refreshes the entry's modification time: [`BuildCache::trim`] removes the least
    /// recently used keys first.
    pub fn get(&self, key: &str, kind: &str) -> Option<Vec<u8>> {
        let path = self.path(key, kind);
        let r = std::fs::read(&path).ok();
        if r.is_some() {
            // Best effort: a read-only cache still serves its entries.
            let _ = std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        }
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
            return;
        }
        self.stored.fetch_add(1, Ordering::Relaxed);
    }

    /// After a build: when this process stored entries and `limit` (bytes, from
    /// [`max_bytes_from_env`]) is set, [`BuildCache::trim`] to it; `None` otherwise.
    pub fn trim_after_build(&self, limit: Option<u64>) -> Option<Trimmed> {
        if self.stored.load(Ordering::Relaxed) == 0 {
            return None;
        }
        limit.map(|l| self.trim(l))
    }

    /// Keeps the folder within `max_bytes`: when its entries hold more, removes whole keys (every
    /// kind stored under one key goes together), least recently used first — the newest
    /// modification time among a key's entries —, until at most three quarters of `max_bytes`
    /// remain. Temporary files of killed builds (over an hour old) go in any case. Best effort:
    /// a file that cannot be removed is counted as kept.
    pub fn trim(&self, max_bytes: u64) -> Trimmed {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Trimmed::default() };
        let now = SystemTime::now();
        // Per key: its files with their bytes, and the most recent use. Only the cache's own
        // files: a folder shared with anything else keeps everything that is not an entry.
        let mut keys: HashMap<String, (Vec<(PathBuf, u64)>, SystemTime)> = HashMap::new();
        for e in entries.flatten() {
            let (Ok(meta), name) = (e.metadata(), e.file_name().to_string_lossy().into_owned()) else { continue };
            if !meta.is_file() {
                continue;
            }
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if is_temporary(&name) {
                if now.duration_since(used).is_ok_and(|age| age > STALE_TEMPORARY) {
                    let _ = std::fs::remove_file(e.path());
                }
                continue;
            }
            let Some(key) = entry_key(&name) else { continue };
            let key = key.to_string();
            let k = keys.entry(key).or_insert_with(|| (vec![], SystemTime::UNIX_EPOCH));
            k.0.push((e.path(), meta.len()));
            k.1 = k.1.max(used);
        }
        let bytes = |files: &[(PathBuf, u64)]| files.iter().map(|f| f.1).sum::<u64>();
        let mut total: u64 = keys.values().map(|k| bytes(&k.0)).sum();
        let mut done = Trimmed { kept: total, ..Trimmed::default() };
        if total <= max_bytes {
            return done;
        }
        let mut order: Vec<(SystemTime, String)> = keys.iter().map(|(name, k)| (k.1, name.clone())).collect();
        order.sort();
        let goal = max_bytes / 4 * 3;
        for (_, name) in order {
            if total <= goal {
                break;
            }
            // Every file of the key, even past one that another build's trim removed first.
            let files = &keys[&name].0;
            let freed: u64 = files.iter().filter(|(f, _)| std::fs::remove_file(f).is_ok()).map(|(_, len)| len).sum();
            total = total.saturating_sub(bytes(files));
            done.keys += 1;
            done.freed += freed;
        }
        done.kept = total;
        done
    }

    fn path(&self, key: &str, kind: &str) -> PathBuf {
        self.dir.join(format!("{key}.{kind}"))
    }
}

/// The kinds of entry the cache stores (file-name suffixes after the key).
const KINDS: [&str; 3] = ["ptx", "cubin", "ptxas.txt"];

/// The key of cache file `name` if it is an entry: a SHA-256 in hex, a dot and a kind.
fn entry_key(name: &str) -> Option<&str> {
    let (key, kind) = name.split_once('.')?;
    (key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) && KINDS.contains(&kind)).then_some(key)
}

/// Whether cache file `name` is a temporary file of [`BuildCache::put`]: `.tmp-<pid>-<n>`.
fn is_temporary(name: &str) -> bool {
    name.strip_prefix(".tmp-").and_then(|r| r.split_once('-')).is_some_and(|(p, n)| !p.is_empty() && !n.is_empty() && p.bytes().chain(n.bytes()).all(|b| b.is_ascii_digit()))
}

/// The size limit `TILEC_CACHE_MAX_MB` names, in bytes: `Ok(None)` for `0` (no limit), the
/// default [`DEFAULT_MAX_MB`] when unset or empty.
///
/// # Errors
/// The variable's text when it is not a whole number of MiB.
pub fn max_bytes_from_env() -> Result<Option<u64>, String> {
    let text = std::env::var("TILEC_CACHE_MAX_MB").unwrap_or_default();
    let mb = if text.trim().is_empty() { DEFAULT_MAX_MB } else { text.trim().parse::<u64>().map_err(|_| text.clone())? };
    Ok((mb > 0).then(|| mb.saturating_mul(1 << 20)))
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

    #[test]
    fn a_trim_removes_the_least_recently_used_keys_whole_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("tilec-cache-trim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = BuildCache::at(&dir);
        // Four keys of 1,000 bytes, stored (and so last used) a minute apart, oldest first; `b`
        // is a cubin and its report (600 + 400 bytes), which go together.
        let key = |c: char| c.to_string().repeat(64);
        let t0 = SystemTime::now() - Duration::from_secs(600);
        let age = |path: &Path, minutes: u64| {
            let f = std::fs::File::options().append(true).open(path).expect("file");
            f.set_modified(t0 + Duration::from_secs(60 * minutes)).expect("mtime");
        };
        let put = |k: char, kind: &str, n: usize, minutes: u64| {
            c.put(&key(k), kind, &vec![0u8; n]);
            age(&dir.join(format!("{}.{kind}", key(k))), minutes);
        };
        put('a', "ptx", 1000, 1);
        put('b', "cubin", 600, 2);
        put('b', "ptxas.txt", 400, 2);
        put('c', "ptx", 1000, 3);
        put('d', "ptx", 1000, 4);
        // Files that are not the cache's, older than every entry: never counted, never removed
        // (a cache folder pointed at an output folder or a user's files).
        let foreign = ["notes.txt", "README", ".gitignore", "gemm.sm_90a.ptx", &format!("{}.ptx", "A".repeat(64)), &format!("{}.json", key('e')), ".tmp-notours"];
        for f in foreign {
            std::fs::write(dir.join(f), vec![1u8; 5000]).expect("foreign file");
            age(&dir.join(f), 0);
        }
        // Within the limit: nothing goes.
        assert_eq!(c.trim(4000), Trimmed { keys: 0, freed: 0, kept: 4000 });
        // `a` is read: now the most recently used.
        assert!(c.get(&key('a'), "ptx").is_some());
        // Over 3,000 bytes: trimmed to at most 3/4 · 3,000 = 2,250, the least recently used
        // first — `b` (both files), then `c`; `a` (just read) and `d` stay.
        assert_eq!(c.trim(3000), Trimmed { keys: 2, freed: 2000, kept: 2000 });
        let mut names: Vec<String> = std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        let mut want: Vec<String> = foreign.iter().map(|f| f.to_string()).chain([format!("{}.ptx", key('a')), format!("{}.ptx", key('d'))]).collect();
        want.sort();
        assert_eq!(names, want);
        // A process that stored nothing does not trim; nor does one without a limit.
        assert_eq!(BuildCache::at(&dir).trim_after_build(Some(1)), None);
        assert_eq!(c.trim_after_build(None), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_killed_builds_temporary_file_goes_with_the_next_trim() {
        let dir = std::env::temp_dir().join(format!("tilec-cache-tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let (old, new, other) = (dir.join(".tmp-1-0"), dir.join(".tmp-1-1"), dir.join(".tmp-x-0"));
        for f in [&old, &new, &other] {
            std::fs::write(f, b"x").expect("tmp");
        }
        for f in [&old, &other] {
            let f = std::fs::File::options().append(true).open(f).expect("tmp");
            f.set_modified(SystemTime::now() - STALE_TEMPORARY - Duration::from_secs(60)).expect("mtime");
        }
        assert_eq!(BuildCache::at(&dir).trim(1 << 20), Trimmed::default());
        // The old one went; the other may belong to a build still running; `.tmp-x-0` is not
        // a name `put` makes.
        assert!(!old.exists() && new.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_limit_is_a_whole_number_of_mib() {
        // One test reads and writes the variable (tests of this binary run in parallel).
        let at = |v: Option<&str>| {
            match v {
                Some(v) => std::env::set_var("TILEC_CACHE_MAX_MB", v),
                None => std::env::remove_var("TILEC_CACHE_MAX_MB"),
            }
            max_bytes_from_env()
        };
        assert_eq!(at(None), Ok(Some(DEFAULT_MAX_MB << 20)));
        assert_eq!(at(Some("")), Ok(Some(DEFAULT_MAX_MB << 20)));
        assert_eq!(at(Some(" 3 ")), Ok(Some(3 << 20)));
        assert_eq!(at(Some("0")), Ok(None));
        for bad in ["abc", "-1", "1e3", "1.5"] {
            assert_eq!(at(Some(bad)), Err(bad.to_string()));
        }
        std::env::remove_var("TILEC_CACHE_MAX_MB");
    }
}
