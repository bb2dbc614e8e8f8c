//! The KB request an audit sends: the base seed (`--seed`, 42 by default) and the number of
//! KernelBench trials, from which the worker draws KernelBench's trial seeds with its own
//! PyTorch (`kverify::audit::kernelbench`; the draw itself is tested against PyTorch in
//! `tests/audit_torch.rs`, ignored: it needs PyTorch).

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use common::audit::{fake_worker, kverify, row, scratch, write_corpus};
use kverify::audit::kernelbench::TRIALS;
use serde_json::{json, Value};

/// The KB request carries the base seed and KernelBench's 5 trials; the other gates keep their
/// seeds (base + offset).
#[test]
fn an_audit_sends_the_base_seed_and_the_trial_count_with_kb() {
    let dir = scratch("kb-seeds");
    let log = dir.join("params");
    let corpus = write_corpus(&dir, &[row(1, Some(json!({"paramlog": log.display().to_string()})), true)]);
    for (seed, args) in [(42, vec![]), (7, vec!["--seed", "7"])] {
        let _ = std::fs::remove_file(&log);
        let out = dir.join(format!("out-{seed}"));
        let w = fake_worker();
        let mut a = vec![corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &w, "--quiet"];
        a.extend(args);
        let o = kverify(&a).output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let runs: Vec<Value> = std::fs::read_to_string(&log).expect("log").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        let of = |g: &str| runs.iter().find(|r| r["gate"] == g).map(|r| r["params"].clone()).unwrap_or(Value::Null);
        let kb = of("KB");
        assert_eq!((kb["seeds"].clone(), kb["trials"].as_u64()), (json!([seed]), Some(TRIALS as u64)), "seed {seed}");
        assert_eq!(TRIALS, 5, "KernelBench's num_correct_trials");
        assert_eq!(of("RES-01")["seeds"], json!([seed + 201, seed + 202]), "seed {seed}");
        assert_eq!((kb["atol"].as_f64(), kb["rtol"].as_f64()), (Some(1e-2), Some(1e-2)));
    }
}
