//! `kverify audit` with the real PyTorch worker on CPU: the red-team ModelNew tricks of
//! `tests/fixtures/audit/redteam.jsonl` are each caught by their gate, the honest ones and the
//! positive control (each task's own Model as ModelNew) are clean on every gate that applies.
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
    // The n/a each task must show (docs/audit.md): the sum (16x4096) and the linear layer
    // (8x64) write their sizes as literals, so CMP-03 has no size constant to change; PRC-02
    // needs an output of at least 2^11 at U[1,2) inputs, which only the 4096-long sum reaches
    // (the matmul's K = 256 gives about 600, the linear layer's 64 inputs less).
    let na: [&[&str]; 3] = [&["PRC-02"], &["CMP-03"], &["CMP-03", "PRC-02"]];
    for r in &recs {
        assert_eq!(r["verdict"], "clean", "{r}");
        let want = na[r["task"].as_u64().unwrap_or(1) as usize - 1];
        let gates = r["gates"].as_object().cloned().unwrap_or_default();
        assert_eq!(gates.len(), 11, "{r}");
        for (g, x) in &gates {
            let expect = if want.contains(&g.as_str()) { "n/a" } else { "pass" };
            assert_eq!(x["status"], expect, "{g}: {r}");
        }
    }
}
