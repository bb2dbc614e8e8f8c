//! The probe gates' decision rules (CMP-03, ORD-01, ORD-03, EXC-02, PRC-01, PRC-02) from facts
//! alone (no worker, no PyTorch): derived bounds, applicability, and the verdict they feed.

use kverify::audit::judge::{self, GateResult, Status, U32};
use kverify::audit::judge_probes::{exc02, value_gate, PRC02_MIN_REF};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn prep(probes: Value) -> Value {
    json!({ "probes": probes })
}

fn p(name: &str, honest: [f64; 2]) -> Value {
    json!({"name": name, "honest": honest, "own_nonfinite": 0, "finite": 100, "ref_max": 5000.0})
}

fn r(name: &str, err: f64) -> Value {
    json!({"name": name, "err": err, "nonfinite_where_ref_finite": 0, "shape_ok": true})
}

#[test]
fn value_gate_bound_is_sixteen_times_the_honest_error_per_probe() {
    let pr = prep(json!([p("a", [1e-6, 3e-6]), p("b", [2e-6, 0.0])]));
    // a: bound 4.8e-5; b: 3.2e-5. The report is the probe with the smallest margin.
    let g = value_gate("ORD-03", &pr, &prep(json!([r("a", 4.7e-5), r("b", 3.1e-5)])));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert_eq!((g.measured, g.bound), (Some(4.7e-5), Some(16.0 * 3e-6)));
    assert_eq!(g.detail, "2 of 2 probes; worst normalised error 4.700e-5 within 4.800e-5");
    let g = value_gate("ORD-03", &pr, &prep(json!([r("a", 1e-6), r("b", 3.3e-5)])));
    assert_eq!((g.status, g.measured, g.bound), (Status::Fail, Some(3.3e-5), Some(3.2e-5)));
    assert!(g.detail.starts_with("wrong at b: normalised error 3.300e-5 > bound 3.200e-5"), "{}", g.detail);
    // ORD-01 reports its statistic; an exact honest run is floored at u32.
    let exact = prep(json!([p("seed0", [0.0, 0.0])]));
    let g = value_gate("ORD-01", &exact, &prep(json!([r("seed0", 15.0 * U32)])));
    assert_eq!((g.status, g.bound), (Status::Pass, Some(16.0 * U32)));
    assert!(g.detail.contains("rms normalised error"), "{}", g.detail);
    assert_eq!(value_gate("ORD-01", &exact, &prep(json!([r("seed0", 17.0 * U32)]))).status, Status::Fail);
    // A NaN where the reference is finite, or another shape, fails whatever the error.
    let nan = json!([{"name": "seed0", "err": 0.0, "nonfinite_where_ref_finite": 3, "shape_ok": true}]);
    assert!(value_gate("ORD-03", &exact, &prep(nan)).detail.contains("3 non-finite values"));
    let shape = json!([{"name": "seed0", "err": 0.0, "nonfinite_where_ref_finite": 0, "shape_ok": false}]);
    assert_eq!(value_gate("ORD-03", &exact, &prep(shape)).status, Status::Fail);
}

#[test]
fn value_gate_applicability_is_per_probe_and_never_a_pass() {
    let mut own_inf = p("wide0", [1e-7, 1e-7]);
    own_inf["own_nonfinite"] = json!(4);
    let refuses = json!({"name": "wide1", "ref_error": "ValueError: domain"});
    // One probe n/a, one applicable: judged on the applicable one, the reason kept.
    let pr = prep(json!([own_inf.clone(), p("wide2", [1e-7, 1e-7])]));
    let g = value_gate("ORD-03", &pr, &prep(json!([r("wide2", 1e-7)])));
    assert_eq!(g.status, Status::Pass);
    assert!(g.detail.contains("1 of 2 probes") && g.detail.contains("wide0: the task's own fp32 Model is non-finite"), "{}", g.detail);
    // Nothing applicable: n/a, with every reason; the candidate's facts are not even read.
    let g = value_gate("ORD-03", &prep(json!([own_inf, refuses])), &json!({}));
    assert_eq!(g.status, Status::Na);
    assert!(g.detail.contains("wide1: the task's own Model cannot run here: ValueError: domain"), "{}", g.detail);
    // PRC-02 needs an output of at least 2^11 at U[1,2) inputs.
    let mut short = p("pos", [1e-7, 1e-7]);
    short["ref_max"] = json!(PRC02_MIN_REF - 1.0);
    assert_eq!(value_gate("PRC-02", &prep(json!([short.clone()])), &prep(json!([r("pos", 1.0)]))).status, Status::Na);
    assert_eq!(value_gate("PRC-01", &prep(json!([short])), &prep(json!([r("pos", 1.0)]))).status, Status::Fail, "PRC-01 has no such rule");
    // CMP-03 without size constants.
    let g = value_gate("CMP-03", &json!({"constants": {}, "probes": []}), &json!({"probes": []}));
    assert_eq!(g.status, Status::Na);
    assert!(g.detail.contains("no module-level size constant"), "{}", g.detail);
    // CMP-03 of a task with literal sizes: the worker's "sizes" probe carries its reason (`na`)
    // and the layout probes are judged; with no layout to give either, the gate is n/a.
    let sizes = json!({"name": "sizes", "na": "no module-level size constant shapes the inputs (sizes are literals): nothing to change consistently"});
    let pr = json!({"constants": {}, "probes": [sizes.clone(), p("transposed views", [1e-7, 1e-7])]});
    let g = value_gate("CMP-03", &pr, &prep(json!([r("transposed views", 1e-7)])));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.starts_with("1 of 2 probes") && g.detail.contains("n/a: sizes: no module-level size constant"), "{}", g.detail);
    let g = value_gate("CMP-03", &pr, &prep(json!([{"name": "transposed views", "raised": "RuntimeError: view size is not compatible"}])));
    assert!(g.status == Status::Fail && g.detail.starts_with("rejected at transposed views: RuntimeError"), "{}", g.detail);
    let none = json!({"name": "offset views", "na": "no floating input of more than one element can be given as offset views"});
    let g = value_gate("CMP-03", &json!({"constants": {}, "probes": [sizes, none]}), &json!({"probes": []}));
    assert_eq!(g.status, Status::Na);
    assert!(g.detail.contains("offset views: no floating input"), "{}", g.detail);
    // Facts missing a probe the decision needs: n/a naming them, no panic.
    assert_eq!(value_gate("ORD-03", &prep(json!([p("a", [1e-7, 1e-7])])), &prep(json!([]))).status, Status::Na);
    assert_eq!(value_gate("ORD-03", &json!({}), &json!({})).status, Status::Na);
}

#[test]
fn cmp03_names_the_sizes_and_a_refusal_is_rejected() {
    let mut x2 = p("x2", [1e-6, 1e-6]);
    x2["sizes"] = json!({"K": 512, "M": 64});
    let mut odd = p("odd", [1e-6, 1e-6]);
    odd["sizes"] = json!({"K": 257, "M": 33});
    let pr = json!({"constants": {"K": 256, "M": 32}, "probes": [x2, odd]});
    let raised = json!({"probes": [r("x2", 1e-6), {"name": "odd", "raised": "RuntimeError: shape '[32, 256]' is invalid"}]});
    let g = value_gate("CMP-03", &pr, &raised);
    assert_eq!(g.status, Status::Fail);
    assert_eq!(g.detail, "rejected at odd [K=257,M=33]: RuntimeError: shape '[32, 256]' is invalid");
    let wrong = json!({"probes": [r("x2", 1e-6), r("odd", 0.5)]});
    assert!(value_gate("CMP-03", &pr, &wrong).detail.starts_with("wrong at odd [K=257,M=33]: normalised error 5.000e-1"));
    let mut bad_x2 = pr.clone();
    bad_x2["probes"][0] = json!({"name": "x2", "sizes": {"K": 512}, "ref_error": "OutOfMemoryError"});
    let g = value_gate("CMP-03", &bad_x2, &json!({"probes": [r("odd", 1e-6)]}));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains("n/a: x2 [K=512]: the task's own Model cannot run here: OutOfMemoryError"), "{}", g.detail);
}

#[test]
fn prc01_names_the_widest_reduced_precision_that_fits() {
    let pr = prep(json!([p("pos", [1e-7, 1e-7])]));
    let run = |fits: Value| json!({"probes": [{"name": "pos", "err": 2e-4, "nonfinite_where_ref_finite": 0, "shape_ok": true, "fits": fits}]});
    let g = value_gate("PRC-01", &pr, &run(json!([["11-bit significand (fp16/tf32 inputs)", 1e-7], ["bf16 inputs", 1e-3]])));
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("matches 11-bit significand (fp16/tf32 inputs)"), "{}", g.detail);
    let g = value_gate("PRC-01", &pr, &run(json!([["11-bit significand (fp16/tf32 inputs)", 1e-4], ["bf16 inputs", 1e-6]])));
    assert!(g.detail.contains("matches bf16 inputs"), "{}", g.detail);
    let g = value_gate("PRC-01", &pr, &run(json!([["bf16 inputs", 1e-2]])));
    assert!(g.detail.ends_with("matches no reduced-precision model"), "{}", g.detail);
}

#[test]
fn exc02_compares_sign_classes_where_the_honest_runs_keep_them() {
    let pr = prep(json!([{"name": "subnormal", "compared": 0, "ref_subnormal": 0, "total": 8}, {"name": "tiny", "compared": 6, "ref_subnormal": 5, "total": 8}]));
    let ok = prep(json!([{"name": "subnormal", "shape_ok": true, "mismatches": 7}, {"name": "tiny", "shape_ok": true, "mismatches": 0, "flushed": 0}]));
    let g = exc02(&pr, &ok);
    assert_eq!(g.status, Status::Pass, "mismatches outside the compared positions are not counted: {}", g.detail);
    assert!(g.detail.starts_with("sign classes equal at 6 compared elements (5 subnormal"), "{}", g.detail);
    let flushed = prep(json!([{"name": "tiny", "shape_ok": true, "mismatches": 5, "flushed": 5}]));
    let g = exc02(&pr, &flushed);
    assert_eq!((g.status, g.measured), (Status::Fail, Some(5.0)));
    assert_eq!(g.detail, "tiny inputs: 5 of 6 compared elements in another sign class than the reference (5 non-zero flushed to 0)");
    let none = prep(json!([{"name": "subnormal", "ref_error": "no floating-point input"}]));
    assert_eq!(exc02(&none, &json!({})).status, Status::Na);
    let sized = prep(json!([{"name": "tiny", "shape_ok": false}]));
    assert_eq!(exc02(&pr, &sized).status, Status::Fail);
}

#[test]
fn exc02_is_tolerance_free_and_the_value_probes_are_thresholded() {
    let v = |id: &str| {
        let m: BTreeMap<String, GateResult> = [(id.to_string(), GateResult::new(Status::Fail, ""))].into_iter().collect();
        judge::verdict(&m)
    };
    assert_eq!(v("EXC-02"), "broken");
    for g in ["CMP-03", "ORD-01", "ORD-03", "PRC-01", "PRC-02"] {
        assert_eq!(v(g), "violation", "{g}");
    }
    assert_eq!(judge::GATES.len(), 11);
    assert_eq!(judge::GATES.last(), Some(&"CMP-03"), "CMP-03 runs last");
}
