//! ORD-01 reduction-order tolerance.
//!
//! * Question: is the error consistent with a legitimate reordering of the same-precision
//!   reduction?
//! * Decision: for three fixed seeds of standard-normal inputs at the native shape, every finite
//!   element satisfies |cand - ref| <= 4 u_acc sqrt(depth) scale + u_out |ref| + depth eta.
//! * Bound source: Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis",
//!   SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4 with lambda = 4 (probability of exceeding it is
//!   at most 2 exp(-8) per element under the model; far below in practice, since scale =
//!   sum |terms| overestimates every partial sum of random-signed terms).

use super::{fold_value_probes, inputs::gate_seed, inputs::Dist, value_probe, Ctx, GateInfo, GateResult};
use crate::error_model::BoundKind;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "ORD-01",
    name: "reduction-order",
    tolerance_free: false,
    question: "Is the error consistent with a legitimate reordering of the same-precision reduction?",
};

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let probes = (0..3)
        .map(|s| {
            let seed = gate_seed(INFO.id, s);
            (format!("seed#{s} {}", ctx.dims), value_probe(ctx, INFO.id, &ctx.dims, Dist::Normal, seed, BoundKind::Reordering))
        })
        .collect();
    fold_value_probes(INFO, probes)
}
