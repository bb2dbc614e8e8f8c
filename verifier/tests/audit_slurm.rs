//! `scripts/audit_slurm.sbatch` (the Slurm job array of `kverify audit` shards) run as Slurm
//! would run its array tasks — the same script with `SLURM_ARRAY_TASK_ID`/`COUNT`/`MIN`/`MAX` set,
//! here one after the other without Slurm — against the PyTorch-free stand-in worker: the merged
//! report equals the unsharded one, and a wrong array is refused. Not a test of Slurm itself
//! (none on this machine).

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kverify-audit-slurm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

fn worker() -> String {
    format!("python3 {}/tests/fixtures/audit/fake_worker.py", env!("CARGO_MANIFEST_DIR"))
}

fn array_task(corpus: &Path, out: &Path, i: usize, n: usize, min: usize, max: usize) -> Output {
    Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/audit_slurm.sbatch"))
        .arg(corpus)
        .arg(out)
        .args(["--worker", &worker()])
        .env("SLURM_ARRAY_TASK_ID", i.to_string())
        .env("SLURM_ARRAY_TASK_COUNT", n.to_string())
        .env("SLURM_ARRAY_TASK_MIN", min.to_string())
        .env("SLURM_ARRAY_TASK_MAX", max.to_string())
        .env("KVERIFY", env!("CARGO_BIN_EXE_kverify"))
        .env("AUDIT_DEVICE", "cpu")
        .output()
        .expect("bash")
}

#[test]
fn array_tasks_shard_the_audit_and_merge_into_the_unsharded_report() {
    let dir = scratch("array");
    let rows: String = (0..5)
        .map(|t| {
            let d = if t == 3 { json!({"run": {"EXC-01": {"mismatches": 2, "total": 9}}}) } else { json!({}) };
            json!({"level_id": 1, "task_id": t, "ref_code": "class Model: pass\n", "custom_code": format!("#FAKE {d}\nclass ModelNew: pass\n"), "score_default": 1.0}).to_string() + "\n"
        })
        .collect();
    let corpus = dir.join("corpus.jsonl");
    std::fs::write(&corpus, rows).expect("corpus");
    let (whole, arr) = (dir.join("whole"), dir.join("array"));
    let o = Command::new(env!("CARGO_BIN_EXE_kverify")).arg("audit").arg(&corpus).arg("--out").arg(&whole).args(["--worker", &worker(), "--quiet"]).output().expect("kverify");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for i in [1, 0] {
        let o = array_task(&corpus, &arr, i, 2, 0, 1);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Shard i of 2 of 5 kernels: 3 (i = 0) or 2.
        let k = if i == 0 { 3 } else { 2 };
        assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("shard {i}/2: {k} kernels selected, 0 already recorded, {k} judged now")));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_kverify")).arg("audit").arg(&corpus).arg("--out").arg(&arr).arg("--report-only").output().expect("report");
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(whole.join("summary.json")).expect("a"), std::fs::read_to_string(arr.join("summary.json")).expect("b"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("  broken          1\n"), "{}", String::from_utf8_lossy(&o.stdout));
    // A requeued array task resumes its shard: nothing judged twice.
    let o = array_task(&corpus, &arr, 0, 2, 0, 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("shard 0/2: 3 kernels selected, 3 already recorded, 0 judged now"));
    // An array whose indices are not 0..n-1 would skip or repeat shards: refused.
    let o = array_task(&corpus, &dir.join("bad"), 1, 2, 1, 2);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("indices must be 0..n-1"));
    assert!(!dir.join("bad").exists());
}
