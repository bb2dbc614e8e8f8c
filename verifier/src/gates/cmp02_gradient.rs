//! CMP-02 gradient.
//!
//! * Question: do the backward outputs (every input gradient) match the fp64 reference gradient?
//! * Decision: two fixed seeds of standard-normal inputs and output gradients at the native
//!   shape, then one fixed seed at every shape CMP-03 visits ([`cmp03_shapes::shape_set`]:
//!   reduction x2/x4, batch 1, odd, envelope maxima) and at the edge shape with every changeable
//!   dim at its minimum ([`res01_runtime::edge_dims`], e.g. softmax R = 1, N = 1); every gradient
//!   element within the deterministic bound of its own profile (e.g. for matmul dA = dC B^T has
//!   depth N and scale |dC| |B|^T), derived at each shape exactly as at the native one. A failure
//!   names the shape and the gradient (`grad <input>`).
//! * Bound source: as CMP-01 (Higham Lemma 3.1 / eq. 3.4) applied to the backward formulas.
//! * n/a when the candidate is forward-only or the operator has no reference backward (rule 8).

use super::{cmp03_shapes, compare, fold_value_probes, inputs, inputs::gate_seed, res01_runtime, Ctx, GateInfo, GateResult, Probe, Status};
use crate::error_model::BoundKind;
use crate::references::{Dims, Op};
use crate::tensor::DType;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "CMP-02",
    name: "gradient",
    tolerance_free: false,
    question: "Do the backward outputs match the fp64 reference gradient (native and CMP-03 shapes)?",
};

/// The (label, dims, probe index) triples CMP-02 visits: the native dims with seeds 0 and 1,
/// then every shape of [`cmp03_shapes::shape_set`] and the all-minimum edge shape (deduplicated,
/// native excluded), one seed each.
pub fn probes(ctx: &Ctx) -> Vec<(String, Dims, u64)> {
    let mut out: Vec<(String, Dims, u64)> = (0..2u64).map(|s| (format!("native seed#{s} [{}]", ctx.dims), ctx.dims.clone(), s)).collect();
    let mut others: Vec<(String, Dims)> = cmp03_shapes::shape_set(ctx.op, &ctx.dims).0;
    if let Some(e) = res01_runtime::edge_dims(ctx) {
        others.push(("minimum".into(), e));
    }
    for (label, d) in others {
        if d == ctx.dims || out.iter().any(|(_, x, _)| x == &d) {
            continue;
        }
        let i = out.len() as u64;
        out.push((format!("{label} [{d}]"), d, i));
    }
    out
}

/// The inputs and output gradients of probe `index` at `dims` (standard normal, rounded to
/// `in_dtype`; seeds `gate_seed("CMP-02", index)` and `gate_seed("CMP-02", 100 + index)`), as
/// the gate and `kverify calibrate` use them.
pub fn probe_inputs(op: &Op, dims: &Dims, index: u64, in_dtype: DType) -> (inputs::Inputs, inputs::Inputs) {
    (inputs::generate(op, dims, inputs::Dist::Normal, gate_seed(INFO.id, index), in_dtype), inputs::grads(op, dims, gate_seed(INFO.id, 100 + index), in_dtype))
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    if !ctx.harness.cand.has_backward() {
        return GateResult::new(INFO, Status::NotApplicable, "candidate is forward-only");
    }
    if ctx.op.backward.is_none() {
        return GateResult::new(INFO, Status::NotApplicable, format!("operator {} has no reference backward", ctx.op.id));
    }
    let shapes = probes(ctx);
    let n_shapes = shapes.len().saturating_sub(2); // after the two native seeds
    let mut results = Vec::new();
    for (label, d, s) in shapes {
        let (x, g) = probe_inputs(ctx.op, &d, s, ctx.precision.input);
        let r = match ctx.op.backward(&d, &x.reference, &g.reference) {
            Ok(r) => r,
            Err(e) => {
                results.push((label, Probe::NotApplicable(e.to_string())));
                continue;
            }
        };
        let call = ctx.harness.backward(INFO.id, &d, x.candidate, g.candidate);
        let (label, p) = match call.outcome {
            Err(e) if e.is_runtime_failure() => (label, Probe::Runtime(e)),
            Err(e) => (label, Probe::Refused(e.to_string())),
            Ok(outs) => {
                let v = compare::compare(&r, &outs, &ctx.precision, BoundKind::Deterministic);
                let grad = ctx.op.inputs.get(v.worst_at.0).map(|i| i.name).unwrap_or("?");
                (format!("{label} grad {grad}"), Probe::Values(v))
            }
        };
        results.push((label, p));
    }
    let mut g = fold_value_probes(INFO, results);
    if g.status == Status::Pass {
        g.detail = format!("native (2 seeds) + {n_shapes} other shapes ok; worst {}", g.detail);
    }
    g
}
