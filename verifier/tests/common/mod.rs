//! Helpers shared by the tests that run NumPy candidates through the external protocol, and by
//! the tests that run `kverify audit` on a corpus.

pub mod audit;

use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::Candidate;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The verifier crate's folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Puts .tools/py (where scripts/setup.sh installs NumPy) on PYTHONPATH and reports whether
/// python3 can import numpy; says why when it cannot. Set once, before any candidate process
/// starts; the tests only read it afterwards.
#[allow(dead_code)] // not every test binary starts a Python worker
pub fn python_ready() -> bool {
    let tools = root().join("../.tools/py");
    if tools.is_dir() {
        let old = std::env::var("PYTHONPATH").unwrap_or_default();
        std::env::set_var("PYTHONPATH", if old.is_empty() { tools.display().to_string() } else { format!("{}:{old}", tools.display()) });
    }
    let ok = std::process::Command::new("python3").args(["-c", "import numpy"]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        eprintln!("SKIPPED: python3 with numpy not found (run scripts/setup.sh and `. .tools/env.sh`)");
    }
    ok
}

/// The red-team manifest `python/redteam/<name>.json` as a candidate with a per-call time limit.
#[allow(dead_code)] // not every test that includes this module calls it
pub fn ext(name: &str, time_limit: Duration) -> Arc<dyn Candidate> {
    let m = Manifest::load(&root().join(format!("python/redteam/{name}.json"))).expect("manifest");
    Arc::new(ExternalCandidate::new(m, time_limit, 2048))
}

/// Runs `kverify audit CORPUS --out OUT --jobs 2 --quiet --time-limit 300 EXTRA…` (OUT emptied
/// first), asserts it exits 0, and returns its records (`OUT/kernels-0of1.jsonl`), one per row.
#[allow(dead_code)] // only the audit tests call it; every test that includes this module compiles it
pub fn run_audit(corpus: &Path, out: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let _ = std::fs::remove_dir_all(out);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kverify"))
        .arg("audit")
        .arg(corpus)
        .arg("--out")
        .arg(out)
        .args(["--jobs", "2", "--quiet", "--time-limit", "300"])
        .args(extra)
        .output()
        .expect("run kverify");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    records_in(out)
}

/// The records of an audit folder's unsharded file.
pub fn records_in(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("kernels-0of1.jsonl")).expect("records");
    text.lines().map(|l| serde_json::from_str(l).expect("record")).collect()
}
