//! Every trick is rejected by the gate meant for it; the honest candidates pass every applicable
//! gate (in-process red team).

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::Candidate;
use kverify::gates::Status;
use kverify::redteam::{honest_matmul, honest_max, tricks};
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

#[test]
fn honest_candidates_pass_every_applicable_gate() {
    for cand in [honest_matmul(), honest_max()] {
        let name = cand.name.clone();
        let r = battery::run(Arc::new(cand), None, &opts(None)).expect("battery runs");
        for g in &r.gates {
            assert!(matches!(g.status, Status::Pass | Status::NotApplicable), "{name} {} {:?}: {}", g.id, g.status, g.detail);
        }
        assert_eq!(r.verdict, Verdict::Clean);
        // Only RES-02 (no metadata) and, for max, CMP-02 (no backward) may be n/a.
        let na: Vec<_> = r.gates.iter().filter(|g| g.status == Status::NotApplicable).map(|g| g.id).collect();
        assert!(na.iter().all(|id| *id == "RES-02" || *id == "CMP-02"), "{name}: {na:?}");
    }
}
