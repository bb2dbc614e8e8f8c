//! RES-01 runtime resource contract.
//!
//! * Question: no crash or hang within the time budget, no mutation of inputs, no output
//!   aliasing an input, outputs of the reference's count, shape, declared dtype and device, and
//!   no stale / cached answers for new inputs?
//! * Decision: three calls (native shape twice with different seeds, then the "edge" shape with
//!   every changeable dim at its minimum). Fails on any crash, timeout or exit (reported with
//!   its signal or code), any input whose fingerprint changed, any output sharing storage with an
//!   input, any output of the wrong shape, dtype or device, or a second answer byte-identical to
//!   the first while the reference answers differ. Runtime failures, mutations and aliases the
//!   harness logged during the other gates of the battery are charged here too.
//! * Bound source: none: tolerance-free.

use super::{inputs, inputs::gate_seed, Ctx, GateInfo, GateResult, Status};
use crate::references::{DimKind, Dims};
use crate::tensor::Device;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "RES-01",
    name: "runtime contract",
    tolerance_free: true,
    question: "No crash/hang, no input mutation, no aliasing, right shape/dtype/device, no stale answers?",
};

/// The edge shape: every changeable dim at its minimum (when legal).
pub fn edge_dims(ctx: &Ctx) -> Option<Dims> {
    let mut d = ctx.dims.clone();
    for s in ctx.op.dims.iter().filter(|s| s.kind != DimKind::Fixed) {
        d = d.with(s.name, s.min);
    }
    ctx.op.check_dims(&d).ok().map(|_| d)
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let mut problems: Vec<String> = Vec::new();
    let mut probes: Vec<(String, Dims, u64)> =
        vec![("native seed#0".into(), ctx.dims.clone(), gate_seed(INFO.id, 0)), ("native seed#1".into(), ctx.dims.clone(), gate_seed(INFO.id, 1))];
    if let Some(e) = edge_dims(ctx) {
        if e != ctx.dims {
            probes.push((format!("edge [{e}]"), e, gate_seed(INFO.id, 2)));
        }
    }
    let want_dtype = ctx.precision.output.storage();
    if ctx.op.index_output() && !want_dtype.is_integer() {
        problems.push(format!("{} answers indices: the declared output must be i32 or i64, not {}", ctx.op.id, want_dtype.name()));
    }
    let mut answers: Vec<(Vec<Vec<u8>>, Vec<Vec<u8>>)> = Vec::new();
    let mut applicable = false;
    for (label, d, seed) in &probes {
        let x = inputs::generate(ctx.op, d, inputs::Dist::Normal, *seed, ctx.precision.input);
        let r = match ctx.op.forward(d, &x.reference) {
            Ok(r) => r,
            Err(_) => continue,
        };
        applicable = true;
        let call = ctx.harness.forward(INFO.id, d, x.candidate);
        if !call.mutated.is_empty() {
            problems.push(format!("{label}: mutated input(s) {:?}", call.mutated));
        }
        if !call.aliased.is_empty() {
            problems.push(format!("{label}: output aliases input (output, input) {:?}", call.aliased));
        }
        let outs = match call.outcome {
            Ok(o) => o,
            Err(e) => {
                problems.push(format!("{label}: {e}"));
                continue;
            }
        };
        if outs.len() != r.outputs.len() {
            problems.push(format!("{label}: {} outputs, expected {}", outs.len(), r.outputs.len()));
            continue;
        }
        for (o, (c, rt)) in outs.iter().zip(&r.outputs).enumerate() {
            if c.shape != rt.shape {
                problems.push(format!("{label}: output {o} shape {:?}, expected {:?}", c.shape, rt.shape));
            }
            let wide_ok = ctx.op.wide_outputs.contains(&o) && c.dtype() == crate::tensor::DType::F32;
            if c.dtype() != want_dtype && !wide_ok {
                problems.push(format!("{label}: output {o} dtype {}, declared {}", c.dtype().name(), want_dtype.name()));
            }
            if c.device != Device::Cpu {
                problems.push(format!("{label}: output {o} on {}, expected cpu", c.device));
            }
        }
        if d == &ctx.dims {
            answers.push((outs.iter().map(|t| t.to_le_bytes()).collect(), r.outputs.iter().map(|t| t.to_le_bytes()).collect()));
        }
    }
    if answers.len() == 2 && answers[0].0 == answers[1].0 && answers[0].1 != answers[1].1 {
        problems.push("stale answer: new inputs got a byte-identical output while the reference changed".into());
    }
    for ev in ctx.harness.events().into_iter().filter(|e| e.gate != INFO.id) {
        problems.push(format!("during {} [{}]: {}", ev.gate, ev.dims, ev.what));
    }
    if !applicable && problems.is_empty() {
        return GateResult::new(INFO, Status::NotApplicable, "reference not applicable to the probes");
    }
    let status = if problems.is_empty() { Status::Pass } else { Status::Fail };
    let n = problems.len();
    let detail = if problems.is_empty() {
        format!("{} calls: no crash, hang, mutation, aliasing, staleness; shapes/dtype/device ok", probes.len())
    } else {
        problems.join("; ")
    };
    let mut g = GateResult::new(INFO, status, detail);
    g.measured = Some(n as f64);
    g.bound = Some(0.0);
    g
}
