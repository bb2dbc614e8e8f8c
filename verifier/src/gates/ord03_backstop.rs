//! ORD-03 relaxed backstop.
//!
//! * Question: is the result at least roughly right on wide-dynamic-range inputs (values
//!   spanning about forty binades)?
//! * Decision: two fixed seeds of sign * U[1,2) * 2^U(-20,20) inputs (2^U(-6,6) for f16 inputs)
//!   at the native shape; every finite element within 16 x the ORD-01 bound, and never below
//!   the deterministic CMP-01 bound (so the backstop is never stricter than the worst case).
//! * Bound source: [`crate::error_model::ORD03_FACTOR`] times ORD-01's bound; the factor is a
//!   documented coverage choice, not a tuned value.

use super::{fold_value_probes, inputs::gate_seed, inputs::Dist, value_probe, Ctx, GateInfo, GateResult};
use crate::error_model::BoundKind;

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "ORD-03",
    name: "relaxed backstop",
    tolerance_free: false,
    question: "Is it at least roughly right on wide-dynamic-range inputs?",
};

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let probes = (0..2)
        .map(|s| {
            let seed = gate_seed(INFO.id, s);
            (format!("seed#{s} {}", ctx.dims), value_probe(ctx, INFO.id, &ctx.dims, Dist::WideRange, seed, BoundKind::Backstop))
        })
        .collect();
    fold_value_probes(INFO, probes)
}
