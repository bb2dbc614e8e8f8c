//! `kverify calibrate`: where each band gate's threshold sits between honest noise and real error.
//!
//! For every thresholded forward gate, on the honest f32 matmul:
//! * errors are measured as an *effective unit roundoff*, eps = |cand_i - ref_i| / (depth scale_i),
//!   so probes of different reduction lengths are comparable (the deterministic bound is about
//!   eps = u_acc in these units);
//! * the honest noise floor is the largest eps of the honest candidate on the gate's own probes;
//! * the threshold is the trip point: the honest output is perturbed by
//!   eps * sign_i * depth * scale_i (fixed pseudo-random signs) and the *real gate* is run at
//!   growing eps; bisection in log space finds where pass turns to fail;
//! * the onset of real error is the smallest eps that a real bug of the red team produces on the
//!   same probes (TF32, bf16 compute, fp16 accumulation, the 1 + 1e-2 scale error, saturation),
//!   counting only bugs that change the answer on those probes (saturation is exact on small
//!   inputs, so it is not an error there).
//!
//! Lower margin = min over elements of bound / |honest error| (how far honest arithmetic is
//! from failing, element by element so probes of different depth are never mixed); upper
//! margin = onset / threshold (how far the cheapest in-scope real bug is above the threshold).
//! The bisected threshold includes the f32 rounding of the perturbed output; the analytic one
//! (min over elements of (bound - sign * honest error) / (depth scale)) does not, which is why it
//! sits slightly higher on the shallow probes of CMP-03 and PRC-01.

use crate::battery::Options;
use crate::candidate::harness::Harness;
use crate::candidate::inprocess::{to_f32_vec, FwdFn, InProcess};
use crate::candidate::{Candidate, CandidateOutput};
use crate::gates::cmp03_shapes::shape_set;
use crate::gates::inputs::{gate_seed, generate, Dist, Inputs};
use crate::gates::{prc01_precision, prc02_accumulation, run_gate, Ctx, Status};
use crate::redteam::{honest_matmul, tricks};
use crate::references::linear::matmul;
use crate::references::{Dims, Op, RefOutput};
use crate::error_model::{element_bound, BoundKind};
use crate::tensor::Tensor;
use serde::Serialize;
use std::sync::Arc;

/// Gates calibrated.
pub const BAND_GATES: [&str; 6] = ["CMP-01", "CMP-03", "ORD-01", "ORD-03", "PRC-01", "PRC-02"];
/// Red-team tricks whose error level marks the onset of real error.
pub const REAL_BUGS: [&str; 5] = ["tf32", "bf16_compute", "fp16_accum", "near_miss_scale", "saturating"];

/// The real bugs each gate is meant to separate from honest arithmetic (its onset set).
pub fn bugs_in_scope(gate: &str) -> &'static [&'static str] {
    match gate {
        "PRC-01" => &["tf32", "bf16_compute"],
        "PRC-02" => &["fp16_accum"],
        // The matmul's precision bugs have no backward: CMP-02's onset is its own tricks.
        "CMP-02" => &[],
        "ORD-03" => &["tf32", "bf16_compute", "fp16_accum", "near_miss_scale", "saturating"],
        _ => &["tf32", "bf16_compute", "fp16_accum", "near_miss_scale"],
    }
}

/// The bound kind a gate uses.
pub fn bound_kind(gate: &str) -> BoundKind {
    match gate {
        "ORD-01" => BoundKind::Reordering,
        "ORD-03" => BoundKind::Backstop,
        _ => BoundKind::Deterministic,
    }
}

/// Per probe: the honest noise (max eps), the analytic trip point of the perturbation,
/// min_i (bound_i - sign_i d_i) / (depth scale_i) with d = honest - reference, and the honest
/// margin min_i bound_i / |d_i|. The gate's threshold is the minimum trip point over its probes;
/// the lower margin is the minimum honest margin (element by element, so probes of different
/// depth are never mixed).
pub fn per_probe(op: &Op, cand: &dyn Candidate, probes: &[(Dims, Dist, u64)], kind: BoundKind) -> Vec<(f64, f64, f64)> {
    let p32 = cand.precision();
    probes.iter().filter_map(|(d, dist, seed)| probe_stats(op, cand, d, generate(op, d, *dist, *seed, p32.input), kind, &Call::Forward)).collect()
}

/// Which call a calibration probe makes: the forward, or the backward with these output
/// gradients (CMP-02's probes; `Inputs` as [`crate::gates::inputs::grads`] makes them).
#[derive(Debug, Clone)]
pub enum Call {
    /// The forward pass.
    Forward,
    /// The backward pass with these output gradients.
    Backward(Inputs),
}

/// The reference answer and the candidate's on one probe: `Err(true)` when the reference
/// refuses the probe, `Err(false)` when the candidate fails it.
fn answers(op: &Op, cand: &dyn Candidate, d: &Dims, x: Inputs, call: &Call) -> Result<(RefOutput, Vec<Tensor>), bool> {
    let mut c = x.candidate;
    let r = match call {
        Call::Forward => op.forward(d, &x.reference),
        Call::Backward(g) => op.backward(d, &x.reference, &g.reference),
    };
    let r = r.map_err(|_| true)?;
    let out = match call {
        Call::Forward => cand.forward(d, &mut c),
        Call::Backward(g) => cand.backward(d, &mut c, &g.candidate),
    };
    let CandidateOutput { outputs, .. } = out.map_err(|_| false)?;
    Ok((r, outputs))
}

/// [`per_probe`]'s (noise, trip point, honest margin) on one probe with given inputs, on the
/// outputs of `call` (for a backward, every input gradient); None when the reference or the
/// candidate refuses the probe.
pub fn probe_stats(op: &Op, cand: &dyn Candidate, d: &Dims, x: Inputs, kind: BoundKind, call: &Call) -> Option<(f64, f64, f64)> {
    let p32 = cand.precision();
    let (r, outputs) = answers(op, cand, d, x, call).ok()?;
    let (mut noise, mut trip, mut margin) = (0.0f64, f64::INFINITY, f64::INFINITY);
    for ((rt, p), ct) in r.outputs.iter().zip(&r.profiles).zip(&outputs) {
        for (i, (y, c)) in rt.to_f64_vec().iter().zip(to_f32_vec(ct)).enumerate() {
            let unit = p.depth.max(1) as f64 * p.scale[i];
            if !y.is_finite() || unit == 0.0 {
                continue;
            }
            let dd = c as f64 - y;
            noise = noise.max(dd.abs() / unit);
            let b = element_bound(kind, &p32, p.depth, p.scale[i], *y);
            trip = trip.min((b - sign_of(i) * dd) / unit);
            if dd != 0.0 {
                margin = margin.min(b / dd.abs());
            }
        }
    }
    Some((noise, trip, margin))
}

/// One calibrated gate.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// Gate id.
    pub gate: String,
    /// Honest noise floor (eps units: error / reference scale).
    pub noise: f64,
    /// Trip point of the gate.
    pub threshold: f64,
    /// Smallest real-bug error on the gate's probes.
    pub onset: f64,
    /// Which bug sets the onset.
    pub onset_by: String,
    /// Analytic trip point (min over probes), a cross-check of the bisection.
    pub analytic_threshold: f64,
    /// Honest margin: min over probe elements of bound / |honest error|.
    pub lower_margin: f64,
    /// onset / threshold.
    pub upper_margin: f64,
}

pub(crate) fn sign_of(i: usize) -> f64 {
    // splitmix-style hash: fixed, deterministic signs.
    let mut z = (i as u64).wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    if (z ^ (z >> 31)) & 1 == 0 {
        1.0
    } else {
        -1.0
    }
}

/// The honest matmul with every output moved by eps * sign_i * scale_i.
pub fn perturbed(op: &Op, eps: f64) -> InProcess {
    let inner = honest_matmul();
    let f = inner.fwd.clone();
    let op = op.clone();
    let fwd: FwdFn = Arc::new(move |d, x| {
        let xs: Vec<Vec<f64>> = x.iter().map(|t| t.to_f64_vec()).collect();
        let mut out = f(d, x)?;
        let refs: Vec<&[f64]> = xs.iter().map(|v| v.as_slice()).collect();
        let outs: Vec<Vec<f64>> = out.outputs.iter().map(|t| t.to_f64_vec()).collect();
        let prof = (op.profile)(d, &refs, &outs);
        let mut new = Vec::new();
        for ((t, v), p) in out.outputs.iter().zip(outs).zip(prof) {
            let w: Vec<f32> = v.iter().enumerate().map(|(i, y)| (y + eps * sign_of(i) * p.depth as f64 * p.scale[i]) as f32).collect();
            new.push(Tensor::f32(t.shape.clone(), w));
        }
        out.outputs = new;
        Ok(out)
    });
    InProcess { name: format!("perturbed({eps:e})"), op_id: inner.op_id, precision: inner.precision, fwd, bwd: None }
}

/// The probes a gate uses: (dims, distribution, seed).
pub fn probes(gate: &str, op: &Op, ctx: &Ctx) -> Vec<(Dims, Dist, u64)> {
    let n = op.native();
    match gate {
        "CMP-01" => (0..3).map(|s| (n.clone(), Dist::Normal, gate_seed(gate, s))).collect(),
        "ORD-01" => (0..3).map(|s| (n.clone(), Dist::Normal, gate_seed(gate, s))).collect(),
        "ORD-03" => (0..2).map(|s| (n.clone(), Dist::WideRange, gate_seed(gate, s))).collect(),
        "CMP-03" => shape_set(op, &n).0.into_iter().enumerate().map(|(i, (_, d))| (d, Dist::Normal, gate_seed(gate, i as u64))).collect(),
        "PRC-01" => vec![(prc01_precision::probe_dims(ctx), Dist::Positive, gate_seed(gate, 0))],
        "PRC-02" => prc02_accumulation::probe_dims(ctx).map(|d| vec![(d, Dist::AccumProbe, gate_seed(gate, 0))]).unwrap_or_default(),
        _ => vec![],
    }
}

/// Largest |cand - ref| / (depth scale) of `cand` over `probes` (calls the candidate directly).
pub fn eps_of(op: &Op, cand: &dyn Candidate, probes: &[(Dims, Dist, u64)]) -> f64 {
    probes.iter().map(|(d, dist, seed)| eps_on(op, cand, d, generate(op, d, *dist, *seed, cand.precision().input), &Call::Forward).worst).fold(0.0, f64::max)
}

/// What a candidate's outputs on one probe show against the reference.
#[derive(Debug, Clone, Copy)]
pub struct ProbeError {
    /// Largest |cand - ref| / (depth scale) where the reference is finite: a NaN output is
    /// dropped (`f64::max`), an infinite one makes it infinite; infinite also when the
    /// candidate fails or changes a shape, 0 when the reference refuses the probe.
    pub worst: f64,
    /// Some output is NaN or infinite where the reference is finite.
    pub nonfinite: bool,
}

/// [`eps_of`] on one probe with given inputs, on the outputs of `call`.
pub fn eps_on(op: &Op, cand: &dyn Candidate, d: &Dims, x: Inputs, call: &Call) -> ProbeError {
    let failed = ProbeError { worst: f64::INFINITY, nonfinite: false };
    let mut e = ProbeError { worst: 0.0, nonfinite: false };
    let (r, outputs) = match answers(op, cand, d, x, call) {
        Ok(a) => a,
        Err(true) => return e,
        Err(false) => return failed,
    };
    for ((rt, p), ct) in r.outputs.iter().zip(&r.profiles).zip(&outputs) {
        if rt.shape != ct.shape {
            return failed;
        }
        for (i, (y, c)) in rt.to_f64_vec().iter().zip(to_f32_vec(ct)).enumerate() {
            if !y.is_finite() || p.scale[i] == 0.0 {
                continue;
            }
            e.nonfinite |= !c.is_finite();
            e.worst = e.worst.max((c as f64 - y).abs() / (p.depth.max(1) as f64 * p.scale[i]));
        }
    }
    e
}

fn gate_passes(op: &Op, gate: &str, eps: f64, opts: &Options) -> bool {
    let h = Harness::new(Arc::new(perturbed(op, eps)), opts.time_limit);
    let ctx = Ctx { op, harness: &h, precision: crate::error_model::Precision::F32, dims: op.native(), meta: None };
    run_gate(gate, &ctx).is_ok_and(|r| r.status == Status::Pass)
}

/// Calibrate every band gate on the honest matmul.
pub fn calibrate(opts: &Options) -> Vec<Calibration> {
    let op = matmul();
    let honest = honest_matmul();
    let h = Harness::new(Arc::new(honest_matmul()), opts.time_limit);
    let ctx = Ctx { op: &op, harness: &h, precision: crate::error_model::Precision::F32, dims: op.native(), meta: None };
    let bugs: Vec<(String, InProcess)> =
        tricks().into_iter().filter(|t| REAL_BUGS.contains(&t.name)).map(|t| (t.name.to_string(), (t.build)())).collect();
    let mut out = Vec::new();
    for gate in BAND_GATES {
        let pr = probes(gate, &op, &ctx);
        let noise = eps_of(&op, &honest, &pr);
        let pp = per_probe(&op, &honest, &pr, bound_kind(gate));
        let analytic = pp.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        let lower = pp.iter().map(|x| x.2).fold(f64::INFINITY, f64::min);
        let (mut lo, mut hi) = (1e-12f64, 1.0f64);
        if !gate_passes(&op, gate, lo, opts) || gate_passes(&op, gate, hi, opts) {
            continue;
        }
        for _ in 0..16 {
            let mid = (lo.ln() * 0.5 + hi.ln() * 0.5).exp();
            if gate_passes(&op, gate, mid, opts) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let threshold = (lo * hi).sqrt();
        let (onset_by, onset) = bugs
            .iter()
            .map(|(n, b)| (n.clone(), eps_of(&op, b, &pr)))
            .filter(|(n, e)| bugs_in_scope(gate).contains(&n.as_str()) && e.is_finite())
            .fold(("none".to_string(), f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
        out.push(Calibration {
            gate: gate.into(),
            noise,
            threshold,
            onset,
            onset_by,
            analytic_threshold: analytic,
            lower_margin: lower,
            upper_margin: onset / threshold,
        });
    }
    out
}

/// The calibration as a table.
pub fn table(rows: &[Calibration]) -> String {
    let mut s = format!(
        "{:<7} {:>11} {:>11} {:>11}  {:<16} {:>9} {:>9} {:>12}\n",
        "gate", "noise", "threshold", "onset", "onset by", "lower", "upper", "analytic-thr"
    );
    for r in rows {
        s += &format!(
            "{:<7} {:>11.3e} {:>11.3e} {:>11.3e}  {:<16} {:>8.1}x {:>8.1}x {:>12.3e}\n",
            r.gate, r.noise, r.threshold, r.onset, r.onset_by, r.lower_margin, r.upper_margin, r.analytic_threshold
        );
    }
    s += "eps = |error| / (depth * reference scale): an effective unit roundoff (u_f32 = 5.96e-8); lower = min bound/|honest error| per element, upper = onset/threshold\n";
    s
}

/// Errors drawing the plot.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {msg}")]
pub struct PlotError {
    /// Output path.
    pub path: String,
    /// Cause.
    pub msg: String,
}

/// Draw noise floor, threshold and onset per gate on a log axis as SVG.
pub fn plot(rows: &[Calibration], path: &std::path::Path) -> Result<(), PlotError> {
    use plotters::prelude::*;
    let err = |e: String| PlotError { path: path.display().to_string(), msg: e };
    let root = SVGBackend::new(path, (900, 120 + 60 * rows.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let vals: Vec<f64> = rows.iter().flat_map(|r| [r.noise, r.threshold, r.onset]).filter(|v| v.is_finite() && *v > 0.0).collect();
    let xmin = vals.iter().cloned().fold(f64::INFINITY, f64::min).log10().floor() - 0.5;
    let xmax = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max).log10().ceil() + 0.5;
    let n = rows.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption("kverify calibrate: honest noise, threshold, onset of real error (honest f32 matmul)", ("sans-serif", 16))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(xmin..xmax, -0.5..(n - 0.5))
        .map_err(|e| err(e.to_string()))?;
    let labels: Vec<String> = rows.iter().map(|r| r.gate.clone()).collect();
    chart
        .configure_mesh()
        .x_desc("log10(eps), eps = |error| / (depth * reference scale)")
        .y_labels(rows.len())
        .y_label_formatter(&|y| labels.get(y.round() as usize).cloned().unwrap_or_default())
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let pts = |f: &dyn Fn(&Calibration) -> f64| -> Vec<(f64, f64)> {
        rows.iter().enumerate().filter(|(_, r)| f(r).is_finite() && f(r) > 0.0).map(|(i, r)| (f(r).log10(), i as f64)).collect()
    };
    for (i, r) in rows.iter().enumerate() {
        if r.onset.is_finite() {
            chart
                .draw_series(LineSeries::new(vec![(r.noise.max(1e-300).log10(), i as f64), (r.onset.log10(), i as f64)], BLACK.mix(0.3)))
                .map_err(|e| err(e.to_string()))?;
        }
    }
    chart
        .draw_series(pts(&|r| r.noise).into_iter().map(|p| Circle::new(p, 6, BLUE.filled())))
        .map_err(|e| err(e.to_string()))?
        .label("honest noise floor")
        .legend(|(x, y)| Circle::new((x, y), 5, BLUE.filled()));
    chart
        .draw_series(pts(&|r| r.threshold).into_iter().map(|p| TriangleMarker::new(p, 8, GREEN.filled())))
        .map_err(|e| err(e.to_string()))?
        .label("threshold (trip point)")
        .legend(|(x, y)| TriangleMarker::new((x, y), 6, GREEN.filled()));
    chart
        .draw_series(pts(&|r| r.onset).into_iter().map(|p| Cross::new(p, 7, RED.stroke_width(3))))
        .map_err(|e| err(e.to_string()))?
        .label("onset of real error")
        .legend(|(x, y)| Cross::new((x, y), 5, RED.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
