//! Elementwise work on a register accumulator where its fragments are (issue 9, item 1): a
//! `Store` or `WriteVar` whose fused expression reads the accumulator
//! ([`crate::passes::fuse::Fusion::frag_root`]) is evaluated by each thread at the coordinates
//! of its own fragment elements ([`crate::layout::wgmma::fragment_coords`]) instead of a CTA
//! loop over a shared-memory copy: `d = d * exp2(g)`, `dvn += dv_tile` and `store dh = d` touch
//! registers and global memory only, and `db = bf16(d)` writes the operand tile straight from
//! registers. Every element is computed by the same operations as before, so results are
//! bit-identical; what goes away is the write-back of the fragments, a copy, a reload and
//! their barriers.

use inkwell::values::PointerValue;

use crate::ir::{Inst, Op, Var};
use crate::layout::wgmma::fragment_coords;

use super::super::copy::TileLayout;
use super::super::emit::Codegen;
use super::super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// The fragment register a fused `ReadVar` of `v` reads at the element being evaluated,
    /// inside [`Codegen::fragment_root`].
    pub fn frag_read(&self, v: Var) -> Option<PointerValue<'ctx>> {
        self.frag_ctx.filter(|(w, _)| *w == v).map(|(_, p)| p)
    }

    /// Emits root `i` (a `Store` or `WriteVar`) in the fragment order of accumulator `v`.
    pub fn fragment_root(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        self.settle_wgmma()?;
        let (arr, d) = self.fragment(v)?;
        let per_slot = d.piece_n / 2;
        let len = d.floats_per_thread();
        let op = self.k.insts[i].op.clone();
        self.for_each_unit(d, &mut |cg, s, r0, c0, t| {
            for e in 0..per_slot {
                let (r, c) = fragment_coords(&*cg, t, e)?;
                let (r, c) = (cg.b.build_int_add(r0, r, "")?, cg.b.build_int_add(c0, c, "")?);
                let slot = cg.frag_slot(arr, len, s * per_slot + e)?;
                cg.frag_ctx = Some((v, slot));
                let done = cg.fragment_element(&op, v, slot, r, c);
                cg.frag_ctx = None;
                done?;
            }
            Ok(())
        })
    }

    /// One element `(r, c)` of root `op`; `slot` holds the accumulator's value there.
    fn fragment_element(&mut self, op: &Op, v: Var, slot: PointerValue<'ctx>, r: inkwell::values::IntValue<'ctx>, c: inkwell::values::IntValue<'ctx>) -> Result<(), BackendError> {
        match op {
            Op::Store { dst, index, value, mask } => {
                let x = self.operand(*value, r, c)?;
                self.store_global_elem(*dst, index, *mask, x, self.res_elem(*value), r, c)
            }
            Op::WriteVar(w, x) => {
                let y = self.operand(*x, r, c)?;
                let we = self.k.vars[*w].ty.elem();
                let y = self.convert(y, self.res_elem(*x), we)?;
                if *w == v {
                    self.b.build_store(slot, y)?;
                    return Ok(());
                }
                let shape = self.shape_of(self.k.vars[*w].ty, "variable")?;
                let off = self.var_layout(*w).offset(self, r, c, shape, we.size_bytes())?;
                let off = self.b.build_int_add(self.i32(self.var_buf(*w)? as i32), off, "")?;
                let p = self.smem_at(off)?;
                self.b.build_store(p, self.to_storage(y, we)?)?;
                Ok(())
            }
            other => Err(BackendError::Invalid(format!("{other:?} is not a fragment-order root"))),
        }
    }

    /// The shared-memory layout of variable `v`'s buffer.
    pub fn var_layout(&self, v: Var) -> TileLayout {
        match self.tp.tma.swizzle_of(v) {
            Some(sw) => TileLayout::Swizzled(sw),
            None if self.tp.roles.is_tiled(v) => TileLayout::CoreMatrices,
            None => TileLayout::RowMajor,
        }
    }
}
