//! CMP-02 runs the backward at the native shape and at every shape CMP-03 visits plus the
//! all-minimum edge shape: a backward that is wrong only at a degenerate shape is caught there.

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::harness::Harness;
use kverify::candidate::inprocess::{honest, to_f32_vec, BwdFn, InProcess};
use kverify::candidate::{Candidate, CandidateError};
use kverify::error_model::Precision;
use kverify::gates::{cmp02_gradient, cmp03_shapes::shape_set, Ctx, GateResult, Status};
use kverify::references::op_by_id;
use kverify::tensor::Tensor;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cmp02(c: InProcess) -> GateResult {
    let opts = Options { time_limit: Duration::from_secs(2), dims: None, gates: Some(vec!["CMP-02".into()]) };
    let r = battery::run(Arc::new(c), None, &opts).expect("battery");
    assert_eq!(r.gates[0].id, "CMP-02");
    r.gates[0].clone()
}

/// The honest f32 mirror of `op` whose backward overwrites its gradient `which` where `bad(dims)`
/// holds, with `f` applied to every element (modelled on a kernel padding its tiles with NaN).
fn bad_at(op: &str, which: usize, bad: fn(&kverify::references::Dims) -> bool, f: fn(f32) -> f32) -> InProcess {
    let mut h = honest(&op_by_id(op).expect("op"), Precision::F32);
    h.name = format!("{op}-bad-at-edge");
    let inner = h.bwd.clone();
    let bwd: BwdFn = Arc::new(move |d, x, g| {
        let fb = inner.as_ref().ok_or(CandidateError::NoBackward)?;
        let mut out = fb(d, x, g)?;
        if bad(d) {
            let t = &mut out.outputs[which];
            *t = Tensor::f32(t.shape.clone(), to_f32_vec(t).into_iter().map(f).collect());
        }
        Ok(out)
    });
    h.bwd = Some(bwd);
    h
}

/// The red team's `nan_padded_grad_softmax` (a backward whose 1 x 1 path pads its tile with NaN).
fn nan_padded_softmax() -> InProcess {
    let t = kverify::redteam::tricks().into_iter().find(|t| t.name == "nan_padded_grad_softmax").expect("registered trick");
    assert_eq!(t.gate, "CMP-02");
    (t.build)()
}

#[test]
fn shapes_are_native_then_cmp03_then_minimum() {
    let op = op_by_id("softmax").expect("softmax");
    let harness = Harness::new(Arc::new(honest(&op, Precision::F32)), Duration::from_secs(2));
    let ctx = Ctx { op: &op, harness: &harness, precision: Precision::F32, dims: op.native(), meta: None };
    let got: Vec<String> = cmp02_gradient::probes(&ctx).iter().map(|(_, d, _)| d.to_string()).collect();
    let want = [
        "R=64,N=256",
        "R=64,N=256",
        "R=64,N=512",
        "R=64,N=1024",
        "R=1,N=256",
        "R=65,N=257",
        "R=63,N=255",
        "R=65536,N=1",
        "R=1,N=16384",
        "R=1,N=1",
    ];
    assert_eq!(got, want);
    // One implementation: every CMP-03 shape is visited by CMP-02, in CMP-03's order.
    let cmp03: Vec<String> = shape_set(&op, &op.native()).0.iter().map(|(_, d)| d.to_string()).collect();
    assert_eq!(&got[2..2 + cmp03.len()], cmp03.as_slice());
    // Distinct probe indices, hence distinct seeds.
    let idx: Vec<u64> = cmp02_gradient::probes(&ctx).iter().map(|p| p.2).collect();
    assert_eq!(idx, (0..10).collect::<Vec<u64>>());
}

#[test]
fn nan_only_at_minimum_shape_fails_naming_shape_and_gradient() {
    let g = cmp02(nan_padded_softmax());
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("minimum [R=1,N=1] grad x"), "{}", g.detail);
    assert_eq!(g.measured, Some(f64::INFINITY));
    assert_eq!(g.margin, Some(0.0));
    // Everywhere else its gradient is right: at every other CMP-02 shape within the bound.
    let op = op_by_id("softmax").expect("softmax");
    let c = nan_padded_softmax();
    let harness = Harness::new(Arc::new(c.clone()), Duration::from_secs(2));
    let ctx = Ctx { op: &op, harness: &harness, precision: Precision::F32, dims: op.native(), meta: None };
    let others: Vec<_> = cmp02_gradient::probes(&ctx).into_iter().filter(|(l, _, _)| !l.starts_with("minimum")).collect();
    assert_eq!(others.len(), 9);
    for (label, d, s) in others {
        let (x, g) = cmp02_gradient::probe_inputs(&op, &d, s, Precision::F32.input);
        let r = op.backward(&d, &x.reference, &g.reference).expect("reference");
        let mut xc = x.candidate;
        let out = c.backward(&d, &mut xc, &g.candidate).expect("backward");
        let v = kverify::gates::compare::compare(&r, &out.outputs, &Precision::F32, kverify::error_model::BoundKind::Deterministic);
        assert!(v.passed(), "{label}: {v:?}");
    }
    // The rest of the battery's verdict is not clean either.
    let opts = Options { time_limit: Duration::from_secs(2), dims: None, gates: Some(vec!["CMP-02".into()]) };
    assert_ne!(battery::run(Arc::new(nan_padded_softmax()), None, &opts).expect("battery").verdict, Verdict::Clean);
}

#[test]
fn wrong_value_only_at_a_reduction_of_one_fails_naming_shape() {
    // sum backward broadcasting dy: doubled only when N = 1 (envelope max R=65536 and minimum).
    let g = cmp02(bad_at("sum", 0, |d| d.get("N") == 1, |v| 2.0 * v));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("N=1] grad x"), "{}", g.detail);
    let (m, b) = (g.measured.expect("measured"), g.bound.expect("bound"));
    assert!(m.is_finite() && m > b && b > 0.0, "{m} vs {b}");
}

#[test]
fn honest_twins_pass_at_every_shape() {
    for op in ["softmax", "sum", "matmul"] {
        let o = op_by_id(op).expect("op");
        let t = Instant::now();
        let g = cmp02(honest(&o, Precision::F32));
        eprintln!("CMP-02 honest {op}: {:?}", t.elapsed());
        assert_eq!(g.status, Status::Pass, "{op}: {}", g.detail);
        assert!(g.detail.contains("other shapes ok"), "{op}: {}", g.detail);
        if op == "softmax" {
            // The 10 probes of `shapes_are_native_then_cmp03_then_minimum`: 2 native, 8 others.
            assert!(g.detail.starts_with("native (2 seeds) + 8 other shapes ok"), "{}", g.detail);
        }
        let m = g.margin.expect("margin");
        assert!(m > 1.0, "{op}: margin {m}");
    }
}
