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
