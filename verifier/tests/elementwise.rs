//! The elementwise operator classes: fp64 values at known points (including the ranges where a
//! naive formula overflows or underflows), NaN propagation, and the two tricks of the bug
//! reports — a clamp that drops NaN (EXC-01) and a logsigmoid that flushes its subnormal exp
//! (EXC-02) — failing with the mismatch counts derived here, beside their clean twins.

use kverify::battery::{self, Options};
use kverify::candidate::inprocess::InProcess;
use kverify::error_model::{element_bound, BoundKind, Precision};
use kverify::gates::exc01_probes::nonfinite_rows;
use kverify::gates::exc02_probes::subnormal_output;
use kverify::gates::inputs::{gate_seed, generate, Dist};
use kverify::gates::{GateResult, Status};
use kverify::redteam::{honest_twins, tricks};
use kverify::references::elementwise::{op, Ew, ALL};
use kverify::references::{all_ops, Dims};
use kverify::tensor::{DType, Tensor};
use std::sync::Arc;
use std::time::Duration;

fn f(ew: Ew, x: f64) -> f64 {
    let d = Dims(vec![("R".into(), 1), ("N".into(), 1)]);
    op(ew).forward(&d, &[Tensor::f64(vec![1, 1], vec![x])]).expect("ref").outputs[0].to_f64_vec()[0]
}

fn gate(c: InProcess, id: &str) -> GateResult {
    let opts = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec![id.into()]) };
    battery::run(Arc::new(c), None, &opts).expect("battery").gates[0].clone()
}

fn trick(name: &str) -> InProcess {
    (tricks().into_iter().find(|t| t.name == name).expect("trick").build)()
}

fn twin(name: &str) -> InProcess {
    honest_twins().into_iter().find(|h| h.name == name).expect("twin")
}

#[test]
fn every_elementwise_class_is_registered() {
    let ids: Vec<&str> = all_ops().iter().map(|o| o.id).collect();
    for e in ALL {
        assert!(ids.contains(&e.id()), "{}", e.id());
    }
    assert_eq!(ALL.len(), 11);
}

#[test]
fn values_at_known_points() {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1e-300);
    assert_eq!(f(Ew::Clamp, 3.0), 1.0);
    assert_eq!(f(Ew::Clamp, -0.25), -0.25);
    assert_eq!(f(Ew::Relu, -2.0), 0.0);
    assert!(close(f(Ew::Exp, 1.0), std::f64::consts::E));
    assert_eq!(f(Ew::Exp2, -3.0), 0.125);
    assert!(f(Ew::Log, -1.0).is_nan() && f(Ew::Log, 0.0) == f64::NEG_INFINITY);
    // Where 1 + e^-x overflows or log(sigmoid) underflows, the stable forms stay exact.
    assert!(close(f(Ew::Sigmoid, -800.0), 0.0) && close(f(Ew::Sigmoid, -90.0), (-90f64).exp() / (1.0 + (-90f64).exp())));
    assert_eq!(f(Ew::LogSigmoid, -1000.0), -1000.0);
    assert!(close(f(Ew::LogSigmoid, 90.0), -(-90f64).exp()));
    assert_eq!(f(Ew::Softplus, 1000.0), 1000.0);
    assert!(close(f(Ew::Softplus, -90.0), (-90f64).exp()));
    assert!((f(Ew::Gelu, 1.0) - 0.8411919906082768).abs() < 1e-15);
    assert!((f(Ew::Silu, 1.0) - 0.7310585786300049).abs() < 1e-15);
    assert!((f(Ew::Tanh, 0.5) - 0.46211715726000974).abs() < 1e-16);
    for e in ALL {
        assert!(f(e, f64::NAN).is_nan(), "{} drops NaN", e.id());
    }
}

#[test]
fn nan_dropping_clamp_fails_exc01_once_per_nan_input() {
    let o = op(Ew::Clamp);
    let d = o.native();
    let nans = |t: &Tensor| t.to_f64_vec().iter().filter(|v| v.is_nan()).count();
    // EXC-01's probes: two scattered seeds, the non-finite rows, three poisoned calls (one per
    // partial shape: R and N each native + 1, native - 1, then both 1). Every NaN input comes
    // out -1: under-propagation; +-inf clamp to +-1 in the reference too.
    let mut want = 0;
    for s in 0..2 {
        want += nans(&generate(&o, &d, Dist::NonFinite, gate_seed("EXC-01", s), DType::F32).reference[0]);
    }
    want += nans(&nonfinite_rows(&o, &d, gate_seed("EXC-01", 2), DType::F32).reference[0]);
    want += 3 * d.get("R") * d.get("N");
    let g = gate(trick("nan_dropping_clamp"), "EXC-01");
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(g.measured, Some(want as f64), "{}", g.detail);
    assert!(g.detail.contains(&format!("{want} under-propagated, 0 over-propagated")), "{}", g.detail);
    let g = gate(twin("honest-clamp"), "EXC-01");
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
}

#[test]
fn ftz_logsigmoid_fails_exc02_on_every_subnormal_output_of_its_probe() {
    let o = op(Ew::LogSigmoid);
    let d = o.native();
    let p = Precision::F32;
    let x = subnormal_output(&o, &d, gate_seed("EXC-02", 2), &p).expect("class probe");
    let r = o.forward(&d, &x.reference).expect("ref");
    let prof = &r.profiles[0];
    let want = r.outputs[0]
        .to_f64_vec()
        .iter()
        .enumerate()
        .filter(|(i, y)| {
            let yr = DType::F32.round(**y);
            y.abs() > element_bound(BoundKind::Deterministic, &p, prof.depth, prof.scale[*i], **y) && yr < 0.0 && yr > -DType::F32.min_normal()
        })
        .count();
    assert_eq!(want, d.get("R") * d.get("N"), "every output of the probe is a negative subnormal");
    let g = gate(trick("ftz_logsigmoid"), "EXC-02");
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(g.measured, Some(want as f64));
    assert!(g.detail.contains("first: subnormal output output 0 element 0: reference -"), "{}", g.detail);
    let g = gate(twin("honest-logsigmoid"), "EXC-02");
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains(&format!("({want} subnormal outputs expected)")), "{}", g.detail);
}
