//! CTA barrier placement for the current code-generation strategy (a pass; per target, after
//! fusion): a `bar.sync` follows every instruction that reads or writes shared memory.
//!
//! Why every one: each tile instruction is a CTA-wide loop in which thread `t` handles elements
//! `t, t + threads, …`, so the next instruction may read an element another thread wrote, and a
//! later buffer may reuse bytes an earlier one still reads ([`super::smem_plan`] shares bytes
//! between buffers with disjoint live ranges). Fused values ([`super::fuse`]) are evaluated inside
//! their consumer: they emit nothing and need no barrier. Loops get none of their own; their
//! bodies' instructions do.

use cranelift_entity::SecondaryMap;

use super::fuse::Fusion;
use crate::ir::{Inst, Kernel, Op, Value};

/// Which instructions are followed by a CTA barrier.
#[derive(Clone, Debug, Default)]
pub struct Barriers {
    after: SecondaryMap<Inst, bool>,
}

impl Barriers {
    /// Whether `bar.sync` follows instruction `i`.
    pub fn after(&self, i: Inst) -> bool {
        self.after.get(i).copied().unwrap_or(false)
    }

    /// How many instructions are followed by a barrier.
    pub fn count(&self) -> usize {
        self.after.values().filter(|&&b| b).count()
    }
}

/// Places the barriers of kernel `k` given its fusion decisions.
pub fn run(k: &Kernel, fusion: &Fusion) -> Barriers {
    let mut out = Barriers::default();
    k.walk(|i| {
        let fused = k.insts[i].result.is_some_and(|r| fusion.is_fused(r));
        if !fused && touches_smem(k, i) {
            out.after[i] = true;
        }
    });
    out
}

/// Whether an instruction reads or writes shared memory: it has a tile result or tile operand,
/// or it accesses a variable.
fn touches_smem(k: &Kernel, i: Inst) -> bool {
    let tile = |v: Value| k.values[v].ty.shape().is_some();
    let d = &k.insts[i];
    if matches!(d.op, Op::For { .. }) {
        return false;
    }
    d.result.is_some_and(tile) || k.inst_args(i).into_iter().any(tile) || {
        let (r, w) = k.inst_vars(i);
        !r.is_empty() || !w.is_empty()
    }
}
