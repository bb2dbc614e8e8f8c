//! Lints run by `tilec check` after lowering (warnings unless `-D warnings`):
//!
//! * W0501 — a TMEM buffer written but never read (an MMA result nobody loads wastes columns
//!   and tensor-core time);
//! * W0502 — a tile loaded from global memory and never used (wasted bandwidth);
//! * W0505 — a declared residency (`ctas_per_sm`) that leaves a loop's copies unpipelined on a
//!   target where the kernel would pipeline them without it (run per target, on its plan).
//!
//! The over-budget TMEM error (E0402) and illegal MMA shapes (E0401) are errors reported by the
//! planner and by semantic analysis.

use cranelift_entity::SecondaryMap;

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{Kernel, Op, Space, Value, Var};

/// W0505 on `k`'s plan `tp` for one target ([`TargetPlan::ring_given_up`]).
pub fn residency(k: &Kernel, tp: &crate::passes::target_plan::TargetPlan) -> Option<Diagnostic> {
    let ((n, span), (was, stages)) = (k.residency(tp.target)?, tp.ring_given_up?);
    let name = tp.target.name();
    Some(
        Diagnostic::warning(Code::ResidencyDropsRing, format!("`ctas_per_sm` leaves kernel `{}`'s copies unpipelined on {name}: no copy ring keeps {n} CTAs per SM", k.name), span, format!("{n} CTAs per SM"))
            .with_note(format!("without it: a {stages}-stage ring at {was} CTA{} per SM; now each copy is issued and awaited where it is used", if was == 1 { "" } else { "s" }))
            .with_note(format!("help: if the residency is meant for another target only, write ctas_per_sm(<target>: {n}); else declare fewer CTAs per SM")),
    )
}

/// Runs the lints on one kernel.
pub fn run(k: &Kernel) -> Diagnostics {
    let mut diags = Diagnostics::new();
    let mut var_reads: SecondaryMap<Var, u32> = SecondaryMap::new();
    let mut var_writes: SecondaryMap<Var, u32> = SecondaryMap::new();
    let mut value_uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    // A var whose every write stores the result of a load (a staged tile).
    let mut var_from_load: SecondaryMap<Var, bool> = SecondaryMap::new();
    k.walk(|i| {
        let (r, w) = k.inst_vars(i);
        for v in r {
            var_reads[v] += 1;
        }
        for v in w {
            var_writes[v] += 1;
        }
        for a in k.inst_args(i) {
            value_uses[a] += 1;
        }
        if let Op::WriteVar(var, val) = k.insts[i].op {
            let from_load = matches!(k.values[val].def, crate::ir::ValueDef::Result(d) if matches!(k.insts[d].op, Op::Load { .. }));
            var_from_load[var] = from_load;
        }
    });
    for (v, d) in k.vars.iter() {
        if var_writes[v] > 0 && var_reads[v] == 0 {
            if d.space == Space::Tmem {
                diags.push(
                    Diagnostic::warning(Code::TmemWriteOnly, format!("tensor-memory buffer `{}` is written but never read", d.name), d.span, "never read")
                        .with_note("it still occupies TMEM columns and tensor-core time; remove it or read it"),
                );
            } else if var_from_load[v] {
                diags.push(Diagnostic::warning(Code::UnusedLoad, format!("tile `{}` is loaded but never used", d.name), d.span, "loaded here, never read"));
            }
        }
    }
    k.walk(|i| {
        let Some(r) = k.insts[i].result else { return };
        if value_uses[r] > 0 {
            return;
        }
        if let Op::Load { .. } = k.insts[i].op {
            diags.push(Diagnostic::warning(Code::UnusedLoad, "loaded tile is never used", k.inst_spans[i], "this load's result is discarded"));
        }
    });
    diags
}
