//! `kverify calibrate`, second table: the probes issue 12 added, each between the honest noise
//! and the onset of real error.
//!
//! * **CMP-01's cancellation probe** ([`crate::gates::cmp01_value::cancellation`]: x = 100 +
//!   1e-3 N(0,1)) on every class that gets it, with that class's honest f32 mirror. Its real
//!   bug is the one-pass variance E[x²] − E[x]² (`naive_variance_layer_norm`); the other
//!   classes have no in-scope bug on it (their onset is "none", the upper margin infinite) and
//!   the row shows that honest arithmetic stays inside the bound.
//! * **CMP-03's sizes past every power of two and past the envelope**
//!   ([`crate::gates::cmp03_probes::size_set`]) on the honest f32 matmul, all of them in one
//!   row, against the matmul's real bugs in scope for CMP-03.
//! * **CMP-02 at the CMP-03 shapes** ([`crate::gates::cmp02_gradient::probes`] past its two
//!   native seeds: every CMP-03 shape and the all-minimum one, with the gate's seeds), one row
//!   per class that has a CMP-02 trick ([`CMP02_CLASSES`]), on that class's honest f32 mirror
//!   and its backward; the onset is the class's CMP-02 trick (`wrong_grad`'s dB × 0.5 for
//!   matmul, all-zero gradients for sdpa and the norms, NaN at R = N = 1 for softmax).
//!
//! Units and margins as in [`crate::calibrate`] (eps = |error| / (depth · scale); lower margin =
//! min over elements of bound / |honest error|; upper = onset / threshold). The threshold here
//! is the *analytic* trip point of the perturbation, min over elements of (bound − sign · honest
//! error) / (depth · scale): the real gate runs all its probes at once, so bisecting it cannot
//! isolate one probe. (In the first table the bisected and analytic trip points agree within
//! 1 % for CMP-01, ORD-01, ORD-03 and PRC-02; for PRC-01 and CMP-03 the bisection trips 14 %
//! and 30 % lower, its perturbation rounded to f32 on shallow probes.)

use crate::calibrate::{bugs_in_scope, eps_on, probe_stats, Call};
use crate::candidate::harness::Harness;
use crate::candidate::inprocess::{honest, InProcess};
use crate::error_model::{BoundKind, Precision};
use crate::gates::cmp01_value::{cancellation, CANCELLATION_CLASSES, INFO as CMP01, SEEDS};
use crate::gates::cmp02_gradient::{self, INFO as CMP02};
use crate::gates::Ctx;
use crate::gates::cmp03_probes::{size_set, widened, PAST_ENVELOPE_BYTES};
use crate::gates::inputs::{gate_seed, generate, Dist, Inputs};
use crate::redteam::{honest_matmul, tricks};
use crate::references::linear::matmul;
use crate::references::{op_by_id, Dims, Op};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The classes with a CMP-02 trick in the red team, in the second table's order.
pub const CMP02_CLASSES: [&str; 5] = ["matmul", "softmax", "layer_norm", "rms_norm", "sdpa"];

/// One calibrated probe (or family of probes).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeCalibration {
    /// Gate the probe belongs to.
    pub gate: String,
    /// Operator class.
    pub op: String,
    /// Which probe(s).
    pub probe: String,
    /// Honest noise floor (eps).
    pub noise: f64,
    /// Analytic trip point (eps).
    pub threshold: f64,
    /// Smallest error of an in-scope real bug on the probe (infinite: none in scope).
    pub onset: f64,
    /// Which bug sets the onset (`none`).
    pub onset_by: String,
    /// That bug's largest error with its NaN outputs left out (a bug may be caught by NaN rows
    /// while its finite ones sit closer to the threshold).
    pub onset_finite: f64,
    /// min over elements of bound / |honest error|.
    pub lower_margin: f64,
    /// onset / threshold.
    pub upper_margin: f64,
}

/// A probe: the op to run it with (widened past the envelope), its dims, inputs and call.
type Probe = (Op, Dims, Inputs, Call);

fn row(gate: &str, op_id: &str, probe: String, honest_c: &InProcess, bugs: &[(String, InProcess)], probes: &[Probe]) -> ProbeCalibration {
    let (mut noise, mut threshold, mut lower) = (0.0f64, f64::INFINITY, f64::INFINITY);
    for (op, d, x, call) in probes {
        if let Some((n, t, m)) = probe_stats(op, honest_c, d, x.clone(), BoundKind::Deterministic, call) {
            noise = noise.max(n);
            threshold = threshold.min(t);
            lower = lower.min(m);
        }
    }
    // Per bug: (name, onset — infinite where an output turns non-finite —, error over its
    // NaN-free outputs). A bug that leaves the probe's answer exact is no real error there.
    let (onset_by, onset, onset_finite) = bugs
        .iter()
        .map(|(n, b)| {
            let (worst, nonfinite) = probes.iter().map(|(op, d, x, call)| eps_on(op, b, d, x.clone(), call)).fold((0.0f64, false), |(w, f), e| (w.max(e.worst), f || e.nonfinite));
            (n.clone(), if nonfinite { f64::INFINITY } else { worst }, worst)
        })
        .filter(|(_, e, _)| *e > 0.0)
        .fold(("none".to_string(), f64::INFINITY, f64::INFINITY), |a, b| if a.0 == "none" || b.1 < a.1 { b } else { a });
    // No element with a nonzero bound unit: the probe is compared exactly (e.g. max), every
    // change fails it.
    let upper_margin = if threshold.is_infinite() || onset.is_infinite() { f64::INFINITY } else { onset / threshold };
    ProbeCalibration { gate: gate.into(), op: op_id.into(), probe, noise, threshold, onset, onset_by, onset_finite, lower_margin: lower, upper_margin }
}

/// The real bugs of class `op_id` in scope for `gate` among the red team's tricks: the
/// matmul's in-scope precision bugs ([`bugs_in_scope`]) and any trick of the class aimed at
/// this gate (layer_norm's one-pass variance for CMP-01).
fn bugs_for(op_id: &str, gate: &str) -> Vec<(String, InProcess)> {
    tricks().into_iter().filter(|t| t.op == op_id && (t.gate == gate || bugs_in_scope(gate).contains(&t.name))).map(|t| (t.name.to_string(), (t.build)())).collect()
}

/// Every row of the second table.
pub fn calibrate_probes() -> Vec<ProbeCalibration> {
    let mut out = Vec::new();
    for id in CANCELLATION_CLASSES {
        let Some(op) = op_by_id(id) else { continue };
        let n = op.native();
        let seed = gate_seed(CMP01.id, SEEDS);
        let Some(x) = cancellation(&op, &n, seed, Precision::F32.input) else { continue };
        let probe = format!("cancellation [{n}]");
        out.push(row(CMP01.id, id, probe, &honest(&op, Precision::F32), &bugs_for(id, CMP01.id), &[(op.clone(), n, x, Call::Forward)]));
    }
    let op = matmul();
    let (sizes, _) = size_set(&op, &op.native(), PAST_ENVELOPE_BYTES);
    let probes: Vec<Probe> = sizes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let o = if p.past_envelope { widened(&op, p.dim, p.dims.get(p.dim)) } else { op.clone() };
            // The seeds CMP-03 gives these probes (gates/cmp03_shapes.rs).
            let x = generate(&o, &p.dims, Dist::Normal, gate_seed("CMP-03", 100 + i as u64), Precision::F32.input);
            (o, p.dims.clone(), x, Call::Forward)
        })
        .collect();
    let label = format!("{} sizes past 2^k and past the envelope", probes.len());
    out.push(row("CMP-03", "matmul", label, &honest_matmul(), &bugs_for("matmul", "CMP-03"), &probes));
    for id in CMP02_CLASSES {
        if let Some(r) = cmp02_shapes_row(id) {
            out.push(r);
        }
    }
    out
}

/// The CMP-02 row of class `id`: its backward at every shape CMP-02 visits besides the native
/// one, with the gate's inputs and output gradients. None for an unregistered id.
fn cmp02_shapes_row(id: &str) -> Option<ProbeCalibration> {
    let op = op_by_id(id)?;
    let h = honest(&op, Precision::F32);
    let harness = Harness::new(Arc::new(h.clone()), Duration::from_secs(20));
    let ctx = Ctx { op: &op, harness: &harness, precision: Precision::F32, dims: op.native(), meta: None };
    let probes: Vec<Probe> = cmp02_gradient::probes(&ctx)
        .into_iter()
        .filter(|(_, d, _)| *d != ctx.dims)
        .map(|(_, d, s)| {
            let (x, g) = cmp02_gradient::probe_inputs(&op, &d, s, Precision::F32.input);
            (op.clone(), d, x, Call::Backward(g))
        })
        .collect();
    let label = format!("{} CMP-03 and minimum shapes (backward)", probes.len());
    Some(row(CMP02.id, id, label, &h, &bugs_for(id, CMP02.id), &probes))
}

/// The second table as text.
pub fn table(rows: &[ProbeCalibration]) -> String {
    let mut s = format!("{:<7} {:<11} {:>11} {:>11} {:>11} {:>11}  {:<26} {:>9} {:>9}  probe\n", "gate", "class", "noise", "threshold", "onset", "(finite)", "onset by", "lower", "upper");
    for r in rows {
        s += &format!(
            "{:<7} {:<11} {:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e}  {:<26} {:>8.1}x {:>8.1}x  {}\n",
            r.gate, r.op, r.noise, r.threshold, r.onset, r.onset_finite, r.onset_by, r.lower_margin, r.upper_margin, r.probe
        );
    }
    s += "threshold: the analytic trip point of the perturbation on that probe alone (inf: no element has a rounding budget, the probe is compared exactly); onset inf: non-finite outputs where the reference is finite, (finite): the same bug's error where its output is finite; onset by none: no in-scope real bug for the class\n";
    s
}
