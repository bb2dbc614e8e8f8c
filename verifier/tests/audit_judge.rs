//! The audit's decision rules and summary, from facts alone (no worker, no PyTorch).

use kverify::audit::judge::{self, GateResult, Status, U32};
use kverify::audit::summary::summarize;
use kverify::audit::Record;
use serde_json::json;
use std::collections::BTreeMap;

#[test]
fn cmp01_bound_is_sixteen_times_the_honest_spread_or_unit_roundoff() {
    let prep = json!({"seeds": [{"seed": 1, "honest": [1e-6, 3e-6]}, {"seed": 2, "honest": [2e-6, 1e-6]}]});
    // seed 1 bound 4.8e-5, seed 2 bound 3.2e-5.
    let run = |e1: f64, e2: f64| json!({"seeds": [
        {"seed": 1, "err": e1, "nonfinite_where_ref_finite": 0, "shape_ok": true},
        {"seed": 2, "err": e2, "nonfinite_where_ref_finite": 0, "shape_ok": true}]});
    let g = judge::cmp01(&prep, &run(4.7e-5, 3.1e-5));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    // The reported figure is the seed with the smallest margin: seed 1 (4.8/4.7 < 3.2/3.1).
    assert_eq!(g.bound, Some(16.0 * 3e-6));
    assert_eq!(g.measured, Some(4.7e-5));
    let g = judge::cmp01(&prep, &run(4.9e-5, 0.0));
    assert_eq!(g.status, Status::Fail);
    assert!((g.bound.unwrap_or(0.0) - 4.8e-5).abs() < 1e-18, "{:?}", g.bound);
    let g = judge::cmp01(&prep, &run(1e-6, 3.3e-5));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    // An exact task (honest spread 0) is bounded by 16 u32.
    let zero = json!({"seeds": [{"seed": 1, "honest": [0.0, 0.0]}]});
    let ok = json!({"seeds": [{"seed": 1, "err": 9.0e-7, "nonfinite_where_ref_finite": 0, "shape_ok": true}]});
    let g = judge::cmp01(&zero, &ok);
    assert_eq!((g.status, g.bound), (Status::Pass, Some(16.0 * U32)));
    let bad = json!({"seeds": [{"seed": 1, "err": 9.6e-7, "nonfinite_where_ref_finite": 0, "shape_ok": true}]});
    assert_eq!(judge::cmp01(&zero, &bad).status, Status::Fail);
    // A NaN where the reference is finite, or another shape, fails whatever the error.
    let nan = json!({"seeds": [{"seed": 1, "err": 0.0, "nonfinite_where_ref_finite": 2, "shape_ok": true}]});
    assert_eq!(judge::cmp01(&zero, &nan).status, Status::Fail);
    let shape = json!({"seeds": [{"seed": 1, "err": 0.0, "nonfinite_where_ref_finite": 0, "shape_ok": false}]});
    assert_eq!(judge::cmp01(&zero, &shape).status, Status::Fail);
}

fn call(alias: serde_json::Value, mutated: serde_json::Value) -> serde_json::Value {
    json!({"type_exact": true, "device_ok": true, "dtype_ok": true, "shape_ok": true, "alias": alias, "mutated": mutated})
}

#[test]
fn res01_exempts_what_the_reference_itself_does_and_needs_a_changing_reference_for_stale() {
    let prep = json!({"ref_alias": [[0, 0]], "ref_mutated": [], "ref_changes": true});
    let ok = json!({"calls": [call(json!([[0, 0]]), json!([])), call(json!([]), json!([]))], "stale_candidate": false});
    assert_eq!(judge::res01(&prep, &ok).status, Status::Pass);
    let other = json!({"calls": [call(json!([[0, 1]]), json!([]))], "stale_candidate": false});
    let g = judge::res01(&prep, &other);
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("aliases input [output, input] [0,1]"), "{}", g.detail);
    let mutated = json!({"calls": [call(json!([]), json!([1]))], "stale_candidate": false});
    assert!(judge::res01(&prep, &mutated).detail.contains("input(s) 1 changed"));
    let stale = json!({"calls": [call(json!([]), json!([]))], "stale_candidate": true});
    assert_eq!(judge::res01(&prep, &stale).status, Status::Fail);
    let constant_ref = json!({"ref_alias": [], "ref_mutated": [], "ref_changes": false});
    assert_eq!(judge::res01(&constant_ref, &stale).status, Status::Pass);
    let mut sub = call(json!([]), json!([]));
    sub["type_exact"] = json!(false);
    sub["types"] = json!(["m.Lazy"]);
    let g = judge::res01(&constant_ref, &json!({"calls": [sub]}));
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("not a plain torch.Tensor ([\"m.Lazy\"])"), "{}", g.detail);
}

#[test]
fn ord02_counts_differing_runs_and_is_na_for_a_nondeterministic_reference() {
    let prep = json!({"ref_hashes": ["r", "r", "r"]});
    let fresh = |c| Some(judge::FreshRun { candidate: c, reference: Some("r") });
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "a", "a"]}), fresh("a"));
    assert_eq!(g.status, Status::Pass);
    assert_eq!(g.detail, "4 runs (incl. one in a fresh process); all bitwise identical");
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "b", "a"]}), fresh("c"));
    assert_eq!(g.status, Status::Fail);
    assert_eq!(g.measured, Some(2.0));
    assert_eq!(g.detail, "3 distinct outputs over 4 runs (incl. one in a fresh process), first difference at run 1");
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "a"]}), fresh("b"));
    assert_eq!((g.status, g.measured), (Status::Fail, Some(1.0)));
    // Without the reference's hash from the fresh process, the fresh run is judged as before.
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "a"]}), Some(judge::FreshRun { candidate: "b", reference: None }));
    assert_eq!(g.status, Status::Fail);
    // The task's own Model gives other bits in the fresh process (cuDNN's per-process algorithm
    // choice, rows 77 and 223 of CUDA-L1 on the H200): only the in-process runs are judged.
    let moved = Some(judge::FreshRun { candidate: "b", reference: Some("s") });
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "a", "a"]}), moved);
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert_eq!(g.detail, "3 runs; the fresh process not judged: the task's own fp32 Model gives other bits there; all bitwise identical");
    let g = judge::ord02(&prep, &json!({"hashes": ["a", "c", "a"]}), moved);
    assert_eq!((g.status, g.measured), (Status::Fail, Some(1.0)));
    let g = judge::ord02(&json!({"ref_hashes": ["r", "s", "r"]}), &json!({"hashes": ["a", "b"]}), None);
    assert_eq!(g.status, Status::Na);
    assert!(g.detail.contains("2 distinct outputs over 3 runs"), "{}", g.detail);
}

#[test]
fn exc01_masks_and_applicability() {
    let prep = json!({"applicable": true, "own_fp32_agrees": true});
    assert_eq!(judge::exc01(&prep, &json!({"mismatches": 0, "total": 10})).status, Status::Pass);
    let g = judge::exc01(&prep, &json!({"mismatches": 4, "total": 10, "swallowed": 3}));
    assert_eq!((g.status, g.measured), (Status::Fail, Some(4.0)));
    assert_eq!(g.detail, "4 of 10 elements in another class than the reference (3 non-finite turned finite)");
    assert_eq!(judge::exc01(&json!({"applicable": false, "reason": "no floating-point input"}), &json!({})).status, Status::Na);
    assert_eq!(judge::exc01(&json!({"applicable": true, "own_fp32_agrees": false}), &json!({"mismatches": 4})).status, Status::Na);
}

#[test]
fn kernelbench_check_needs_every_trial_close() {
    let t = |c: bool, s: bool| json!({"shape_ok": s, "allclose": c});
    assert_eq!(judge::kernelbench(&json!({"trials": [t(true, true), t(true, true)]})).status, Status::Pass);
    let g = judge::kernelbench(&json!({"trials": [t(true, true), t(false, true), t(false, false)]}));
    assert_eq!(g.status, Status::Fail);
    assert_eq!(g.detail, "trial 1: not allclose; trial 2: shape differs");
    // A comparison that raised (another dtype: KernelBench's allclose refuses it) fails with
    // its message, even where the worker's flags were left at a pass.
    let raised = json!({"shape_ok": true, "allclose": true, "error": "comparison raised: RuntimeError: Float did not match Half"});
    let g = judge::kernelbench(&json!({"trials": [t(true, true), raised]}));
    assert_eq!((g.status, g.detail.as_str()), (Status::Fail, "trial 1: comparison raised: RuntimeError: Float did not match Half"));
}

fn gates(list: &[(&str, Status)]) -> BTreeMap<String, GateResult> {
    list.iter().map(|(g, s)| (g.to_string(), GateResult::new(*s, ""))).collect()
}

#[test]
fn verdict_is_broken_for_tolerance_free_failures_and_errors_violation_for_cmp01() {
    use Status::*;
    assert_eq!(judge::verdict(&gates(&[("KB", Fail), ("CMP-01", Pass), ("RES-01", Pass)])), "clean");
    assert_eq!(judge::verdict(&gates(&[("CMP-01", Fail), ("RES-01", Pass), ("ORD-02", Na)])), "violation");
    assert_eq!(judge::verdict(&gates(&[("CMP-01", Fail), ("EXC-01", Fail)])), "broken");
    assert_eq!(judge::verdict(&gates(&[("CMP-01", Error)])), "broken");
    assert_eq!(judge::verdict(&gates(&[("ORD-02", Fail)])), "broken");
    assert_eq!(judge::verdict(&gates(&[("KB", Error), ("CMP-01", Pass)])), "broken", "a crash during KernelBench's runs");
}

fn rec(key: &str, accepted: bool, status: &str, list: &[(&str, Status)]) -> Record {
    let g = gates(list);
    let verdict = (status == "judged").then(|| judge::verdict(&g).to_string());
    Record { key: key.into(), row: 0, level: 1, task: 1, accepted, control: false, load_inline: false, status: status.into(), note: String::new(), gates: g, verdict, device: "cpu".into(), elapsed_s: 0.0, gate_s: Default::default() }
}

#[test]
fn summary_funnel_rates_and_differential() {
    use Status::*;
    let rs = [
        rec("a", true, "judged", &[("KB", Pass), ("CMP-01", Pass), ("RES-01", Pass), ("ORD-02", Na)]),
        rec("b", true, "judged", &[("KB", Pass), ("CMP-01", Fail), ("RES-01", Pass), ("ORD-02", Pass)]),
        rec("c", true, "judged", &[("KB", Pass), ("CMP-01", Pass), ("RES-01", Fail), ("ORD-02", Pass)]),
        rec("d", false, "judged", &[("KB", Fail), ("CMP-01", Pass), ("RES-01", Pass), ("ORD-02", Error)]),
        rec("e", true, "judged", &[("KB", Fail), ("CMP-01", Pass), ("RES-01", Pass), ("ORD-02", Pass)]),
        rec("f", true, "skipped", &[]),
        rec("g", true, "reference-error", &[]),
    ];
    let m: BTreeMap<String, Record> = rs.into_iter().map(|r| (r.key.clone(), r)).collect();
    let s = summarize(20, &m);
    assert_eq!((s.corpus_rows, s.recorded, s.accepted, s.skipped, s.reference_error, s.judged), (20, 7, 6, 1, 1, 5));
    assert_eq!((s.judged_accepted, s.accepted_broken, s.accepted_any_violation), (4, 1, 2));
    let d = &s.differential;
    assert_eq!((d.kb_pass_clean, d.kb_pass_rejected, d.kb_fail_clean, d.kb_fail_rejected), (1, 2, 1, 1));
    assert_eq!(s.disputed, vec!["b".to_string(), "c".to_string()]);
    let o = &s.gates["ORD-02"];
    assert_eq!((o.applicable, o.pass, o.fail, o.error, o.na), (4, 3, 0, 1, 1));
    assert_eq!(o.rate, Some(0.25));
    assert_eq!(s.gates["EXC-01"].rate, None, "no kernel had EXC-01: no rate, not 0");
    assert_eq!(s.verdicts["broken"], 2);
}
