//! Accesses past a tensor's edge that the program did not declare (docs/language.md, "What
//! happens out of bounds"): a tensor without `edge(zeros)` may not be touched past its edge, so
//! the generated code traps (the launch fails) where the interpreter stops with E0601 — an
//! indexing mistake never turns into silent zeros or skipped writes.
//!
//! * A `Load`, and a `Store` without `where`, touch every element of their tile: one test per
//!   instruction, on its uniform index scalars, before any element is read or written — every
//!   point inside its dimension, every range `start .. start + len` inside `0 ..= extent`.
//!   Emitted at the instruction's place in the body for fused loads too (their consumer's
//!   place), and for pipelined loads, whose copies were issued ahead (an early copy past the
//!   edge reads zeros that are never used: the trap comes first).
//! * A `Store ... where m` touches only the elements where `m` holds: each store path tests
//!   them element by element ([`Codegen::trap_on_kept_outside`]).
//!
//! A tensor declared `edge(zeros)` is never tested: past its edge loads read 0 and stores are
//! dropped, as before.

use inkwell::values::IntValue;
use inkwell::IntPredicate;

use crate::ir::{Edge, Index, Inst, Op, Param};

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Traps unless every tensor access of instruction `i` — `i` itself or a load fused into
    /// it — that must stay inside its tensor does (module docs).
    pub(crate) fn check_edges(&self, i: Inst) -> Result<(), BackendError> {
        for j in self.fused_tree(i) {
            match &self.k.insts[j].op {
                Op::Load { src, index } if self.k.params[*src].edge == Edge::Error => self.check_tile_inside(*src, index)?,
                Op::Store { dst, index, mask: None, .. } if self.k.params[*dst].edge == Edge::Error => self.check_tile_inside(*dst, index)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Traps unless the whole tile `p[index]` lies inside the tensor's run-time extents.
    fn check_tile_inside(&self, p: Param, index: &[Index]) -> Result<(), BackendError> {
        let i64t = self.ctx.i64_type();
        let mut ok = self.ctx.bool_type().const_int(1, false);
        for (d, ix) in index.iter().enumerate() {
            let dim = self.dims[p][d];
            let inside = match ix {
                // Unsigned: a negative position fails too.
                Index::Point(v) => {
                    let pos = self.b.build_int_s_extend(self.scalar(*v)?.into_int_value(), i64t, "")?;
                    self.b.build_int_compare(IntPredicate::ULT, pos, dim, "")?
                }
                Index::Range { start, len } => {
                    let s = self.b.build_int_s_extend(self.scalar(*start)?.into_int_value(), i64t, "")?;
                    let end = self.b.build_int_add(s, i64t.const_int(u64::from(*len), false), "")?;
                    let from = self.b.build_int_compare(IntPredicate::SGE, s, i64t.const_zero(), "")?;
                    let to = self.b.build_int_compare(IntPredicate::SLE, end, dim, "")?;
                    self.b.build_and(from, to, "")?
                }
            };
            ok = self.b.build_and(ok, inside, "")?;
        }
        self.trap_unless(ok, "edge")
    }

    /// For a store through a `where` mask: traps if an element the mask keeps lies outside a
    /// tensor `p` that may not be touched past its edge. `elems`: each element's (inside the
    /// tensor, kept by the mask). Nothing for a tensor declared `edge(zeros)` (such an element
    /// is dropped instead) or without elements.
    pub(crate) fn trap_on_kept_outside(&self, p: Param, elems: &[(IntValue<'ctx>, IntValue<'ctx>)]) -> Result<(), BackendError> {
        if self.k.params[p].edge != Edge::Error || elems.is_empty() {
            return Ok(());
        }
        let mut ok = self.ctx.bool_type().const_int(1, false);
        for &(inb, keep) in elems {
            // kept ⇒ inside
            ok = self.b.build_and(ok, self.b.build_or(inb, self.b.build_not(keep, "")?, "")?, "")?;
        }
        self.trap_unless(ok, "edge")
    }

    /// Executes `trap` (the launch fails) unless `ok` holds.
    pub(crate) fn trap_unless(&self, ok: IntValue<'ctx>, what: &str) -> Result<(), BackendError> {
        let trap = self.ctx.append_basic_block(self.func, &format!("{what}.trap"));
        let join = self.ctx.append_basic_block(self.func, &format!("{what}.ok"));
        self.b.build_conditional_branch(ok, join, trap)?;
        self.b.position_at_end(trap);
        self.call("llvm.trap", None, &[])?;
        self.b.build_unreachable()?;
        self.b.position_at_end(join);
        Ok(())
    }
}
