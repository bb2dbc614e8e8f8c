//! Padded rows for row-major shared-memory variables that the threads read in a wgmma
//! fragment's order (sm_90a roots evaluated in a register accumulator's fragments,
//! [`super::fuse::Fusion::frag_root`]).
//!
//! A fragment puts a warp's 8 rows at `lane / 4`; in a row-major tile whose rows are a multiple
//! of 128 bytes long they all start in one bank, so each thread's pair read of an f32 `[_, 32]`
//! tile took 8 wavefronts instead of 2 and a column read of an f32 `[_, 16]` tile 4 instead of 1
//! (Nsight Compute, docs/results.md, thirty-fourth session: the largest excess of dqkwg_channel's
//! sub-chunk and key-row loops). Such a variable gets rows padded to the pitch
//! [`fragment_pitch`] picks for the ways it is read ([`FragRead`]); its readers and writers all
//! address it through the layout (`backend::copy::TileLayout::Pitched`), and the shared-memory
//! plan counts the padding.
//!
//! Only plain tiles qualify: not an MMA operand or accumulator (those have the layouts the
//! tensor core reads), not swizzled, not filled by a software pipeline's ring (TMA boxes are
//! dense), 2- or 4-byte elements. [`super::target_plan`] keeps the plan without padding when
//! the padding would cost a resident CTA, a ring stage or the budget.

use cranelift_entity::SecondaryMap;

use crate::ir::{Kernel, Op, ValueDef, Var};
use crate::layout::bank::{fragment_pitch, FragRead};
use crate::target::TargetInfo;

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::tma::TmaPlan;
use super::var_roles::VarRoles;

/// Row pitch in elements of each padded variable.
pub type Pitches = SecondaryMap<Var, Option<u32>>;

/// The padded variables of kernel `k` on `target` and their row pitches.
pub fn plan(k: &Kernel, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, tma: &TmaPlan, pipelines: &SecondaryMap<crate::ir::Inst, Option<Pipeline>>) -> Pitches {
    let mut out = Pitches::new();
    let reads = fragment_reads(k, fusion);
    let mut excluded: SecondaryMap<Var, bool> = SecondaryMap::new();
    for p in pipelines.values().flatten() {
        for &v in &p.vars {
            excluded[v] = true;
        }
    }
    k.walk(|i| {
        if let Op::Mma { dst, a, b, .. } = &k.insts[i].op {
            for v in [*dst, a.var, b.var] {
                excluded[v] = true;
            }
        }
    });
    for (v, rs) in reads {
        let d = &k.vars[v];
        let plain = roles.in_shared_memory(k, v, target) && roles.accumulator(v).is_none() && !roles.is_tiled(v) && tma.swizzle_of(v).is_none() && !excluded[v];
        let size = d.ty.elem().size_bytes();
        let Some((_, cols)) = d.ty.shape() else { continue };
        if plain && matches!(size, 2 | 4) && cols > 1 {
            out[v] = fragment_pitch(cols, size, &rs);
        }
    }
    out
}

/// For every variable a fragment-order root reads, how it is read: a column view
/// (`t[:, j]`, a slice or gather of one column) reads one element per row, a one-row slice is
/// a broadcast (not counted), anything else reads a pair per thread (the worst case for a
/// gather whose rows may coincide). Each distinct way once, variables in first-read order.
fn fragment_reads(k: &Kernel, fusion: &Fusion) -> Vec<(Var, Vec<FragRead>)> {
    let mut out: Vec<(Var, Vec<FragRead>)> = vec![];
    k.walk(|i| {
        if fusion.frag_root(i).is_none() {
            return;
        }
        fusion.visit_fused(k, i, &mut |consumer, v| {
            let ValueDef::Result(d) = k.values[v].def else { return false };
            if !fusion.is_fused(v) {
                return false;
            }
            let rows = k.values[v].ty.shape().map_or(1, |s| s.0);
            if matches!(k.insts[d].op, Op::Slice { .. }) && rows == 1 {
                return false; // one row, the same for every thread: a broadcast, whatever the pitch
            }
            if let Op::ReadVar(var) = k.insts[d].op {
                let one_col = k.insts[consumer].result.and_then(|r| k.values[r].ty.shape()).is_some_and(|s| s.1 == 1);
                let column = matches!(k.insts[consumer].op, Op::Slice { .. } | Op::Gather { .. }) && one_col;
                let how = if column { FragRead::Column } else { FragRead::Pairs };
                match out.iter_mut().find(|(w, _)| *w == var) {
                    Some((_, rs)) if !rs.contains(&how) => rs.push(how),
                    Some(_) => {}
                    None => out.push((var, vec![how])),
                }
            }
            true
        });
    });
    out
}
