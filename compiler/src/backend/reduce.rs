//! Reductions along a tile axis. Thread `t` reduces rows (or columns) `t, t+threads, …`, each
//! sequentially from index 0 upward in f32 (or i32), so the result is deterministic and equals
//! a plain left-to-right fold — the order the interpreter uses.

use inkwell::values::BasicValueEnum;

use crate::ir::{Axis, Inst, ReduceOp, Value};

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
        let (lanes, len) = match axis {
            Axis::Row => (rows, cols),
            Axis::Col => (cols, rows),
        };
        self.cta_loop(lanes, &mut |cg, lane| {
            let init: BasicValueEnum = match (op, cl) {
                (ReduceOp::Sum, Class::Float) => cg.ctx.f32_type().const_zero().into(),
                (ReduceOp::Max, Class::Float) => cg.ctx.f32_type().const_float(f64::NEG_INFINITY).into(),
                (ReduceOp::Min, Class::Float) => cg.ctx.f32_type().const_float(f64::INFINITY).into(),
                (ReduceOp::Sum, _) => cg.i32(0).into(),
                (ReduceOp::Max, _) => cg.i32(i32::MIN).into(),
                (ReduceOp::Min, _) => cg.i32(i32::MAX).into(),
            };
            let slot = cg.entry_alloca(init.get_type(), "acc")?;
            cg.b.build_store(slot, init)?;
            let zero = cg.i32(0);
            let n = cg.i32(len as i32);
            cg.counted_loop(zero, n, zero, false, &mut |cg, j| {
                let (r, c) = match axis {
                    Axis::Row => (lane, j),
                    Axis::Col => (j, lane),
                };
                let x = cg.operand(v, r, c)?;
                let x = cg.convert(x, inel, if cl == Class::Float { crate::ir::Elem::F32 } else { crate::ir::Elem::I32 })?;
                let acc = cg.b.build_load(init.get_type(), slot, "acc")?;
                let next = cg.fold(op, cl, acc, x)?;
                cg.b.build_store(slot, next)?;
                Ok(())
            })?;
            let acc = cg.b.build_load(init.get_type(), slot, "acc")?;
            let acc = cg.convert(acc, if cl == Class::Float { crate::ir::Elem::F32 } else { crate::ir::Elem::I32 }, out)?;
            cg.store_elem(dst, lane, out, acc)
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
