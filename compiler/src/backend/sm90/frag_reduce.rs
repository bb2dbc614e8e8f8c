//! Row reductions of an expression of a register accumulator where its fragments are (issue 9,
//! item 1: reductions on register fragments, shuffles for the cross-thread part): `row_sum(dxv *
//! v)` over a wgmma accumulator `dxv` is folded by the threads that hold each row, instead of the
//! accumulator being written back to shared memory and read again by a warp per row.
//!
//! The order is the one every row reduction has ([`crate::layout::reduction`]), so the result is
//! bit-identical to the shared-memory path and to the interpreter. A row of `n` columns has
//! `W = row_lanes(n)` strided partials, partial `p` folding columns `p, p + W, …` from the
//! identity, then a butterfly over the partials. In the m64nNk16 fragment
//! ([`crate::layout::wgmma::fragment_coords`]) column `c` of a row is held by quad lane
//! `q = (c mod 8) / 2` (`W` is a multiple of 8: `n` is), so every partial lives in one thread:
//! `p = 8a + 2q + b` with `a < W/8` and `b < 2`, folded in increasing column order. The butterfly
//! steps `s ≥ 8` join partials of one thread (`a ⊕ s/8`), `s = 4` and `s = 2` are
//! `shfl.sync.bfly` with quad lanes `q ⊕ 2` and `q ⊕ 1`, and `s = 1` joins `b = 0` and `b = 1`.
//! Sum, max and min are commutative, so each side of a pair holds the same value after every
//! step — which is what lets a thread keep only one side of an in-thread step.
//!
//! Only accumulators whose units span whole rows (`Distribution::pieces == 1`) are reduced here
//! (`passes::fuse` chooses them): a row is then one thread quad's in one unit.

use inkwell::values::BasicValueEnum;
use inkwell::IntPredicate;

use crate::ir::{Axis, Inst, Op, Var};
use crate::layout::reduction::{butterfly, row_lanes};
use crate::layout::wgmma::fragment_coords;

use super::super::elementwise::{class, Class};
use super::super::emit::Codegen;
use super::super::reduce::acc_elem;
use super::super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Emits row reduction `i` (`Reduce(op, Row, x)`, `x` a fused expression reading
    /// accumulator `v` at full shape) in `v`'s fragment order, into the `[rows, 1]` result buffer.
    pub fn fragment_reduce_rows(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        let Op::Reduce(op, Axis::Row, x) = self.k.insts[i].op.clone() else {
            return Err(BackendError::Invalid(format!("{i} is not a row reduction")));
        };
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("reduce without a result".into()))?;
        let out = self.res_elem(res);
        let inel = self.res_elem(x);
        let cl = class(out);
        if cl == Class::Bool || class(inel) == Class::Bool {
            return Err(self.unsupported("reduction of bool tiles"));
        }
        let acc_elem = acc_elem(cl);
        let dst = self.value_buf(res)?;
        self.settle_wgmma()?;
        let (_, d) = self.fragment(v)?;
        if d.pieces != 1 {
            return Err(BackendError::Invalid(format!("`{}`: a fragment row reduction needs units of whole rows", self.k.vars[v].name)));
        }
        let w = row_lanes(d.n);
        let groups = (w / 8) as usize; // a: the column blocks of 8 a partial class repeats over
        let per_slot = d.piece_n / 2;
        self.for_each_unit(d, &mut |cg, s, r0, c0, t| {
            // parts[h][2a + b]: the partials of the thread's row h (rows g and g + 8 of its warp's
            // 16), each from the identity.
            let init = cg.identity(op, cl);
            let mut parts = [vec![init; 2 * groups], vec![init; 2 * groups]];
            let mut rows = [None, None];
            for e in 0..per_slot {
                let (r, c) = fragment_coords(&*cg, t, e)?;
                let (r, c) = (cg.b.build_int_add(r0, r, "")?, cg.b.build_int_add(c0, c, "")?);
                let h = ((e >> 1) & 1) as usize;
                rows[h].get_or_insert(r);
                // Column 8j + 2q + b of the row: partial class a = j mod W/8.
                let slot = 2 * ((e >> 2) as usize % groups) + (e & 1) as usize;
                cg.frag_ctx = Some((d, s * per_slot + e));
                let y = cg.operand(x, r, c);
                cg.frag_ctx = None;
                let y = cg.convert(y?, inel, acc_elem)?;
                parts[h][slot] = cg.fold(op, cl, parts[h][slot], y)?;
            }
            let q = cg.b.build_and(t, cg.i32(3), "q")?;
            let first = cg.b.build_int_compare(IntPredicate::EQ, q, cg.i32(0), "")?;
            for (h, p) in parts.iter_mut().enumerate() {
                let r = rows[h].ok_or_else(|| BackendError::Invalid("a fragment without rows".into()))?;
                let y = cg.quad_butterfly(op, cl, p, w)?;
                let y = cg.convert(y, acc_elem, out)?;
                cg.if_then(first, &mut |cg| cg.store_elem(dst, r, out, y))?;
            }
            Ok(())
        })
    }

    /// The butterfly of the row-reduction order over one row's `w` partials, held as
    /// `p[2a + b]` by the four threads of a quad (see the module docs); every lane of the quad
    /// ends with the row's result.
    fn quad_butterfly(&mut self, op: crate::ir::ReduceOp, cl: Class, p: &mut [BasicValueEnum<'ctx>], w: u32) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let (shfl, ty) = if cl == Class::Float { ("llvm.nvvm.shfl.sync.bfly.f32", self.ctx.f32_type().into()) } else { ("llvm.nvvm.shfl.sync.bfly.i32", self.ctx.i32_type().into()) };
        for s in butterfly(w) {
            match s {
                // a ⊕ s/8 in the same thread: keep the lower of each pair (both are equal).
                s if s >= 8 => {
                    let m = (s / 8) as usize;
                    for a in 0..m {
                        for b in 0..2 {
                            p[2 * a + b] = self.fold(op, cl, p[2 * a + b], p[2 * (a ^ m) + b])?;
                        }
                    }
                }
                // p ⊕ 4 is quad lane q ⊕ 2, p ⊕ 2 is q ⊕ 1 (lane bits 1 and 0).
                4 | 2 => {
                    for b in 0..2 {
                        let other = self.call(shfl, Some(ty), &[self.i32(-1).into(), p[b], self.i32((s / 2) as i32).into(), self.i32(0x1f).into()])?;
                        p[b] = self.fold(op, cl, p[b], other)?;
                    }
                }
                _ => p[0] = self.fold(op, cl, p[0], p[1])?,
            }
        }
        Ok(p[0])
    }
}
