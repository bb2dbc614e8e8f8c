//! CMP-01's cancellation probe (a large common offset, a small spread) for the normalisations
//! and row reductions: a layer norm computing the variance as E[x^2] - E[x]^2 passes the
//! ordinary seeds and fails there; the honest mirror of every such class passes.

use kverify::battery::{self, Options};
use kverify::candidate::inprocess::{honest, to_f32_vec, InProcess};
use kverify::error_model::{BoundKind, Precision};
use kverify::gates::cmp01_value::{cancellation, CANCELLATION_CLASSES, OFFSET, SEEDS, SPREAD};
use kverify::gates::compare::compare;
use kverify::gates::inputs::{gate_seed, generate, Dist};
use kverify::gates::{GateResult, Status};
use kverify::redteam::{honest_twins, tricks};
use kverify::references::{all_ops, op_by_id};
use kverify::tensor::DType;
use std::sync::Arc;
use std::time::Duration;

fn cmp01(c: InProcess) -> GateResult {
    let opts = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["CMP-01".into()]) };
    battery::run(Arc::new(c), None, &opts).expect("battery").gates[0].clone()
}

fn naive() -> InProcess {
    let t = tricks().into_iter().find(|t| t.name == "naive_variance_layer_norm").expect("trick");
    assert_eq!(t.gate, "CMP-01");
    (t.build)()
}

#[test]
fn the_probe_is_offset_plus_small_spread_for_exactly_the_listed_classes() {
    for op in all_ops() {
        let x = cancellation(&op, &op.native(), 7, DType::F32);
        assert_eq!(x.is_some(), CANCELLATION_CLASSES.contains(&op.id), "{}", op.id);
        if let Some(x) = x {
            let v = x.reference[0].to_f64_vec();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let sd = (v.iter().map(|e| (e - mean) * (e - mean)).sum::<f64>() / v.len() as f64).sqrt();
            assert!((mean - OFFSET).abs() < 1e-3 && sd > 0.5 * SPREAD && sd < 2.0 * SPREAD, "{}: {mean} {sd}", op.id);
            assert_eq!(x.reference[0].to_f64_vec(), x.candidate[0].to_f64_vec());
        }
    }
}

#[test]
fn naive_variance_passes_ordinary_seeds_and_fails_the_cancellation_probe() {
    let op = op_by_id("layer_norm").expect("op");
    let d = op.native();
    let t = naive();
    for s in 0..SEEDS {
        let x = generate(&op, &d, Dist::Normal, gate_seed("CMP-01", s), DType::F32);
        let r = op.forward(&d, &x.reference).expect("ref");
        let mut c = x.candidate.clone();
        let out = (t.fwd)(&d, &mut c).expect("runs").outputs;
        assert!(compare(&r, &out, &Precision::F32, BoundKind::Deterministic).passed(), "seed#{s}");
    }
    // On the probe the one-pass variance of some rows is negative in f32 (its rounding error,
    // ~ OFFSET^2 u sqrt(N) ~ 0.01, dwarfs SPREAD^2 = 1e-6): sqrt of a negative is NaN.
    let x = cancellation(&op, &d, gate_seed("CMP-01", SEEDS), DType::F32).expect("probe");
    let v = to_f32_vec(&x.candidate[0]);
    let n = d.get("N");
    let negative = v
        .chunks(n)
        .filter(|row| {
            let (s, q) = row.iter().fold((0f32, 0f32), |(s, q), &y| (s + y, q + y * y));
            let mu = s / n as f32;
            q / n as f32 - mu * mu + 1e-5 < 0.0
        })
        .count();
    assert!(negative > 0, "no row with a negative variance");
    let g = cmp01(naive());
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.starts_with(&format!("wrong at cancellation (offset {OFFSET}, spread {SPREAD:e}) ")), "{}", g.detail);
    assert_eq!(g.measured, Some(f64::INFINITY));
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-layer-norm").expect("twin");
    assert_eq!(cmp01(twin).status, Status::Pass);
}

#[test]
fn honest_mirror_of_every_listed_class_passes_the_probe() {
    for id in CANCELLATION_CLASSES {
        let op = op_by_id(id).expect("op");
        for p in [Precision::F32, Precision::BF16_F32ACC] {
            let g = cmp01(honest(&op, p));
            assert_eq!(g.status, Status::Pass, "{id} {p:?}: {}", g.detail);
        }
    }
}
