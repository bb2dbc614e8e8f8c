//! ORD-02 determinism.
//!
//! * Question: are repeated runs on identical inputs bitwise identical?
//! * Decision: five runs on fresh copies of the same native-shape inputs must produce byte-equal
//!   outputs; where the candidate kind allows (external processes), one more run after a restart
//!   into a fresh process must match too.
//! * Bound source: none: tolerance-free (byte equality).

use super::{inputs, inputs::gate_seed, Ctx, GateInfo, GateResult, Status};

/// Static description.
pub const INFO: GateInfo = GateInfo {
    id: "ORD-02",
    name: "determinism",
    tolerance_free: true,
    question: "Are repeated runs on identical inputs bitwise identical?",
};

/// Number of repeated runs.
pub const RUNS: usize = 5;

/// Run the gate.
pub fn run(ctx: &Ctx) -> GateResult {
    let x = inputs::generate(ctx.op, &ctx.dims, inputs::Dist::Normal, gate_seed(INFO.id, 0), ctx.precision.input);
    if let Err(e) = ctx.op.forward(&ctx.dims, &x.reference) {
        return GateResult::new(INFO, Status::NotApplicable, format!("reference not applicable: {e}"));
    }
    let mut first: Option<Vec<Vec<u8>>> = None;
    let mut mismatches = 0usize;
    let mut runs = 0;
    let mut notes = Vec::new();
    for run in 0..=RUNS {
        if run == RUNS {
            match ctx.harness.cand.restart() {
                Ok(true) => notes.push("incl. one run in a fresh process".to_string()),
                Ok(false) => break,
                Err(e) => return GateResult::new(INFO, Status::Error, format!("restart failed: {e}")),
            }
        }
        let copy: Vec<_> = x.candidate.iter().map(|t| t.deep_copy()).collect();
        let call = ctx.harness.forward(INFO.id, &ctx.dims, copy);
        let outs = match call.outcome {
            Ok(o) => o,
            Err(e) if e.is_runtime_failure() => return GateResult::new(INFO, Status::Error, format!("run {run}: {e}")),
            Err(e) => return GateResult::new(INFO, Status::Fail, format!("rejected at run {run}: {e}")),
        };
        runs += 1;
        let bytes: Vec<Vec<u8>> = outs.iter().map(|t| t.to_le_bytes()).collect();
        match &first {
            None => first = Some(bytes),
            Some(f) => {
                if *f != bytes {
                    mismatches += 1;
                }
            }
        }
    }
    let status = if mismatches == 0 { Status::Pass } else { Status::Fail };
    let mut g = GateResult::new(
        INFO,
        status,
        format!("{runs} runs, {mismatches} differ from run 0 {}", notes.join(", ")).trim().to_string(),
    );
    g.measured = Some(mismatches as f64);
    g.bound = Some(0.0);
    g
}
