//! The build cache (`tilec::cache`): a second build of the same source takes every PTX from the
//! cache and writes byte-identical artefacts; an edit to one kernel recompiles that kernel's
//! modules only; an entry that is not PTX text is compiled again, not used. And the PTX does not
//! depend on whether the LLVM IR keeps its value names (`--emit llvm`) or discards them. Through
//! the binary: an oversized cache is trimmed and the build says so; a bad limit is a warning.

use std::sync::Arc;

use tilec::backend::Target;
use tilec::build::{build_source, BuildOptions, BuildReport};
use tilec::cache::BuildCache;

const SRC: &str = "kernel a(x: f32[N], y: out f32[N]) grid(cdiv(N, 128)) threads(128) {
    let i = program_id(0) * 128;
    store y[i..+128] = load x[i..+128] * 2.0;
}
kernel b(x: f32[N], y: out f32[N]) grid(cdiv(N, 128)) threads(128) {
    let i = program_id(0) * 128;
    store y[i..+128] = load x[i..+128] + 1.0;
}
";

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tilec-build-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn build(src: &str, cache: &Arc<BuildCache>) -> BuildReport {
    let opts = BuildOptions { cache: Some(cache.clone()), ..BuildOptions::ptx_only(Target::ALL.to_vec()) };
    build_source(src, "cache.tile", &opts).unwrap_or_else(|e| panic!("{e:?}"))
}

fn ptx(r: &BuildReport) -> Vec<(String, String)> {
    r.built.iter().map(|b| (format!("{}.{}", b.kernel, b.target.name()), b.compiled.ptx.clone())).collect()
}

#[test]
fn a_rebuild_reuses_every_module_and_an_edit_recompiles_only_its_kernel() {
    let dir = scratch("reuse");
    let modules = 2 * Target::ALL.len() as u32;
    let first = ptx(&build(SRC, &Arc::new(BuildCache::at(&dir))));
    let c = Arc::new(BuildCache::at(&dir));
    let second = ptx(&build(SRC, &c));
    assert_eq!(c.stats("ptx"), (modules, 0));
    assert_eq!(first, second, "cached PTX differs from the compiled PTX");
    // Without a cache: the same text.
    let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
    assert_eq!(ptx(&build_source(SRC, "cache.tile", &opts).expect("build")), first);
    // Kernel b edited: its modules are compiled (and differ), a's come from the cache.
    let c = Arc::new(BuildCache::at(&dir));
    let edited = ptx(&build(&SRC.replace("+ 1.0", "+ 3.0"), &c));
    assert_eq!(c.stats("ptx"), (modules / 2, modules / 2));
    for ((name, old), (_, new)) in first.iter().zip(&edited) {
        assert_eq!(name.starts_with("a."), old == new, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_entry_that_is_not_text_is_compiled_again() {
    let dir = scratch("damaged");
    let good = ptx(&build(SRC, &Arc::new(BuildCache::at(&dir))));
    for e in std::fs::read_dir(&dir).expect("cache folder") {
        std::fs::write(e.expect("entry").path(), [0xff, 0xfe, 0x00]).expect("damage");
    }
    let c = Arc::new(BuildCache::at(&dir));
    assert_eq!(ptx(&build(SRC, &c)), good);
    // Every lookup found an entry, none was usable: each module compiled again (and stored).
    assert_eq!(c.stats("ptx").0, 2 * Target::ALL.len() as u32);
    let c = Arc::new(BuildCache::at(&dir));
    assert_eq!(ptx(&build(SRC, &c)), good);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `--emit llvm` the LLVM context discards local value names (`backend::
/// compile_kernel_cached`), a compile-time saving that must not change a byte of the PTX: K#1
/// (wgmma fragments, software pipelining) and GDN's operator file, both targets.
#[test]
fn value_names_do_not_reach_the_ptx() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples");
    for file in ["k1_reverse_scan.tile", "gdn.tile"] {
        let path = root.join(file);
        let src = std::fs::read_to_string(&path).expect("example");
        let build = |write_llvm| {
            let opts = BuildOptions { write_llvm, ..BuildOptions::ptx_only(Target::ALL.to_vec()) };
            build_source(&src, &path.display().to_string(), &opts).unwrap_or_else(|e| panic!("{file}: {e:?}"))
        };
        let (named, unnamed) = (build(true), build(false));
        // And the names are gone before the cache key is taken: a build with `--emit llvm`
        // reuses every module of a plain one.
        if file == "k1_reverse_scan.tile" {
            let dir = scratch("named");
            let opts = |write_llvm, c: &Arc<BuildCache>| BuildOptions { write_llvm, cache: Some(c.clone()), ..BuildOptions::ptx_only(Target::ALL.to_vec()) };
            build_source(&src, &path.display().to_string(), &opts(false, &Arc::new(BuildCache::at(&dir)))).expect("plain build");
            let c = Arc::new(BuildCache::at(&dir));
            let again = build_source(&src, &path.display().to_string(), &opts(true, &c)).expect("--emit llvm build");
            assert_eq!(c.stats("ptx"), (again.built.len() as u32, 0), "--emit llvm did not reuse the plain build's PTX");
            let _ = std::fs::remove_dir_all(&dir);
        }
        assert_eq!(ptx(&named), ptx(&unnamed), "{file}: the PTX depends on LLVM value names");
        for b in &named.built {
            let ir = b.compiled.llvm_ir.as_deref().unwrap_or_else(|| panic!("{file}: --emit llvm gave no IR"));
            assert!(ir.contains("%warp = "), "{file} {}: the IR text lost its value names", b.kernel);
        }
        assert!(unnamed.built.iter().all(|b| b.compiled.llvm_ir.is_none()), "{file}: IR text printed though not asked for");
    }
}

/// `tilec build` with the cache in `dir` and `TILEC_CACHE_MAX_MB` set to `limit`: its stderr.
fn cli_build(dir: &std::path::Path, limit: &str, out: &std::path::Path) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tilec"))
        .args(["build", "dsl-examples/gemm.tile", "--target", "sm_90a", "--no-ptxas", "-o"])
        .arg(out)
        .env("TILEC_CACHE_DIR", dir)
        .env("TILEC_CACHE_MAX_MB", limit)
        .current_dir(root)
        .output()
        .expect("run tilec");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_cli_trims_an_oversized_cache_and_says_so_and_warns_on_a_bad_limit() {
    let (dir, out) = (scratch("cli-trim"), scratch("cli-trim-out"));
    // A stale entry of 2 MiB (a predecessor compiler's), older than anything this build stores.
    std::fs::create_dir_all(&dir).expect("cache dir");
    let stale = dir.join(format!("{}.ptx", "0".repeat(64)));
    std::fs::write(&stale, vec![b'x'; 2 << 20]).expect("stale entry");
    let f = std::fs::File::options().append(true).open(&stale).expect("stale entry");
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)).expect("mtime");
    // Not a number: a warning and a help line, nothing removed, the build succeeds.
    let err = cli_build(&dir, "abc", &out);
    assert!(err.contains("warning: TILEC_CACHE_MAX_MB=\"abc\" is not a whole number of MiB") && err.contains("\nhelp: "), "{err}");
    assert!(stale.exists());
    // 1 MiB, in a build that stores its PTX again (only a build that stored entries trims): the
    // stale entry goes (the least recently used), the new PTX stays, and it says so.
    for e in std::fs::read_dir(&dir).expect("cache").flatten() {
        if e.path() != stale {
            std::fs::remove_file(e.path()).expect("entry");
        }
    }
    let err = cli_build(&dir, "1", &out);
    assert!(!stale.exists(), "{err}");
    assert!(err.contains("build cache: over its 1 MiB limit (TILEC_CACHE_MAX_MB): removed the 1 least recently used key(s), 2.0 MiB"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).expect("cache").flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".ptx")).count(), 1);
    let _ = [std::fs::remove_dir_all(&dir), std::fs::remove_dir_all(&out)];
}
