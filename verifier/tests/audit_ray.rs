//! `scripts/audit_ray.py`, the Ray driver of `kverify audit` shards, on a local Ray instance of
//! this machine with the PyTorch-free stand-in worker: the shards' merged report is byte for
//! byte the unsharded one, a rerun judges nothing twice, a failing shard makes the driver fail
//! and name it. Needs Ray, which CI does not install: `PYTHONPATH=<dir with ray> cargo test -p
//! kverify --test audit_ray -- --ignored` (docs/audit.md, "Shards and several machines").

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kverify-audit-ray-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

fn fake_worker() -> String {
    format!("python3 {}/tests/fixtures/audit/fake_worker.py", env!("CARGO_MANIFEST_DIR"))
}

fn driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/audit_ray.py")
}

/// 8 kernels: every third has an EXC-01 mismatch (broken), task 5 a CMP-01 violation.
fn corpus(dir: &Path) -> PathBuf {
    let rows: Vec<String> = (0..8)
        .map(|t| {
            let d = match t {
                5 => json!({"run": {"CMP-01": {"seeds": [{"seed": 1, "err": 1.0, "nonfinite_where_ref_finite": 0, "shape_ok": true}]}}}),
                t if t % 3 == 1 => json!({"run": {"EXC-01": {"mismatches": 1, "total": 9}}}),
                _ => json!({}),
            };
            json!({"level_id": 1, "task_id": t, "ref_code": "class Model: pass\n", "custom_code": format!("#FAKE {d}\nclass ModelNew: pass\n"), "score_default": 1.0}).to_string() + "\n"
        })
        .collect();
    let p = dir.join("corpus.jsonl");
    std::fs::write(&p, rows.concat()).expect("corpus");
    p
}

fn ray_audit(corpus: &Path, out: &Path, worker: &str, shards: &str) -> Output {
    Command::new("python3")
        .arg(driver())
        .arg(corpus)
        .args(["--out", out.to_str().unwrap_or(""), "--device", "cpu", "--shards", shards, "--kverify", env!("CARGO_BIN_EXE_kverify"), "--", "--worker", worker])
        .output()
        .expect("run the driver")
}

#[test]
#[ignore = "needs Ray (not installed in CI); see the module doc for how to run it"]
fn ray_shards_merge_into_the_unsharded_report_and_resume() {
    let dir = scratch("merge");
    let c = corpus(&dir);
    let (whole, sharded) = (dir.join("whole"), dir.join("ray"));
    let o = Command::new(env!("CARGO_BIN_EXE_kverify")).arg("audit").arg(&c).arg("--out").arg(&whole).args(["--worker", &fake_worker(), "--quiet"]).output().expect("kverify");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // More shards (3) than this machine's CPU slots (2): Ray queues the third.
    let o = ray_audit(&c, &sharded, &fake_worker(), "3");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    // The merged report is the driver's own last step (the shards' output is not shown): its
    // table counts every shard's kernels.
    let table = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(table.contains("  kernels recorded                          8\n"), "{table}");
    assert!(table.contains(&format!("report: {}", sharded.join("summary.json").display())), "{table}");
    let files: Vec<String> = std::fs::read_dir(&sharded).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().to_string()).filter(|n| n.starts_with("kernels-")).collect();
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(std::fs::read_to_string(whole.join("summary.json")).expect("a"), std::fs::read_to_string(sharded.join("summary.json")).expect("b"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(sharded.join("summary.json")).expect("s")).expect("json");
    // Tasks 1, 4, 7 broken (EXC-01), task 5 a violation, the other 4 clean.
    assert_eq!(s["verdicts"], json!({"broken": 3, "clean": 4, "violation": 1}));
    // Shards of 8 kernels in 3: 3, 3 and 2 kernels.
    for (i, k) in [(0, 3), (1, 3), (2, 2)] {
        assert!(err.contains(&format!("shard {i}/3 exit 0: kverify audit: shard {i}/3: {k} kernels selected, 0 already recorded, {k} judged now")), "{err}");
    }
    // A rerun resumes: everything recorded, nothing judged twice, the same report.
    let o = ray_audit(&c, &sharded, &fake_worker(), "3");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success() && err.contains("shard 2/3 exit 0: kverify audit: shard 2/3: 2 kernels selected, 2 already recorded, 0 judged now"), "{err}");
    let lines: usize = files.iter().map(|f| std::fs::read_to_string(sharded.join(f)).expect("r").lines().count()).sum();
    assert_eq!(lines, 8);
    assert_eq!(std::fs::read_to_string(whole.join("summary.json")).expect("a"), std::fs::read_to_string(sharded.join("summary.json")).expect("b"));
}

#[test]
#[ignore = "needs Ray (not installed in CI); see the module doc for how to run it"]
fn a_failing_shard_fails_the_driver_and_is_named() {
    let dir = scratch("fail");
    let c = corpus(&dir);
    // A worker that cannot start: every shard's kverify exits 2 without records.
    let o = ray_audit(&c, &dir.join("out"), "false", "2");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard 0/2 exit 2: kverify: error: audit worker could not start"), "{err}");
    assert!(err.contains("--- shard 1/2 failed (exit 2); rerun to resume:"), "{err}");
    // Usage errors are caught before Ray starts.
    let o = Command::new("python3").arg(driver()).arg(dir.join("missing.jsonl")).args(["--out", "x"]).output().expect("driver");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not exist"));
    let o = Command::new("python3").arg(driver()).arg(&c).args(["--out", "x", "--kverify", env!("CARGO_BIN_EXE_kverify"), "--", "--shard", "0/2"]).output().expect("driver");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--shard is set by this driver"));
}
