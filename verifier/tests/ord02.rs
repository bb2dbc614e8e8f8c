//! ORD-02 repeats the backward too: a matmul whose forward is deterministic but whose backward
//! adds its reduction blocks in a run-dependent order fails ORD-02 naming the gradient, with the
//! number of distinct bit patterns and the first differing element derived here from the
//! candidate's own arithmetic; its fixed-order twin, and the honest mirror of every operator with
//! a backward, stay clean; a forward-only candidate is checked on its forward and says so.

use kverify::battery::{self, Options, Report, Verdict};
use kverify::candidate::Candidate;
use kverify::error_model::Precision;
use kverify::gates::inputs::{gate_seed, generate, grads, Dist};
use kverify::gates::ord02_determinism::RUNS;
use kverify::gates::Status;
use kverify::redteam::tricks::{blocked_grad_a, GRAD_BLOCK};
use kverify::redteam::{honest_blocked_grad, honest_max, tricks};
use kverify::references::op_by_id;
use std::sync::Arc;
use std::time::Duration;

fn run(c: Arc<dyn Candidate>, gates: &[&str]) -> Report {
    let opts = Options { time_limit: Duration::from_secs(10), dims: None, gates: Some(gates.iter().map(|s| s.to_string()).collect()) };
    battery::run(c, None, &opts).expect("battery runs")
}

fn trick(name: &str) -> Arc<dyn Candidate> {
    let t = tricks().into_iter().find(|t| t.name == name).expect("trick");
    Arc::new((t.build)())
}

fn f32s(t: &kverify::tensor::Tensor) -> Vec<f32> {
    t.as_f32().expect("f32").to_vec()
}

#[test]
fn nondeterministic_grad_fails_ord02_naming_the_gradient() {
    // What the gate must see: ORD-02's inputs and output gradients, and the trick's dA for its
    // backward calls 0..RUNS (a fresh candidate's counter starts at block 0, 1, 2, ... mod nb).
    let op = op_by_id("matmul").expect("op");
    let d = op.native();
    let x = generate(&op, &d, Dist::Normal, gate_seed("ORD-02", 0), Precision::F32.input);
    let g = grads(&op, &d, gate_seed("ORD-02", 100), Precision::F32.input);
    let nb = d.get("N").div_ceil(GRAD_BLOCK);
    assert_eq!(nb, 4);
    let runs: Vec<Vec<u32>> = (0..RUNS)
        .map(|r| blocked_grad_a(&d, &f32s(&g.candidate[0]), &f32s(&x.candidate[1]), r % nb).iter().map(|v| v.to_bits()).collect())
        .collect();
    let mut distinct: Vec<&Vec<u32>> = Vec::new();
    for r in &runs {
        if !distinct.contains(&r) {
            distinct.push(r);
        }
    }
    // The rotations change low bits: every start gives its own pattern, start 0 comes back at run 4.
    assert_eq!(distinct.len(), 4);
    let differing = runs.iter().skip(1).filter(|r| **r != runs[0]).count();
    assert_eq!(differing, 3);
    let r1 = (1..RUNS).find(|&r| runs[r] != runs[0]).expect("a differing run");
    let e = (0..runs[0].len()).find(|&e| runs[r1][e] != runs[0][e]).expect("a differing element");
    let k = d.get("K");

    let rep = run(trick("nondeterministic_grad"), &["ORD-02"]);
    let gate = &rep.gates[0];
    assert_eq!(gate.id, "ORD-02");
    assert_eq!(gate.status, Status::Fail, "{}", gate.detail);
    assert_eq!(rep.verdict, Verdict::Broken);
    let want = format!(
        "grad A: {} distinct bit patterns over {RUNS} runs, first difference at run {r1} element {e} [{}, {}]: 0x{:08x} ({:e}) vs run 0 0x{:08x} ({:e})",
        distinct.len(),
        e / k,
        e % k,
        runs[r1][e],
        f32::from_bits(runs[r1][e]) as f64,
        runs[0][e],
        f32::from_bits(runs[0][e]) as f64
    );
    assert!(gate.detail.contains(&want), "want `{want}` in `{}`", gate.detail);
    // Only dA is nondeterministic: the forward and dB are named nowhere.
    assert!(!gate.detail.contains("grad B:") && !gate.detail.contains("output:"), "{}", gate.detail);
    assert_eq!(gate.measured, Some(differing as f64));
    assert!(gate.detail.starts_with(&format!("{RUNS} forward runs, {RUNS} backward runs;")), "{}", gate.detail);
}

#[test]
fn fixed_order_twin_is_clean_on_ord02_and_cmp02() {
    let rep = run(Arc::new(honest_blocked_grad()), &["CMP-02", "ORD-02"]);
    for g in &rep.gates {
        assert_eq!(g.status, Status::Pass, "{} {}", g.id, g.detail);
    }
    assert_eq!(rep.verdict, Verdict::Clean);
    assert_eq!(rep.gates[1].detail, format!("{RUNS} forward runs, {RUNS} backward runs; all bitwise identical"));
    assert_eq!(rep.gates[1].measured, Some(0.0));
}

#[test]
fn honest_mirror_of_every_operator_with_a_backward_passes_ord02_with_its_backward() {
    let mut with_backward = 0;
    for op in kverify::references::all_ops() {
        let h = kverify::candidate::inprocess::honest(&op, Precision::F32);
        let has = h.bwd.is_some();
        assert_eq!(has, op.backward.is_some(), "{}", op.id);
        let rep = run(Arc::new(h), &["ORD-02"]);
        let g = &rep.gates[0];
        assert_eq!(g.status, Status::Pass, "{}: {}", op.id, g.detail);
        if has {
            with_backward += 1;
            assert!(g.detail.contains(&format!("{RUNS} backward runs")), "{}: {}", op.id, g.detail);
        } else {
            assert!(g.detail.contains("backward not repeated: candidate is forward-only"), "{}: {}", op.id, g.detail);
        }
    }
    // Every class but the index classes has a reference backward (docs/gates.md).
    assert_eq!(with_backward, kverify::references::all_ops().iter().filter(|o| !o.index_output()).count());
}

#[test]
fn forward_only_candidates_keep_the_forward_check_and_say_so() {
    // The honest max without its backward (max has a reference backward; this candidate does
    // not implement it).
    let mut fwd_only = honest_max();
    fwd_only.bwd = None;
    let rep = run(Arc::new(fwd_only), &["ORD-02"]);
    assert_eq!(rep.gates[0].status, Status::Pass, "{}", rep.gates[0].detail);
    assert_eq!(rep.gates[0].detail, format!("{RUNS} forward runs, backward not repeated: candidate is forward-only; all bitwise identical"));
    // The forward trick is still caught, on the forward alone.
    let rep = run(trick("nondeterministic"), &["ORD-02"]);
    let g = &rep.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("backward not repeated: candidate is forward-only"), "{}", g.detail);
    assert!(g.detail.contains(&format!("output: {RUNS} distinct bit patterns over {RUNS} runs, first difference at run 1 element ")), "{}", g.detail);
}
