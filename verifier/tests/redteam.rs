//! Every trick is rejected by the gate meant for it; the honest candidates pass every applicable
//! gate (in-process red team).

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::Candidate;
use kverify::gates::Status;
use kverify::redteam::{honest_matmul, honest_max, honest_twins, tricks};
use std::sync::Arc;
use std::time::Duration;

fn opts(gates: Option<Vec<String>>) -> Options {
    Options { time_limit: Duration::from_secs(2), dims: None, gates }
}

#[test]
fn at_least_nineteen_tricks() {
    assert!(tricks().len() >= 19);
}

#[test]
fn every_trick_is_rejected_by_its_gate() {
    let mut missed = Vec::new();
    for t in tricks() {
        let cand: Arc<dyn Candidate> = Arc::new((t.build)());
        let r = battery::run(cand, None, &opts(Some(vec![t.gate.to_string()]))).expect("battery runs");
        let g = &r.gates[0];
        assert_eq!(g.id, t.gate);
        if !matches!(g.status, Status::Fail | Status::Error) {
            missed.push(format!("{} passed {} ({:?}): {}", t.name, t.gate, g.status, g.detail));
        }
        assert_ne!(r.verdict, Verdict::Clean, "{}", t.name);
    }
    assert!(missed.is_empty(), "missed: {missed:#?}");
}

/// The NaN gradient at a degenerate shape (issue 12): `nan_padded_grad_softmax` fails CMP-02 at
/// the all-minimum shape R = N = 1 (an infinite error, margin 0), and its twin `honest-softmax`
/// passes CMP-02 at the same shapes with its backward judged (not n/a).
#[test]
fn nan_gradient_at_the_minimum_shape_is_caught_by_cmp02_and_its_twin_is_clean() {
    let t = tricks().into_iter().find(|t| t.name == "nan_padded_grad_softmax").expect("trick");
    assert_eq!((t.gate, t.op), ("CMP-02", "softmax"));
    let r = battery::run(Arc::new((t.build)()), None, &opts(Some(vec!["CMP-02".into()]))).expect("battery runs");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("minimum [R=1,N=1] grad x"), "{}", g.detail);
    assert_eq!((g.measured, g.margin), (Some(f64::INFINITY), Some(0.0)));
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-softmax").expect("twin");
    assert!(twin.has_backward());
    let r = battery::run(Arc::new(twin), None, &opts(Some(vec!["CMP-02".into()]))).expect("battery runs");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert!(r.gates[0].detail.contains("other shapes ok"), "{}", r.gates[0].detail);
}

#[test]
fn honest_candidates_pass_every_applicable_gate() {
    let mut all = vec![honest_matmul(), honest_max()];
    all.extend(honest_twins());
    assert_eq!(all.len(), 11);
    for cand in all {
        let name = cand.name.clone();
        let forward_only = !cand.has_backward();
        let r = battery::run(Arc::new(cand), None, &opts(None)).expect("battery runs");
        for g in &r.gates {
            assert!(matches!(g.status, Status::Pass | Status::NotApplicable), "{name} {} {:?}: {}", g.id, g.status, g.detail);
        }
        assert_eq!(r.verdict, Verdict::Clean);
        // Only RES-02 (no metadata), for a forward-only candidate CMP-02 (every operator class
        // has a reference backward now), and for a class without a reduction PRC-02 may be n/a.
        let na: Vec<_> = r.gates.iter().filter(|g| g.status == Status::NotApplicable).map(|g| g.id).collect();
        let mut want: Vec<&str> = if forward_only { vec!["CMP-02", "RES-02"] } else { vec!["RES-02"] };
        if matches!(r.op.as_str(), "clamp" | "logsigmoid" | "exp" | "argmax") {
            want.insert(want.len() - 1, "PRC-02");
        }
        assert_eq!(na, want, "{name}");
    }
}
