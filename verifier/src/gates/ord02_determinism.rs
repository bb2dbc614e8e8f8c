//! ORD-02 determinism.
//!
//! * Question: are repeated runs on identical inputs bitwise identical, forward and backward?
//! * Decision: five runs on fresh copies of the same native-shape inputs must produce byte-equal
//!   outputs; where the candidate kind allows (external processes), one more run after a restart
//!   into a fresh process must match too. A candidate with a backward has its backward repeated
//!   the same way (the same inputs, the same output gradients every run, one restart before the
//!   fresh-process run): every input gradient must be byte-equal over all runs. The backward needs
//!   no reference gradient, so it is repeated whenever the candidate has one; a forward-only
//!   candidate is checked on its forward alone and the report says so.
//! * Report: per differing tensor (`output`, `grad A`, ...) the number of distinct bit patterns
//!   over the runs and the first differing element (run, flat and multi-index, bits and values).
//! * Bound source: none: tolerance-free (byte equality).

use super::{inputs, inputs::gate_seed, Ctx, GateInfo, GateResult, Status};
use crate::candidate::harness::CallResult;
use crate::tensor::Tensor;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "ORD-02",
    name: "determinism",
    tolerance_free: true,
    question: "Are repeated runs on identical inputs bitwise identical (forward and backward)?",
};

/// Number of repeated runs (per pass; a fresh-process run comes on top where the kind allows).
pub const RUNS: usize = 5;

/// Probe index of the output-gradient seed (the input seed is index 0), as CMP-02's `100 + s`.
const GRAD_SEED: u64 = 100;

/// The outputs of one pass repeated [`RUNS`] times (plus the fresh-process run, if any).
struct Repeated {
    /// `outputs[run][tensor]`.
    outputs: Vec<Vec<Tensor>>,
    /// Whether the last run came after a restart into a fresh process.
    fresh_process: bool,
}

/// Run one pass (`forward`, or `backward` with output gradients) [`RUNS`] times on fresh copies
/// of the same inputs, then once more after a restart where the candidate kind allows. A
/// failed call ends the gate (error for a runtime failure, fail for a refusal).
fn repeat(ctx: &Ctx, pass: &str, x: &[Tensor], grads: Option<&[Tensor]>) -> Result<Repeated, GateResult> {
    let mut outputs = Vec::new();
    let mut fresh_process = false;
    for run in 0..=RUNS {
        if run == RUNS {
            match ctx.harness.cand.restart() {
                Ok(true) => fresh_process = true,
                Ok(false) => break,
                Err(e) => return Err(GateResult::new(INFO, Status::Error, format!("restart before {pass} run {run} failed: {e}"))),
            }
        }
        let copy: Vec<Tensor> = x.iter().map(Tensor::deep_copy).collect();
        let call: CallResult = match grads {
            None => ctx.harness.forward(INFO.id, &ctx.dims, copy),
            Some(g) => ctx.harness.backward(INFO.id, &ctx.dims, copy, g.iter().map(Tensor::deep_copy).collect()),
        };
        match call.outcome {
            Ok(o) => outputs.push(o),
            Err(e) if e.is_runtime_failure() => return Err(GateResult::new(INFO, Status::Error, format!("{pass} run {run}: {e}"))),
            Err(e) => return Err(GateResult::new(INFO, Status::Fail, format!("rejected at {pass} run {run}: {e}"))),
        }
    }
    Ok(Repeated { outputs, fresh_process })
}

/// Row-major multi-index of flat element `i` in `shape`.
fn multi_index(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (slot, &n) in idx.iter_mut().zip(shape).rev() {
        if n > 0 {
            *slot = i % n;
            i /= n;
        }
    }
    idx
}

/// `0x…` of one element's little-endian bytes (most significant digit first).
fn bits(b: &[u8]) -> String {
    let hex: String = b.iter().rev().map(|x| format!("{x:02x}")).collect();
    format!("0x{hex}")
}

/// Where run `r`'s tensor first differs from run 0's.
fn first_difference(r: usize, t0: &Tensor, t: &Tensor) -> String {
    if t.dtype() != t0.dtype() || t.shape != t0.shape {
        return format!(
            "run {r} is {} {:?}, run 0 {} {:?}",
            t.dtype().name(),
            t.shape,
            t0.dtype().name(),
            t0.shape
        );
    }
    let (b0, b) = (t0.to_le_bytes(), t.to_le_bytes());
    let width = if t0.is_empty() { 1 } else { (b0.len() / t0.len()).max(1) };
    let Some(e) = b0.chunks(width).zip(b.chunks(width)).position(|(x, y)| x != y) else {
        return format!("run {r} differs from run 0 outside the elements");
    };
    let (v0, v) = (t0.to_f64_vec()[e], t.to_f64_vec()[e]);
    format!(
        "run {r} element {e} {:?}: {} ({v:e}) vs run 0 {} ({v0:e})",
        multi_index(&t.shape, e),
        bits(&b[e * width..(e + 1) * width]),
        bits(&b0[e * width..(e + 1) * width])
    )
}

/// Compare every run of a pass with run 0, tensor by tensor. Returns the number of runs that
/// differ from run 0 in any tensor, and one finding per differing tensor (named by `names`).
fn differences(rep: &Repeated, names: &[String]) -> (usize, Vec<String>) {
    let runs = rep.outputs.len();
    let Some(first) = rep.outputs.first() else {
        return (0, Vec::new());
    };
    let mut findings = Vec::new();
    let mut differing_runs = vec![false; runs];
    for (r, outs) in rep.outputs.iter().enumerate().skip(1) {
        if outs.len() != first.len() {
            differing_runs[r] = true;
            findings.push(format!("run {r} returned {} tensors, run 0 {}", outs.len(), first.len()));
        }
    }
    let key = |t: &Tensor| (t.dtype().name(), t.shape.clone(), t.to_le_bytes());
    for (i, t0) in first.iter().enumerate() {
        let name = names.get(i).cloned().unwrap_or_else(|| format!("tensor {i}"));
        let k0 = key(t0);
        let mut patterns = vec![k0.clone()];
        let mut first_diff: Option<String> = None;
        let mut present = 1;
        for (r, outs) in rep.outputs.iter().enumerate().skip(1) {
            let Some(t) = outs.get(i) else { continue };
            present += 1;
            let k = key(t);
            if k != k0 {
                differing_runs[r] = true;
                if first_diff.is_none() {
                    first_diff = Some(first_difference(r, t0, t));
                }
            }
            if !patterns.contains(&k) {
                patterns.push(k);
            }
        }
        if let Some(d) = first_diff {
            findings.push(format!("{name}: {} distinct bit patterns over {present} runs, first difference at {d}", patterns.len()));
        }
    }
    (differing_runs.iter().filter(|&&d| d).count(), findings)
}

fn runs_label(rep: &Repeated, pass: &str) -> String {
    format!("{} {pass} runs{}", rep.outputs.len(), if rep.fresh_process { " (incl. one in a fresh process)" } else { "" })
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let x = inputs::generate(ctx.op, &ctx.dims, inputs::Dist::Normal, gate_seed(INFO.id, 0), ctx.precision.input);
    if let Err(e) = ctx.op.forward(&ctx.dims, &x.reference) {
        return GateResult::new(INFO, Status::NotApplicable, format!("reference not applicable: {e}"));
    }
    let fwd = match repeat(ctx, "forward", &x.candidate, None) {
        Ok(r) => r,
        Err(g) => return g,
    };
    let out_names: Vec<String> = if ctx.op.outputs.len() == 1 {
        vec!["output".to_string()]
    } else {
        (0..ctx.op.outputs.len()).map(|i| format!("output {i}")).collect()
    };
    let (mut mismatches, mut findings) = differences(&fwd, &out_names);
    let mut summary = vec![runs_label(&fwd, "forward")];
    if ctx.harness.cand.has_backward() {
        let g = inputs::grads(ctx.op, &ctx.dims, gate_seed(INFO.id, GRAD_SEED), ctx.precision.input);
        let bwd = match repeat(ctx, "backward", &x.candidate, Some(&g.candidate)) {
            Ok(r) => r,
            Err(g) => return g,
        };
        let grad_names: Vec<String> = ctx.op.inputs.iter().map(|s| format!("grad {}", s.name)).collect();
        let (m, f) = differences(&bwd, &grad_names);
        mismatches += m;
        findings.extend(f);
        summary.push(runs_label(&bwd, "backward"));
    } else {
        summary.push("backward not repeated: candidate is forward-only".to_string());
    }
    let status = if findings.is_empty() { Status::Pass } else { Status::Fail };
    let detail = if findings.is_empty() {
        format!("{}; all bitwise identical", summary.join(", "))
    } else {
        format!("{}; {mismatches} run(s) differ from run 0: {}", summary.join(", "), findings.join("; "))
    };
    let mut g = GateResult::new(INFO, status, detail);
    g.measured = Some(mismatches as f64);
    g.bound = Some(0.0);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_index_is_row_major() {
        assert_eq!(multi_index(&[4, 3], 7), vec![2, 1]);
        assert_eq!(multi_index(&[2, 3, 5], 29), vec![1, 2, 4]);
    }

    #[test]
    fn first_difference_names_element_bits_and_values() {
        let a = Tensor::f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = Tensor::f32(vec![2, 2], vec![1.0, 2.0, f32::from_bits(3.0f32.to_bits() + 1), 4.0]);
        let d = first_difference(3, &a, &b);
        assert!(d.starts_with("run 3 element 2 [1, 0]: 0x40400001"), "{d}");
        assert!(d.contains("vs run 0 0x40400000 (3e0)"), "{d}");
    }

    #[test]
    fn differences_count_distinct_patterns_and_runs() {
        let t = |v: f32| vec![Tensor::f32(vec![1], vec![v])];
        let rep = Repeated { outputs: vec![t(1.0), t(1.0), t(2.0), t(3.0), t(2.0)], fresh_process: false };
        let (m, f) = differences(&rep, &["grad A".to_string()]);
        assert_eq!(m, 3);
        assert_eq!(f.len(), 1);
        assert!(f[0].starts_with("grad A: 3 distinct bit patterns over 5 runs, first difference at run 2 element 0"), "{}", f[0]);
        let same = Repeated { outputs: vec![t(1.0); 6], fresh_process: true };
        assert_eq!(differences(&same, &["output".to_string()]), (0, Vec::new()));
    }
}
