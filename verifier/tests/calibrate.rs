//! `kverify calibrate`: every band gate's threshold sits between the honest noise floor and the
//! onset of real error, the bisected trip point agrees with the analytic one, and the plot is drawn.

use kverify::battery::Options;
use kverify::calibrate::{calibrate, plot};

#[test]
fn thresholds_sit_between_noise_and_real_error() {
    let rows = calibrate(&Options::default());
    assert_eq!(rows.len(), 6);
    for r in &rows {
        assert!(r.lower_margin > 1.0, "{}: lower margin {}", r.gate, r.lower_margin);
        assert!(r.upper_margin > 1.0, "{}: upper margin {} ({})", r.gate, r.upper_margin, r.onset_by);
        // Bisection (which also rounds the perturbed output to f32) within 2x of the analytic value.
        assert!(r.threshold <= r.analytic_threshold * 1.01 && r.threshold > r.analytic_threshold / 2.0, "{}", r.gate);
    }
    let path = std::env::temp_dir().join(format!("kverify-cal-{}.svg", std::process::id()));
    plot(&rows, &path).expect("plot");
    let svg = std::fs::read_to_string(&path).expect("svg");
    assert!(svg.contains("<svg") && svg.contains("CMP-01"));
}

/// The second table: every class with CMP-01's cancellation probe has a row in which honest f32
/// arithmetic stays inside the bound; on layer_norm the one-pass variance is the onset and lies
/// above the threshold (non-finite rows, and on its finite rows still above); CMP-03's sizes
/// past every power of two and past the envelope form one row, between noise and real error.
#[test]
fn new_probes_sit_between_noise_and_real_error() {
    use kverify::calibrate_probes::calibrate_probes;
    use kverify::gates::cmp01_value::CANCELLATION_CLASSES;
    use kverify::gates::cmp03_probes::{size_set, PAST_ENVELOPE_BYTES};
    let rows = calibrate_probes();
    for id in CANCELLATION_CLASSES {
        let r = rows.iter().find(|r| r.gate == "CMP-01" && r.op == id).unwrap_or_else(|| panic!("no cancellation row for {id}"));
        assert!(r.probe.starts_with("cancellation"), "{r:?}");
        assert!(r.lower_margin > 1.0, "{r:?}");
    }
    let ln = rows.iter().find(|r| r.op == "layer_norm").expect("layer_norm row");
    assert_eq!(ln.onset_by, "naive_variance_layer_norm");
    assert!(ln.onset_finite > ln.threshold && ln.onset_finite.is_finite(), "{ln:?}");
    let mm = rows.iter().find(|r| r.gate == "CMP-03").expect("CMP-03 row");
    let op = kverify::references::linear::matmul();
    let n = size_set(&op, &op.native(), PAST_ENVELOPE_BYTES).0.len();
    assert!(n > 10 && mm.probe.starts_with(&format!("{n} sizes")), "{mm:?}");
    assert!(mm.lower_margin > 1.0 && mm.upper_margin > 1.0 && mm.noise > 0.0, "{mm:?}");
}

/// The second table's CMP-02 rows (the backward at every CMP-03 shape and the all-minimum one):
/// one per class with a CMP-02 trick, over exactly the shapes the gate visits besides the native
/// one, the honest mirror inside the bound at every element, the class's trick the onset. For
/// matmul the onset is derived: at a shape with M = 1 (CMP-03's `envelope max K`), dB = Aᵀ dC has
/// depth 1 and scale |A|ᵀ|dC| = |dB|, so `wrong_grad`'s 0.5 dB is off by eps = 0.5 exactly (up to
/// the f32 rounding of dB); the softmax trick's NaN at R = N = 1 is an infinite onset.
#[test]
fn cmp02_shape_rows_sit_between_noise_and_real_error() {
    use kverify::calibrate_probes::{calibrate_probes, CMP02_CLASSES};
    use kverify::candidate::harness::Harness;
    use kverify::candidate::inprocess::honest;
    use kverify::error_model::Precision;
    use kverify::gates::{cmp02_gradient, Ctx};
    use kverify::references::op_by_id;
    use std::sync::Arc;
    let rows = calibrate_probes();
    let want_bug = |id: &str| match id {
        "matmul" => "wrong_grad".to_string(),
        "softmax" => "nan_padded_grad_softmax".to_string(),
        _ => format!("zero_grad_{id}"),
    };
    for id in CMP02_CLASSES {
        let r = rows.iter().find(|r| r.gate == "CMP-02" && r.op == id).unwrap_or_else(|| panic!("no CMP-02 row for {id}"));
        let op = op_by_id(id).expect("op");
        let h = Harness::new(Arc::new(honest(&op, Precision::F32)), std::time::Duration::from_secs(2));
        let ctx = Ctx { op: &op, harness: &h, precision: Precision::F32, dims: op.native(), meta: None };
        let n = cmp02_gradient::probes(&ctx).len() - 2;
        assert_eq!(r.probe, format!("{n} CMP-03 and minimum shapes (backward)"), "{r:?}");
        assert_eq!(r.onset_by, want_bug(id), "{r:?}");
        assert!(r.noise > 0.0 && r.lower_margin > 1.0 && r.upper_margin > 1.0, "{r:?}");
        assert!(r.threshold.is_finite() && r.threshold > 0.0, "{r:?}");
    }
    let mm = rows.iter().find(|r| r.gate == "CMP-02" && r.op == "matmul").expect("matmul row");
    assert!((mm.onset - 0.5).abs() < 1e-6, "{mm:?}");
    let sm = rows.iter().find(|r| r.gate == "CMP-02" && r.op == "softmax").expect("softmax row");
    assert!(sm.onset.is_infinite() && sm.upper_margin.is_infinite(), "{sm:?}");
}
