//! Reductions along a tile axis, in f32 (or i32), deterministic and in the order the
//! interpreter uses: a row by up to 32 lanes of one warp, strided partials then a butterfly,
//! its steps in-thread or `shfl.sync.bfly` ([`crate::layout::reduction::RowPlan`]); a column
//! by one thread (thread `t` takes columns `t, t+threads, …`), sequentially from row 0.

use inkwell::values::{BasicValueEnum, IntValue, PointerValue};

use crate::ir::{Axis, Elem, Inst, ReduceOp, Value};
use crate::layout::reduction::{butterfly, RowPlan};

use super::elementwise::{class, Class};
use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Emits `Reduce(op, axis, v)`: `Axis::Row` gives `[R, 1]`, `Axis::Col` gives `[1, C]`.
    pub fn reduce(&mut self, i: Inst, op: ReduceOp, axis: Axis, v: Value) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("reduce without a result".into()))?;
        let out = self.res_elem(res);
        let ty = self.k.values[v].ty;
        let (rows, cols) = self.shape_of(ty, "reduce operand")?;
        let inel = ty.elem();
        let cl = class(out);
        if cl == Class::Bool || class(inel) == Class::Bool {
            return Err(self.unsupported("reduction of bool tiles"));
        }
        let dst = self.value_buf(res)?;
        if axis == Axis::Row {
            return self.reduce_rows(op, v, (rows, cols), dst, inel, out);
        }
        let acc_elem = acc_elem(cl);
        self.cta_loop(cols, &mut |cg, lane| {
            let init = cg.identity(op, cl);
            let slot = cg.entry_alloca(init.get_type(), "acc")?;
            cg.b.build_store(slot, init)?;
            // Rows in order, COL_UNROLL per iteration: the folds stay a chain, but the loads of
            // an iteration are independent and issue together (one at a time they made each
            // fold wait a shared-memory latency: a 64-row column sum was ~2,000 cycles).
            let zero = cg.i32(0);
            let n = cg.i32((rows / COL_UNROLL) as i32);
            cg.counted_loop(zero, n, zero, false, &mut |cg, q| {
                let base = cg.b.build_int_mul(q, cg.i32(COL_UNROLL as i32), "")?;
                for u in 0..COL_UNROLL {
                    let j = cg.b.build_int_add(base, cg.i32(u as i32), "")?;
                    cg.fold_into(slot, op, cl, v, (j, lane), inel)?;
                }
                Ok(())
            })?;
            for j in rows / COL_UNROLL * COL_UNROLL..rows {
                cg.fold_into(slot, op, cl, v, (cg.i32(j as i32), lane), inel)?;
            }
            let acc = cg.b.build_load(init.get_type(), slot, "acc")?;
            let acc = cg.convert(acc, acc_elem, out)?;
            cg.store_elem(dst, lane, out, acc)
        })
    }

    /// Folds element `(r, c)` of operand `v` (of `inel`) into the accumulator of class `cl` at
    /// `slot` ([`acc_elem`]): `slot = slot ∘ x`.
    #[allow(clippy::too_many_arguments)] // one fold: accumulator, operation, operand, element, type
    fn fold_into(&mut self, slot: PointerValue<'ctx>, op: ReduceOp, cl: Class, v: Value, (r, c): (IntValue<'ctx>, IntValue<'ctx>), inel: Elem) -> Result<(), BackendError> {
        let acc_elem = acc_elem(cl);
        let x = self.operand(v, r, c)?;
        let x = self.convert(x, inel, acc_elem)?;
        let acc = self.b.build_load(self.storage_type(acc_elem), slot, "acc")?;
        let next = self.fold(op, cl, acc, x)?;
        self.b.build_store(slot, next)?;
        Ok(())
    }

    /// The identity of `op` on register class `cl`: +0, −∞ or +∞ (i32: 0, MIN, MAX).
    pub(crate) fn identity(&self, op: ReduceOp, cl: Class) -> BasicValueEnum<'ctx> {
        match (op, cl) {
            (ReduceOp::Sum, Class::Float) => self.ctx.f32_type().const_zero().into(),
            (ReduceOp::Max, Class::Float) => self.ctx.f32_type().const_float(f64::NEG_INFINITY).into(),
            (ReduceOp::Min, Class::Float) => self.ctx.f32_type().const_float(f64::INFINITY).into(),
            (ReduceOp::Sum, _) => self.i32(0).into(),
            (ReduceOp::Max, _) => self.i32(i32::MIN).into(),
            (ReduceOp::Min, _) => self.i32(i32::MAX).into(),
        }
    }

    /// A row reduction of the `rows x cols` operand `v` into the `[rows, 1]` buffer at `dst`, as
    /// [`RowPlan`] lays it out: groups of `u` consecutive threads take one row each per pass
    /// (the CTA's threads / u rows at a time, a whole number per warp); thread `t` of a group
    /// folds lanes `t + u·m` (lane `l`: columns `l, l + W, …`) into `k` registers, joins them
    /// in-thread, then `log2 u` butterfly steps of `shfl.sync.bfly` combine the threads and
    /// thread 0 stores. Every thread runs every pass (the shuffles need the whole warp); a
    /// thread past the last row or column only skips its loads. [`ROW_INTERLEAVE`] passes run
    /// side by side, their butterflies step by step: each row's order is unchanged, but the
    /// shuffle latencies of one row overlap the others' (one row at a time, a warp waited
    /// ~150 cycles per row on its five dependent shuffles).
    fn reduce_rows(&mut self, op: ReduceOp, v: Value, (rows, cols): (u32, u32), dst: u32, inel: Elem, out: Elem) -> Result<(), BackendError> {
        let cl = class(out);
        let acc_elem = acc_elem(cl);
        let plan = RowPlan::new(rows, cols, self.k.threads);
        let (w, u, k) = (plan.w, plan.u, plan.k);
        let per_pass = self.k.threads / u;
        let lane = self.b.build_and(self.tid, self.i32(u as i32 - 1), "lane")?;
        let grp = self.b.build_right_shift(self.tid, self.i32(u.trailing_zeros() as i32), false, "grp")?;
        let zero = self.i32(0);
        let passes = rows.div_ceil(per_pass);
        // Side by side, at most 16 partials live at once.
        let group = ROW_INTERLEAVE.min((16 / k).max(1)).min(passes);
        let (shfl, ty) = if cl == Class::Float { ("llvm.nvvm.shfl.sync.bfly.f32", self.ctx.f32_type().into()) } else { ("llvm.nvvm.shfl.sync.bfly.i32", self.ctx.i32_type().into()) };
        self.counted_loop(zero, self.i32(passes.div_ceil(group) as i32), zero, false, &mut |cg, q| {
            let mut rows_has = Vec::with_capacity(group as usize);
            let mut accs = Vec::with_capacity(group as usize);
            for g in 0..group {
                // Pass q·group + g; past the last pass `row ≥ rows`, so `has` is false.
                let pass = cg.b.build_int_add(cg.b.build_int_mul(q, cg.i32(group as i32), "")?, cg.i32(g as i32), "")?;
                let row = cg.b.build_int_add(cg.b.build_int_mul(pass, cg.i32(per_pass as i32), "")?, grp, "row")?;
                let has = cg.b.build_int_compare(inkwell::IntPredicate::ULT, row, cg.i32(rows as i32), "has")?;
                // Register j's lane: t + u·((j + ρ) mod k), ρ = (row / cycle) mod k.
                let rho = if k > 1 {
                    let r = cg.b.build_right_shift(row, cg.i32(plan.cycle.trailing_zeros() as i32), false, "")?;
                    Some(cg.b.build_and(r, cg.i32(k as i32 - 1), "rho")?)
                } else {
                    None
                };
                let mut slots = Vec::with_capacity(k as usize);
                let mut lanes = Vec::with_capacity(k as usize);
                for j in 0..k {
                    let init = cg.identity(op, cl);
                    let slot = cg.entry_alloca(init.get_type(), "acc")?;
                    cg.b.build_store(slot, init)?;
                    slots.push(slot);
                    let m = match rho {
                        Some(rho) => cg.b.build_and(cg.b.build_int_add(rho, cg.i32(j as i32), "")?, cg.i32(k as i32 - 1), "")?,
                        None => zero,
                    };
                    lanes.push(cg.b.build_int_add(lane, cg.b.build_int_mul(m, cg.i32(u as i32), "")?, "l")?);
                }
                let mut column = |cg: &mut Self, s: IntValue<'ctx>| {
                    for (slot, l) in slots.iter().zip(&lanes) {
                        let c = cg.b.build_int_add(cg.b.build_int_mul(s, cg.i32(w as i32), "")?, *l, "c")?;
                        let in_row = cg.b.build_int_compare(inkwell::IntPredicate::ULT, c, cg.i32(cols as i32), "")?;
                        let ok = cg.b.build_and(has, in_row, "")?;
                        cg.if_then(ok, &mut |cg| cg.fold_into(*slot, op, cl, v, (row, c), inel))?;
                    }
                    Ok(())
                };
                let steps = cols.div_ceil(w);
                if steps * k <= ROW_STEPS_UNROLLED {
                    for s in 0..steps {
                        column(cg, cg.i32(s as i32))?;
                    }
                } else {
                    cg.counted_loop(zero, cg.i32(steps as i32), zero, false, &mut column)?;
                }
                let mut regs = Vec::with_capacity(k as usize);
                for slot in &slots {
                    regs.push(cg.b.build_load(cg.identity(op, cl).get_type(), *slot, "acc")?);
                }
                // The in-thread steps s ≥ u: registers j and j + d (lanes m and m ⊕ d).
                for d in butterfly(k) {
                    for j in 0..d as usize {
                        regs[j] = cg.fold(op, cl, regs[j], regs[j + d as usize])?;
                    }
                }
                accs.push(regs[0]);
                rows_has.push((row, has));
            }
            for s in butterfly(u) {
                for acc in accs.iter_mut() {
                    let other = cg.call(shfl, Some(ty), &[cg.i32(-1).into(), *acc, cg.i32(s as i32).into(), cg.i32(0x1f).into()])?;
                    *acc = cg.fold(op, cl, *acc, other)?;
                }
            }
            let first = cg.b.build_int_compare(inkwell::IntPredicate::EQ, lane, zero, "")?;
            for (acc, (row, has)) in accs.into_iter().zip(rows_has) {
                let store = cg.b.build_and(has, first, "")?;
                cg.if_then(store, &mut |cg| {
                    let y = cg.convert(acc, acc_elem, out)?;
                    cg.store_elem(dst, row, out, y)
                })?;
            }
            Ok(())
        })
    }

    /// `acc ∘ x` for reduction `op` on register class `cl` (also the cumulative sum's step).
    pub(crate) fn fold(&self, op: ReduceOp, cl: Class, acc: BasicValueEnum<'ctx>, x: BasicValueEnum<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let f32t = self.ctx.f32_type();
        Ok(match (op, cl) {
            (ReduceOp::Sum, Class::Float) => self.b.build_float_add(acc.into_float_value(), x.into_float_value(), "")?.into(),
            (ReduceOp::Max, Class::Float) => self.call("llvm.maximum.f32", Some(f32t.into()), &[acc, x])?,
            (ReduceOp::Min, Class::Float) => self.call("llvm.minimum.f32", Some(f32t.into()), &[acc, x])?,
            (ReduceOp::Sum, _) => self.b.build_int_add(acc.into_int_value(), x.into_int_value(), "")?.into(),
            (ReduceOp::Max | ReduceOp::Min, _) => {
                let pred = if op == ReduceOp::Max { inkwell::IntPredicate::SGT } else { inkwell::IntPredicate::SLT };
                let c = self.b.build_int_compare(pred, acc.into_int_value(), x.into_int_value(), "")?;
                self.b.build_select(c, acc, x, "")?
            }
        })
    }
}

/// Rows folded per iteration of a column reduction's loop (the rest after it).
const COL_UNROLL: u32 = 8;

/// Passes of a row reduction run side by side (see `reduce_rows`).
const ROW_INTERLEAVE: u32 = 4;

/// A thread's loads of a row (strided steps, columns / lanes, times its lanes) written out
/// straight when at most this many: up to 512 columns a lane's loads are independent straight-line code the scheduler can overlap;
/// wider rows loop, so a reduction does not add hundreds of instructions to kernels that are
/// already instruction-cache bound (K#2: 9,576 SASS instructions).
const ROW_STEPS_UNROLLED: u32 = 16;

/// The element type reductions accumulate in: f32 for floats, i32 for integers.
pub(crate) fn acc_elem(cl: Class) -> Elem {
    if cl == Class::Float {
        Elem::F32
    } else {
        Elem::I32
    }
}
