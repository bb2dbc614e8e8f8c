//! Helpers of the tests that run `kverify audit` against the PyTorch-free stand-in worker
//! (`tests/fixtures/audit/fake_worker.py`; its directives are in its docstring).
#![allow(dead_code)] // each test file uses some of them

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The stand-in worker as a `--worker` command.
pub fn fake_worker() -> String {
    format!("python3 {}/tests/fixtures/audit/fake_worker.py", env!("CARGO_MANIFEST_DIR"))
}

/// An empty scratch folder of this test process, `<tmp>/kverify-audit-<pid>-<name>`.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kverify-audit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

/// The reference program of every row (the stand-in worker never runs it).
pub const REF: &str = "class Model: pass\n";

/// A level-1 corpus row for `task` whose ModelNew carries the stand-in worker's `directive`;
/// `accepted`: a numeric `score_default`.
pub fn row(task: i64, directive: Option<Value>, accepted: bool) -> Value {
    let custom = match directive {
        Some(d) => format!("#FAKE {d}\nclass ModelNew: pass\n"),
        None => "class ModelNew: pass\n".into(),
    };
    json!({"level_id": 1, "task_id": task, "ref_code": REF, "custom_code": custom, "score_default": if accepted { json!(1.5) } else { Value::Null }})
}

/// `DIR/corpus.jsonl` with `rows`, one a line.
pub fn write_corpus(dir: &Path, rows: &[Value]) -> PathBuf {
    let p = dir.join("corpus.jsonl");
    std::fs::write(&p, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).expect("write");
    p
}

/// `kverify audit ARGS…` with stdout and stderr piped.
pub fn kverify(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kverify"));
    c.arg("audit").args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Every record in `dir`'s `kernels-*` files, sorted by key.
pub fn records(dir: &Path) -> Vec<Value> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with("kernels-") {
            for l in std::fs::read_to_string(e.path()).expect("read").lines() {
                v.push(serde_json::from_str(l).expect("record"));
            }
        }
    }
    v.sort_by_key(|r: &Value| r["key"].as_str().unwrap_or("").to_string());
    v
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z')).unwrap_or(false)
}
