//! Views of on-chip tiles (`Slice`: `t[r0..+R, c0..+C]`, `t[i, j]`; `Gather`: `t[rows, cols]`
//! with index tiles; `Insert`: the block write `x[r0..+R, c0..+C] = v`) evaluated element by
//! element, and the cumulative sum `Scan`.
//!
//! A view's origin is run-time data. A view outside its tile would read or write bytes of
//! another buffer, so every instruction that evaluates views checks their origins first and a
//! failing check executes `trap` (the launch fails) — the interpreter stops at the same view
//! ([`crate::interp`], `ViewOutOfBounds`). Nothing is masked.

use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

use crate::ir::{Elem, Inst, Op, ReduceOp, Value, ValueDef};

use super::elementwise::{class, Class};
use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Traps unless every view instruction `i` evaluates — `i` itself, or a `Slice`/`Insert`
    /// fused into it — lies inside its tile. Emitted once per instruction, before its element
    /// loop: the origins are uniform scalars, so one test covers every element.
    pub(crate) fn check_views(&self, i: Inst) -> Result<(), BackendError> {
        for j in self.fused_tree(i) {
            match self.k.insts[j].op {
                Op::Slice { src, row, col } => {
                    let res = self.k.insts[j].result.ok_or_else(|| BackendError::Invalid("slice without a result".into()))?;
                    let ((vr, vc), (sr, sc)) = (self.extent2(res), self.extent2(src));
                    self.check_view(row, vr, sr)?;
                    self.check_view(col, vc, sc)?;
                }
                Op::Insert { base, row, col, rows, cols, .. } => {
                    let (br, bc) = self.extent2(base);
                    self.check_view(row, rows, br)?;
                    self.check_view(col, cols, bc)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Instruction `i` and every instruction fused into it, transitively (evaluated inside
    /// `i`'s element loop, at `i`'s place in the body).
    pub(crate) fn fused_tree(&self, i: Inst) -> Vec<Inst> {
        let (mut out, mut stack) = (vec![], vec![i]);
        while let Some(j) = stack.pop() {
            out.push(j);
            for a in self.k.inst_args(j) {
                if let (true, ValueDef::Result(d)) = (self.tp.fusion.is_fused(a), self.k.values[a].def) {
                    stack.push(d);
                }
            }
        }
        out
    }

    /// Traps unless `start..start + len` lies inside `0..extent` (`start`: a signed i32 scalar;
    /// `len <= extent`, which the IR validator guarantees).
    fn check_view(&self, start: Value, len: u32, extent: u32) -> Result<(), BackendError> {
        if crate::ir::ranges::within(self.k, start, 0, i64::from(extent.saturating_sub(len))) {
            return Ok(()); // inside on every path (`ir::ranges`)
        }
        let start = self.scalar(start)?.into_int_value();
        // Unsigned `start <= extent - len` also rejects a negative start.
        let ok = self.b.build_int_compare(IntPredicate::ULE, start, self.i32(extent.saturating_sub(len) as i32), "view.ok")?;
        self.trap_unless(ok, "view")
    }

    /// `(rows, cols)` of a value, scalars as `1 x 1`.
    pub(crate) fn extent2(&self, v: Value) -> (u32, u32) {
        self.k.values[v].ty.shape().unwrap_or((1, 1))
    }

    /// Element `(r, c)` of `Slice { src, row, col }` (result of type `out`): element
    /// `(row + r, col + c)` of `src` ([`Codegen::check_views`] tested the origin).
    pub(crate) fn slice_element(&self, src: Value, row: Value, col: Value, out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let (rr, cc) = self.slice_coords(row, col, r, c)?;
        let x = self.operand(src, rr, cc)?;
        self.convert(x, self.k.values[src].ty.elem(), out)
    }

    /// The source coordinates `(row + r, col + c)` of a view's element `(r, c)`.
    pub(crate) fn slice_coords(&self, row: Value, col: Value, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<(IntValue<'ctx>, IntValue<'ctx>), BackendError> {
        Ok((self.b.build_int_add(self.scalar(row)?.into_int_value(), r, "vr")?, self.b.build_int_add(self.scalar(col)?.into_int_value(), c, "vc")?))
    }

    /// Element `(r, c)` of `Gather { src, row, col }`: element `(row[r, c], col[r, c])` of
    /// `src`. The indices vary per element, so each element tests its own and traps outside
    /// `src` (the interpreter's `GatherOutOfBounds`): an unsigned compare per index, a branch
    /// that is never taken in a correct program.
    pub(crate) fn gather_element(&self, src: Value, row: Value, col: Value, out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let ri = self.operand(row, r, c)?.into_int_value();
        let ci = self.operand(col, r, c)?.into_int_value();
        self.check_gather(src, (row, ri), (col, ci))?;
        let x = self.operand(src, ri, ci)?;
        self.convert(x, self.k.values[src].ty.elem(), out)
    }

    /// Traps unless the gather indices `ri` (of index tile `row`) and `ci` (of `col`) lie inside
    /// `src`. Unsigned: a negative index is outside too. An index that is the element's own row
    /// (column) of a source at least as tall (wide) — `t[:, j]` — needs no test, nor does an
    /// index whose every value lies inside (`ir::ranges`: `sx[16 + blk + sj, :]` of a key-row
    /// loop).
    pub(crate) fn check_gather(&self, src: Value, (row, ri): (Value, IntValue<'ctx>), (col, ci): (Value, IntValue<'ctx>)) -> Result<(), BackendError> {
        let (sr, sc) = self.extent2(src);
        let mut ok = None;
        for (x, n, idx, axis) in [(ri, sr, row, crate::ir::Axis::Row), (ci, sc, col, crate::ir::Axis::Col)] {
            if self.own_index(idx, axis, n) || crate::ir::ranges::within(self.k, idx, 0, i64::from(n) - 1) {
                continue;
            }
            let t = self.b.build_int_compare(IntPredicate::ULT, x, self.i32(n as i32), "")?;
            ok = Some(match ok {
                Some(o) => self.b.build_and(o, t, "")?,
                None => t,
            });
        }
        match ok {
            Some(ok) => self.trap_unless(ok, "gather"),
            None => Ok(()),
        }
    }

    /// Whether `idx` is `row_index` (`axis` Row) or `col_index` (Col) over at most `extent`
    /// along `axis`: at element `(r, c)` it is `r` (`c`) itself, inside a source of `extent`.
    pub(crate) fn own_index(&self, idx: Value, axis: crate::ir::Axis, extent: u32) -> bool {
        let ValueDef::Result(d) = self.k.values[idx].def else { return false };
        let Some((rows, cols)) = self.k.values[idx].ty.shape() else { return false };
        let along = if axis == crate::ir::Axis::Row { rows } else { cols };
        matches!(self.k.insts[d].op, Op::Iota(a) if a == axis) && along <= extent
    }

    /// Element `(r, c)` of `Insert`: `value[r − row, c − col]` inside the block, else
    /// `base[r, c]`. Each side is evaluated only where it is taken (a branch, not a select):
    /// a row written into a 64 x 64 tile computes its value 64 times, not 4096.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_element(&self, base: Value, value: Value, row: Value, col: Value, block: (u32, u32), out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let dr = self.b.build_int_sub(r, self.scalar(row)?.into_int_value(), "ir")?;
        let dc = self.b.build_int_sub(c, self.scalar(col)?.into_int_value(), "ic")?;
        // Unsigned: a negative difference is outside too.
        let in_r = self.b.build_int_compare(IntPredicate::ULT, dr, self.i32(block.0 as i32), "")?;
        let in_c = self.b.build_int_compare(IntPredicate::ULT, dc, self.i32(block.1 as i32), "")?;
        let inside = self.b.build_and(in_r, in_c, "inside")?;
        let (then, other, join) = (self.ctx.append_basic_block(self.func, "ins.block"), self.ctx.append_basic_block(self.func, "ins.base"), self.ctx.append_basic_block(self.func, "ins.join"));
        self.b.build_conditional_branch(inside, then, other)?;
        self.b.position_at_end(then);
        let x = self.operand(value, dr, dc)?;
        let x = self.convert(x, self.k.values[value].ty.elem(), out)?;
        let then_end = self.cur_block()?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(other);
        let y = self.operand(base, r, c)?;
        let y = self.convert(y, self.k.values[base].ty.elem(), out)?;
        let other_end = self.cur_block()?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        let phi = self.b.build_phi(x.get_type(), "ins")?;
        phi.add_incoming(&[(&x, then_end), (&y, other_end)]);
        Ok(phi.as_basic_value())
    }

    /// The block update `var[row..+R, col..+C] = value` written in place (the `Insert` `ins`,
    /// fused into a `WriteVar` of its base's own variable: [`crate::passes::fuse::Fusion::in_place_insert`]):
    /// the block's `R x C` elements are stored at their places in `var`'s layout at byte `dst`;
    /// the rest of `var` is not touched. [`Codegen::check_views`] tested the origin.
    pub(crate) fn write_block_in_place(&mut self, var: crate::ir::Var, ins: Inst, dst: IntValue<'ctx>) -> Result<(), BackendError> {
        let Op::Insert { value, row, col, rows: br, cols: bc, .. } = self.k.insts[ins].op else {
            return Err(BackendError::Invalid(format!("{ins} is not a block update")));
        };
        let (xel, vel) = (self.k.values[value].ty.elem(), self.k.vars[var].ty.elem());
        let shape = self.shape_of(self.k.vars[var].ty, "variable")?;
        let layout = self.var_layout(var);
        let (r0, c0) = (self.scalar(row)?.into_int_value(), self.scalar(col)?.into_int_value());
        self.cta_loop(br * bc, &mut |cg, e| {
            let (r, c) = cg.tile_coords(e, bc)?;
            let y = cg.operand(value, r, c)?;
            let y = cg.convert(y, xel, vel)?;
            let (vr, vc) = (cg.b.build_int_add(r0, r, "vr")?, cg.b.build_int_add(c0, c, "vc")?);
            let off = layout.offset(cg, vr, vc, shape, vel.size_bytes())?;
            let p = cg.smem_at(cg.b.build_int_add(dst, off, "")?)?;
            cg.b.build_store(p, cg.to_storage(y, vel)?)?;
            Ok(())
        })
    }

    /// Emits `Scan`: thread `t` runs down columns `t, t + threads, …`, adding one row at a time
    /// (from the last row up when `reverse`) and writing each partial sum — the interpreter's
    /// order, so results are bit-identical.
    pub fn scan(&mut self, i: Inst, src: Value, reverse: bool) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("scan without a result".into()))?;
        let out = self.k.values[res].ty.elem();
        let (rows, cols) = self.shape_of(self.k.values[src].ty, "scan operand")?;
        let inel = self.k.values[src].ty.elem();
        let acc_elem = match class(inel) {
            Class::Float => Elem::F32,
            Class::Int => Elem::I32,
            Class::Bool => return Err(self.unsupported("a cumulative sum of a bool tile")),
        };
        let dst = self.value_buf(res)?;
        self.cta_loop(cols, &mut |cg, lane| {
            let init: BasicValueEnum = if acc_elem == Elem::F32 { cg.ctx.f32_type().const_zero().into() } else { cg.i32(0).into() };
            let slot = cg.entry_alloca(init.get_type(), "scan")?;
            cg.b.build_store(slot, init)?;
            let (zero, n) = (cg.i32(0), cg.i32(rows as i32));
            let first = if reverse { cg.i32(rows as i32 - 1) } else { zero };
            cg.counted_loop(zero, n, first, reverse, &mut |cg, r| {
                let x = cg.operand(src, r, lane)?;
                let x = cg.convert(x, inel, acc_elem)?;
                let acc = cg.b.build_load(init.get_type(), slot, "acc")?;
                let next = cg.fold(ReduceOp::Sum, class(acc_elem), acc, x)?;
                cg.b.build_store(slot, next)?;
                let e = cg.b.build_int_add(cg.b.build_int_mul(r, cg.i32(cols as i32), "")?, lane, "")?;
                let y = cg.convert(next, acc_elem, out)?;
                cg.store_elem(dst, e, out, y)
            })
        })
    }
}
