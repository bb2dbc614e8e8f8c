//! The external-process red team: every NumPy trick is rejected by its gate, the honest NumPy
//! candidates pass every applicable gate, and the protocol reports exits, crashes and hangs as
//! such. Needs python3 with NumPy (scripts/setup.sh installs it into .tools/py; this test adds
//! that folder to PYTHONPATH itself). Skips with a message only when they are truly absent.

mod common;

use common::{python_ready, root};
use kverify::battery::{self, Options, Verdict};
use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::{Candidate, CandidateError};
use kverify::gates::Status;
use kverify::redteam::{honest_twins, tricks};
use std::sync::Arc;
use std::time::Duration;

fn ext(name: &str) -> Arc<dyn Candidate> {
    common::ext(name, Duration::from_secs(3))
}

fn opts(gates: Option<Vec<String>>) -> Options {
    Options { time_limit: Duration::from_secs(3), dims: None, gates }
}

#[test]
fn external_red_team() {
    if !python_ready() {
        return;
    }
    let mut honest: Vec<String> = vec!["honest".into(), "honest-max".into()];
    honest.extend(honest_twins().into_iter().map(|h| h.name));
    for name in &honest {
        let r = battery::run(ext(name), None, &opts(None)).expect("battery");
        for g in &r.gates {
            assert!(matches!(g.status, Status::Pass | Status::NotApplicable), "{name} {} {:?}: {}", g.id, g.status, g.detail);
        }
        assert_eq!(r.verdict, Verdict::Clean, "{name}");
    }
    let mut missed = Vec::new();
    let all: Vec<(&str, &str)> = tricks().iter().map(|t| (t.name, t.gate)).chain(kverify::redteam::external_only_tricks().iter().map(|t| (t.name, t.gate))).collect();
    for (name, gate) in all {
        let r = battery::run(ext(name), None, &opts(Some(vec![gate.into()]))).expect("battery");
        if !matches!(r.gates[0].status, Status::Fail | Status::Error) {
            missed.push(format!("{name} passed {gate}: {}", r.gates[0].detail));
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
}

/// The NumPy `nan_padded_grad_softmax` fails CMP-02 at the all-minimum shape R = N = 1 only; its
/// twin `honest-softmax` (which has a backward) passes CMP-02 with its backward judged.
#[test]
fn external_nan_gradient_at_the_minimum_shape_is_caught_by_cmp02() {
    if !python_ready() {
        return;
    }
    let r = battery::run(ext("nan_padded_grad_softmax"), None, &opts(Some(vec!["CMP-02".into()]))).expect("battery");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("minimum [R=1,N=1] grad x"), "{}", g.detail);
    assert_eq!((g.measured, g.margin), (Some(f64::INFINITY), Some(0.0)));
    let twin = ext("honest-softmax");
    assert!(twin.has_backward());
    let r = battery::run(twin, None, &opts(Some(vec!["CMP-02".into()]))).expect("battery");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert!(r.gates[0].detail.starts_with("native (2 seeds) + 8 other shapes ok"), "{}", r.gates[0].detail);
}

fn inline(name: &str, code: &str) -> ExternalCandidate {
    let dir = std::env::temp_dir().join(format!("kverify-proto-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::write(dir.join("cand.py"), code).expect("write");
    let worker = root().join("python/kverify_worker.py");
    let m = serde_json::json!({
        "name": name, "op": "matmul",
        "precision": {"input": "f32", "accumulator": "f32", "output": "f32"},
        "command": ["python3", worker.display().to_string(), "--module", "cand.py", "--function", "forward"]
    });
    std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
    ExternalCandidate::new(Manifest::load(&dir.join("m.json")).expect("manifest"), Duration::from_secs(2), 1024)
}

fn call(c: &ExternalCandidate) -> Result<(), CandidateError> {
    let op = kverify::references::op_by_id("matmul").expect("op");
    let d = op.native();
    let mut x = kverify::gates::inputs::generate(&op, &d, kverify::gates::inputs::Dist::Normal, 1, kverify::tensor::DType::F32).candidate;
    c.forward(&d, &mut x).map(|_| ())
}

#[test]
fn protocol_reports_exit_crash_hang_refusal_and_memory_limit() {
    if !python_ready() {
        return;
    }
    let e = call(&inline("exit", "import sys\ndef forward(x, d):\n    sys.exit(3)\n")).unwrap_err();
    assert!(matches!(e, CandidateError::Exited { code: 3, .. }), "{e:?}");
    let e = call(&inline("abort", "import os\ndef forward(x, d):\n    os.abort()\n")).unwrap_err();
    assert!(matches!(&e, CandidateError::Crashed(m) if m.contains("SIGABRT")), "{e:?}");
    let c = inline("hang", "import time\ndef forward(x, d):\n    time.sleep(60)\n");
    let t0 = std::time::Instant::now();
    let e = call(&c).unwrap_err();
    assert!(matches!(e, CandidateError::TimedOut { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    let e = call(&inline("refuse", "def forward(x, d):\n    raise NotImplementedError('no odd shapes')\n")).unwrap_err();
    assert_eq!(e, CandidateError::Refused("no odd shapes".into()));
    // 1 GiB address space; allocating 4 GiB fails inside the candidate (a crash with MemoryError).
    let e = call(&inline("hog", "import numpy as np\ndef forward(x, d):\n    return np.ones(1 << 29)\n")).unwrap_err();
    assert!(matches!(&e, CandidateError::Crashed(m) if m.contains("MemoryError")), "{e:?}");
}

/// ORD-02 repeats the backward of an external candidate too, including the run after a restart
/// into a fresh process: the NumPy honest matmul is identical over all 6 backward runs, its twin
/// whose backward adds the reduction blocks in a random order is named by its gradient.
#[test]
fn external_ord02_repeats_the_backward_in_a_fresh_process() {
    if !python_ready() {
        return;
    }
    let runs = kverify::gates::ord02_determinism::RUNS + 1;
    let r = battery::run(ext("honest"), None, &opts(Some(vec!["ORD-02".into()]))).expect("battery");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    let want = format!("{runs} forward runs (incl. one in a fresh process), {runs} backward runs (incl. one in a fresh process); all bitwise identical");
    assert_eq!(g.detail, want);
    let r = battery::run(ext("nondeterministic_grad"), None, &opts(Some(vec!["ORD-02".into()]))).expect("battery");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(r.verdict, Verdict::Broken);
    assert!(g.detail.contains("grad A: ") && g.detail.contains(&format!("distinct bit patterns over {runs} runs, first difference at run ")), "{}", g.detail);
    assert!(!g.detail.contains("grad B:") && !g.detail.contains("output:"), "{}", g.detail);
}
