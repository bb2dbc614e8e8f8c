//! PRC-01 declared precision.
//!
//! * Question: does the candidate compute at the precision it declares (fp32 declared but bf16
//!   or TF32 used fails)?
//! * Decision: positive U[1,2) inputs with full mantissas (rounded to the declared input dtype),
//!   reduction dims shortened to 4 (or their minimum) so that accumulation error cannot hide
//!   input or product rounding; every element within the deterministic bound of the declared
//!   precision. At that length the fp32 bound is about 5 u_f32 |ref| while a TF32 or bf16
//!   rounding of the inputs costs about 2^-12 or 2^-9 |ref|: hundreds to thousands of times
//!   over.
//! * Bound source: the deterministic bound (Higham Lemma 3.1) with u of the declared dtypes,
//!   `bound_i = gamma(depth, u_acc) scale_i + u_out |ref_i| + depth eta_acc`
//!   ([`crate::error_model::element_bound`]).
//! * Report of a failure (the label never changes the verdict): the worst element's excess
//!   over its bound, and a reduced precision only when the measured outputs fit that
//!   precision's model ([`explain`]); otherwise the report says that no reduced-precision model
//!   matches. The size of the error alone names nothing: a kernel whose variance cancels
//!   catastrophically in fp32 can miss the fp32 bound by the same factor as an input rounding.

use super::compare::compare;
use super::{inputs::gate_seed, inputs::Dist, value_probe_data, value_result, Ctx, GateInfo, GateResult, Probe, ProbeData, Status};
use crate::error_model::{BoundKind, Precision, REDUCED_PRECISIONS};
use crate::references::{DimKind, Dims};
use crate::tensor::{DType, Tensor};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "PRC-01",
    name: "declared precision",
    tolerance_free: false,
    question: "Does it compute at the precision it declares (no silent bf16/TF32)?",
};

/// Reduction length of the probe.
pub const PROBE_REDUCTION: usize = 4;

/// The probe's dims: reduction dims set to [`PROBE_REDUCTION`] within their legal range.
pub fn probe_dims(ctx: &Ctx) -> Dims {
    let mut d = ctx.dims.clone();
    for s in ctx.op.dims.iter().filter(|s| s.kind == DimKind::Reduction) {
        d = d.with(s.name, PROBE_REDUCTION.clamp(s.min, s.max));
    }
    if ctx.op.check_dims(&d).is_err() {
        ctx.dims.clone()
    } else {
        d
    }
}

/// Which values a reduced-precision model rounds to P before (inputs) or after (outputs) a
/// computation at the declared precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounded {
    /// Every input rounded to P, then the declared-precision computation.
    Inputs,
    /// The declared-precision computation, then every output rounded to P.
    Outputs,
    /// Both.
    InputsAndOutputs,
}

impl Rounded {
    /// The models in order of preference (fewest roundings first).
    pub const ALL: [Rounded; 3] = [Rounded::Inputs, Rounded::Outputs, Rounded::InputsAndOutputs];

    fn rounds_inputs(self) -> bool {
        self != Rounded::Outputs
    }

    fn rounds_outputs(self) -> bool {
        self != Rounded::Inputs
    }

    /// What fitting the model means, for the report (the tests of [`fits`]).
    pub fn evidence(self) -> &'static str {
        match self {
            Rounded::Inputs => "every output within the declared-precision bound of the fp64 reference at the rounded inputs",
            Rounded::Outputs => "every output on that grid and within the declared-precision bound with u_out of that precision",
            Rounded::InputsAndOutputs => {
                "every output on that grid and within the declared-precision bound, with u_out of that precision, of the fp64 reference at the rounded inputs"
            }
        }
    }

    /// Words for the report.
    pub fn words(self) -> &'static str {
        match self {
            Rounded::Inputs => "inputs",
            Rounded::Outputs => "outputs",
            Rounded::InputsAndOutputs => "inputs and outputs",
        }
    }
}

/// A reduced-precision model that fits a failed probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// What the model rounds.
    pub rounded: Rounded,
    /// The precisions it rounds to: the widest that fits, with every other one of the same unit
    /// roundoff that fits too (TF32 and FP16 round U[1,2) values identically, so this probe
    /// cannot tell them apart), in the order of [`REDUCED_PRECISIONS`].
    pub to: Vec<DType>,
}

/// `t` with every element rounded to `p` (round to nearest even, [`DType::round`]), as the f64
/// tensor the reference accepts.
fn round_tensor(t: &Tensor, p: DType) -> Tensor {
    Tensor::f64(t.shape.clone(), t.to_f64_vec().into_iter().map(|v| p.round(v)).collect())
}

/// Whether every finite value of `outs` is representable in `p`.
fn on_grid(outs: &[Tensor], p: DType) -> bool {
    outs.iter().all(|t| t.to_f64_vec().into_iter().all(|v| !v.is_finite() || p.round(v) == v))
}

/// Whether the candidate's outputs `data.outputs` on the probe at `dims` fit the model "`rounded`
/// to `p`, the rest at the declared precision D = `ctx.precision`". With f the operator
/// (evaluated by the fp64 reference), x the probe's inputs, y the outputs, rd_P rounding to
/// nearest even in P and bound_i(D', x') the gate's own deterministic bound
/// `gamma(depth, u_acc) scale_i + u_out |f(x')_i| + depth eta_acc` (Higham Lemma 3.1, via
/// [`compare`]) for precision D' with the reference's profile at x':
///
/// * [`Rounded::Inputs`]: `|y_i - f(rd_P(x))_i| <= bound_i(D, rd_P(x))` for every i;
/// * [`Rounded::Outputs`]: `rd_P(y_i) = y_i` and `|y_i - f(x)_i| <= bound_i(D with u_out = u_P, x)`;
/// * [`Rounded::InputsAndOutputs`]: `rd_P(y_i) = y_i` and
///   `|y_i - f(rd_P(x))_i| <= bound_i(D with u_out = u_P, rd_P(x))`.
///
/// Derivation: a kernel that rounds its inputs to P and then computes at precision D is the
/// D-computation of f at rd_P(x), so Lemma 3.1 bounds its distance from f(rd_P(x)) by the
/// same bound the gate applies, taken at rd_P(x). Rounding its outputs to P adds one rounding
/// of relative size at most u_P, which is the output term with u_out = u_P, and leaves every
/// output on P's grid. An error with another cause (cancellation, a wrong constant) is neither
/// within the fp32 bound of f(rd_P(x)), which on this probe differs from f(x) by hundreds of
/// fp32 bounds, nor confined to P's grid. A reference that refuses the rounded inputs fits
/// nothing.
pub fn fits(ctx: &Ctx, dims: &Dims, data: &ProbeData, p: DType, rounded: Rounded) -> bool {
    let precision = if rounded.rounds_outputs() {
        if !on_grid(&data.outputs, p) {
            return false;
        }
        Precision { output: p, ..ctx.precision }
    } else {
        ctx.precision
    };
    let x: Vec<Tensor> = if rounded.rounds_inputs() { data.inputs.iter().map(|t| round_tensor(t, p)).collect() } else { data.inputs.clone() };
    match ctx.op.forward(dims, &x) {
        Ok(r) => compare(&r, &data.outputs, &precision, BoundKind::Deterministic).passed(),
        Err(_) => false,
    }
}

/// The reduced-precision model that fits a failed probe, if any: the widest P of
/// [`REDUCED_PRECISIONS`] with a model that [`fits`] (models in the order of [`Rounded::ALL`]),
/// together with every other P of the same unit roundoff that fits that model.
pub fn explain(ctx: &Ctx, dims: &Dims, data: &ProbeData) -> Option<Explanation> {
    let (p, rounded) = REDUCED_PRECISIONS.iter().find_map(|&p| Rounded::ALL.into_iter().find(|&m| fits(ctx, dims, data, p, m)).map(|m| (p, m)))?;
    let to = REDUCED_PRECISIONS
        .into_iter()
        .filter(|&q| q == p || (q.unit_roundoff() == p.unit_roundoff() && fits(ctx, dims, data, q, rounded)))
        .collect();
    Some(Explanation { rounded, to })
}

/// The report's sentence for a failed probe whose worst element exceeds its bound `ratio` times.
pub fn failure_label(ratio: f64, explanation: Option<&Explanation>) -> String {
    let excess = if ratio.is_finite() { format!("{ratio:.2}x") } else { "an unbounded factor (non-finite output or zero bound)".into() };
    let names = |ds: &[DType]| ds.iter().map(|d| d.name()).collect::<Vec<_>>();
    match explanation {
        Some(e) => format!(
            "exceeds the declared-precision bound by {excess}; consistent with {} rounded to {} ({})",
            e.rounded.words(),
            names(&e.to).join(" or "),
            e.rounded.evidence()
        ),
        None => format!(
            "exceeds the declared-precision bound by {excess}; matches no reduced-precision model (inputs and/or outputs rounded to {})",
            names(&REDUCED_PRECISIONS).join(", ")
        ),
    }
}

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let d = probe_dims(ctx);
    let label = format!("positive probe [{d}]");
    match value_probe_data(ctx, INFO.id, &d, Dist::Positive, gate_seed(INFO.id, 0), BoundKind::Deterministic) {
        (Probe::NotApplicable(why), _) => GateResult::new(INFO, Status::NotApplicable, why),
        (Probe::Runtime(e), _) => GateResult::new(INFO, Status::Error, format!("{label}: {e}")),
        (Probe::Refused(why), _) => GateResult::new(INFO, Status::Fail, format!("rejected at {label}: {why}")),
        (Probe::Values(v), data) => {
            let mut g = value_result(INFO, &label, &v);
            if let (false, None, Some(data)) = (v.passed(), &v.structural, data) {
                g.detail = format!("{}; {}", g.detail, failure_label(v.worst_ratio, explain(ctx, &d, &data).as_ref()));
            }
            g
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_helpers_round_to_nearest_even_and_test_the_grid() {
        // bf16 keeps 7 explicit mantissa bits: spacing 2^-7 on [1,2). Ties go to the even
        // neighbour: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6; just above a tie goes up.
        let x = Tensor::f32(vec![4], vec![1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), 1.0 + 2f32.powi(-8) + 2f32.powi(-20), -1.5]);
        let r = round_tensor(&x, DType::Bf16);
        assert_eq!(r.dtype(), DType::F64);
        assert_eq!(r.shape, vec![4]);
        assert_eq!(r.to_f64_vec(), vec![1.0, 1.0 + 2f64.powi(-6), 1.0 + 2f64.powi(-7), -1.5]);
        // TF32 and f16: 10 explicit bits.
        let y = Tensor::f32(vec![2], vec![1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)]);
        assert_eq!(round_tensor(&y, DType::Tf32).to_f64_vec(), vec![1.0, 1.0 + 2f64.powi(-9)]);
        assert_eq!(round_tensor(&y, DType::F16).to_f64_vec(), vec![1.0, 1.0 + 2f64.powi(-9)]);
        assert!(on_grid(&[r], DType::Bf16));
        assert!(!on_grid(std::slice::from_ref(&x), DType::Bf16));
        assert!(on_grid(&[Tensor::f32(vec![3], vec![1.5, f32::NAN, f32::INFINITY])], DType::Bf16), "non-finite values are EXC-01's");
        // A bf16 value is on the wider grids too; an f32 value with a low bit set is on none.
        assert!(REDUCED_PRECISIONS.iter().all(|&p| on_grid(&[Tensor::f32(vec![1], vec![1.0 + 2f32.powi(-7)])], p)));
        assert!(REDUCED_PRECISIONS.iter().all(|&p| !on_grid(&[Tensor::f32(vec![1], vec![1.0 + 2f32.powi(-23)])], p)));
    }

    #[test]
    fn failure_label_names_the_model_and_its_precisions() {
        let e = Explanation { rounded: Rounded::InputsAndOutputs, to: vec![DType::Tf32, DType::F16] };
        assert_eq!(
            failure_label(1.234, Some(&e)),
            format!("exceeds the declared-precision bound by 1.23x; consistent with inputs and outputs rounded to tf32 or f16 ({})", Rounded::InputsAndOutputs.evidence())
        );
    }
}
