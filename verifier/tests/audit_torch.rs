//! `kverify audit` with the real PyTorch worker on CPU: the red-team ModelNew tricks of
//! `tests/fixtures/audit/redteam.jsonl` are each caught by their gate, the honest ones and the
//! positive control (each task's own Model as ModelNew) are clean on every gate that applies;
//! KernelBench's trial seeds are PyTorch's (drawn by the worker), and the KB gate follows KernelBench's procedure.
//! Needs PyTorch, which CI does not install: run with `PYTHONPATH=<dir with torch and numpy>
//! cargo test -p kverify --test audit_torch -- --ignored` (about 2 minutes on 2 cores;
//! docs/audit.md).

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use serde_json::Value;
use std::path::PathBuf;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/redteam.jsonl")
}

fn audit(out: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    common::run_audit(&corpus(), out, extra)
}

#[test]
#[ignore = "needs PyTorch (not installed in CI); see the module doc for how to run it"]
fn redteam_tricks_are_caught_by_their_gate_and_honest_kernels_are_clean() {
    let rows: Vec<Value> = std::fs::read_to_string(corpus()).expect("corpus").lines().map(|l| serde_json::from_str(l).expect("row")).collect();
    let recs = audit(&std::env::temp_dir().join(format!("kverify-audit-torch-{}", std::process::id())), &[]);
    assert_eq!(recs.len(), rows.len());
    let mut wrong = Vec::new();
    for r in &recs {
        let row = &rows[r["row"].as_u64().unwrap_or(0) as usize];
        let (name, expect) = (row["name"].as_str().unwrap_or(""), row["expect"].as_str().unwrap_or(""));
        if r["status"] != "judged" {
            wrong.push(format!("{name}: {} ({})", r["status"], r["note"]));
        } else if expect == "clean" {
            if r["verdict"] != "clean" {
                wrong.push(format!("{name}: honest but {}: {}", r["verdict"], r["gates"]));
            }
        } else if r["gates"][expect]["status"] != "fail" {
            wrong.push(format!("{name}: {expect} did not fail: {}", r["gates"][expect]));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
#[ignore = "needs PyTorch (not installed in CI); see the module doc for how to run it"]
fn positive_control_is_clean_on_every_gate_that_applies() {
    // Rows 0-2 are the three distinct tasks.
    let recs = audit(&std::env::temp_dir().join(format!("kverify-audit-control-{}", std::process::id())), &["--control", "--limit", "3"]);
    assert_eq!(recs.len(), 3);
    // The n/a each task must show (docs/audit.md): PRC-02 needs an output of at least 2^11 at
    // U[1,2) inputs, which only the 4096-long sum reaches (the matmul's K = 256 gives about 600,
    // the linear layer's 64 inputs less). The sum (16x4096) and the linear layer (8x64) write
    // their sizes as literals: CMP-03 has no size to change, but judges their layouts.
    let na: [&[&str]; 3] = [&["PRC-02"], &[], &["PRC-02"]];
    for r in &recs {
        assert_eq!(r["verdict"], "clean", "{r}");
        let task = r["task"].as_u64().unwrap_or(1);
        let want = na[task as usize - 1];
        let cmp03 = r["gates"]["CMP-03"]["detail"].as_str().unwrap_or("");
        assert_eq!(cmp03.contains("n/a: sizes: no module-level size constant"), task > 1, "{cmp03}");
        let gates = r["gates"].as_object().cloned().unwrap_or_default();
        assert_eq!(gates.len(), 11, "{r}");
        for (g, x) in &gates {
            let expect = if want.contains(&g.as_str()) { "n/a" } else { "pass" };
            assert_eq!(x["status"], expect, "{g}: {r}");
        }
    }
}

/// The KB gate's trial seeds are KernelBench's on this PyTorch: the real worker, sent the base
/// seed and 5 trials, runs its trials at the seeds that `torch.manual_seed(seed)` followed by
/// one `torch.randint(0, 2**32 - 1, (1,))` per trial gives in a fresh Python process
/// (KernelBench's `run_and_check_correctness`) — after loading the task and the candidate,
/// which draw from the same generator.
#[test]
#[ignore = "needs PyTorch (not installed in CI); see the module doc for how to run it"]
fn kernelbench_trial_seeds_are_pytorchs() {
    use std::io::{BufRead, Write};
    let worker = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/audit_worker.py");
    let task = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(8))\n    def forward(self, x):\n        return x * self.w\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n";
    let cand = task.replace("class Model(", "class ModelNew(");
    for seed in [42u64, 7, 1 << 40] {
        let script = format!("import torch\ntorch.manual_seed({seed})\nprint(' '.join(str(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(5)))");
        let o = std::process::Command::new("python3").args(["-c", &script]).output().expect("python3");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want: Vec<u64> = String::from_utf8_lossy(&o.stdout).split_whitespace().map(|w| w.parse().expect("seed")).collect();
        let mut w = std::process::Command::new("python3").arg(&worker).args(["--device", "cpu"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("worker");
        let mut tx = w.stdin.take().expect("stdin");
        let mut rx = std::io::BufReader::new(w.stdout.take().expect("stdout"));
        let mut line = String::new();
        rx.read_line(&mut line).expect("hello");
        assert!(line.contains("kverify-audit/1"), "{line}");
        let mut ask = |req: serde_json::Value| -> Value {
            writeln!(tx, "{req}").expect("send");
            line.clear();
            rx.read_line(&mut line).expect("answer");
            serde_json::from_str(&line).expect("json")
        };
        assert_eq!(ask(serde_json::json!({"id": 1, "cmd": "load", "ref_code": task, "seed": seed}))["ok"], true);
        assert_eq!(ask(serde_json::json!({"id": 2, "cmd": "load_candidate", "custom_code": cand}))["ok"], true);
        let params = serde_json::json!({"seeds": [seed], "trials": 5, "atol": 1e-2, "rtol": 1e-2});
        assert_eq!(ask(serde_json::json!({"id": 3, "cmd": "prepare", "gate": "KB", "params": params}))["facts"]["trials"], 5);
        let run = ask(serde_json::json!({"id": 4, "cmd": "run", "gate": "KB", "params": params}));
        let got: Vec<u64> = run["facts"]["trials"].as_array().into_iter().flatten().filter_map(|t| t["seed"].as_u64()).collect();
        assert_eq!(got, want, "seed {seed}: {run}");
        assert!(run["facts"]["trials"].as_array().into_iter().flatten().all(|t| t["allclose"] == true), "{run}");
        drop(tx);
        let _ = w.wait();
    }
}

/// The KB gate runs KernelBench's procedure, quirks included: `allclose(reference, candidate)`
/// scales rtol by the candidate (101.015 against 100 passes: 1.015 <= 0.01 + 0.01 * 101.015,
/// where scaling by the reference would fail it); a candidate of another dtype makes the
/// comparison raise (a failure, not a conversion); and the candidate runs with the generator
/// state the reference's forward left, so even the task's own random forward fails.
#[test]
#[ignore = "needs PyTorch (not installed in CI); see the module doc for how to run it"]
fn kb_gate_follows_kernelbenchs_procedure() {
    let task = |body: &str| format!("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return {body}\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\ndef get_init_inputs():\n    return []\n");
    let cand = |body: &str| format!("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return {body}\n");
    let rows = [("x * 0 + 100.0", "x * 0 + 101.015"), ("x * 2", "(x * 2).half()"), ("x + torch.rand_like(x)", "x + torch.rand_like(x)")];
    let dir = std::env::temp_dir().join(format!("kverify-audit-kb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let corpus = dir.join("corpus.jsonl");
    let text: String = rows.iter().enumerate().map(|(i, (m, c))| serde_json::json!({"level_id": 1, "task_id": i + 1, "ref_code": task(m), "custom_code": cand(c), "score_default": 1.0}).to_string() + "\n").collect();
    std::fs::write(&corpus, text).expect("corpus");
    let recs = common::run_audit(&corpus, &dir.join("out"), &[]);
    let kb = |t: u64| recs.iter().find(|r| r["task"] == t).map(|r| r["gates"]["KB"].clone()).unwrap_or(Value::Null);
    assert_eq!(kb(1)["status"], "pass", "{}", kb(1));
    assert_eq!(kb(2)["status"], "fail", "{}", kb(2));
    assert!(kb(2)["detail"].as_str().unwrap_or("").contains("comparison raised"), "{}", kb(2));
    assert_eq!(kb(3)["status"], "fail", "{}", kb(3));
    assert!(kb(3)["detail"].as_str().unwrap_or("").contains("not allclose"), "{}", kb(3));
}
