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
//! A row is one thread quad's in one unit when units span whole rows (`Distribution::pieces ==
//! 1`). When the warpgroups split the columns into pieces, each piece holds every partial class
//! (`Distribution::row_reducible`: `W` divides the piece width; `passes::fuse` admits only
//! those), and the pieces are folded one after another, in column order, through a shared-memory
//! scratch of `m × W` partials ([`Codegen::fragment_reduce_rows`]).

use inkwell::values::{BasicValueEnum, IntValue};
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
        self.expect_settled(v)?;
        let (_, d) = self.fragment(v)?;
        if !d.row_reducible() {
            return Err(BackendError::Invalid(format!("`{}`: a fragment row reduction needs units of whole rows or of every partial class", self.k.vars[v].name)));
        }
        let w = row_lanes(d.n);
        let groups = (w / 8) as usize; // a: the column blocks of 8 a partial class repeats over
        let per_slot = d.piece_n / 2;
        // Column pieces (units that hold part of a row) are folded one after another, in column
        // order: the threads of piece j continue the partials piece j − 1 left in `scratch`
        // (row r's partial p at r·W + p), between barriers; the last piece's threads run the
        // butterfly. A thread's partial p of a piece folds the same classes as in every other
        // (W divides piece_n), so the order is the one-unit order's.
        let scratch = if d.pieces > 1 { Some(self.scratch_buf(i)?) } else { None };
        for piece in 0..d.pieces {
            if piece > 0 {
                self.bar_sync()?;
            }
            let last = piece + 1 == d.pieces;
            self.for_each_unit(d, &mut |cg, s, r0, c0, t| {
                let mut body = |cg: &mut Self| -> Result<(), BackendError> {
                    // The scratch index r·W + p of row r's partial p = 8a + 2q + b (slot 2a + b).
                    let at = |cg: &Self, r: IntValue<'ctx>, slot: usize| -> Result<IntValue<'ctx>, BackendError> {
                        let q = cg.b.build_and(t, cg.i32(3), "q")?;
                        let p = cg.b.build_int_add(cg.b.build_left_shift(q, cg.i32(1), "")?, cg.i32((8 * (slot / 2) + slot % 2) as i32), "p")?;
                        Ok(cg.b.build_int_add(cg.b.build_int_mul(r, cg.i32(w as i32), "")?, p, "")?)
                    };
                    // parts[h][2a + b]: the partials of the thread's row h (rows g and g + 8 of
                    // its warp's 16), from the identity or where the piece before left them.
                    let mut parts = [vec![cg.identity(op, cl); 2 * groups], vec![cg.identity(op, cl); 2 * groups]];
                    let mut rows = [None, None];
                    if let (Some(buf), true) = (scratch, piece > 0) {
                        let (g, _) = fragment_coords(&*cg, t, 0)?;
                        let g = cg.b.build_int_add(r0, g, "")?;
                        rows = [Some(g), Some(cg.b.build_int_add(g, cg.i32(8), "")?)];
                        for (h, p) in parts.iter_mut().enumerate() {
                            for (slot, x) in p.iter_mut().enumerate() {
                                let idx = at(cg, g, slot)?;
                                let idx = if h == 0 { idx } else { cg.b.build_int_add(idx, cg.i32((8 * w) as i32), "")? };
                                *x = cg.load_elem(buf, idx, acc_elem)?;
                            }
                        }
                    }
                    for e in 0..per_slot {
                        let (r, c) = fragment_coords(&*cg, t, e)?;
                        let (r, c) = (cg.b.build_int_add(r0, r, "")?, cg.b.build_int_add(c0, c, "")?);
                        let (h, slot) = partial_slot(e, groups);
                        rows[h].get_or_insert(r);
                        cg.frag_ctx = Some((d, s * per_slot + e));
                        let y = cg.operand(x, r, c);
                        cg.frag_ctx = None;
                        let y = cg.convert(y?, inel, acc_elem)?;
                        parts[h][slot] = cg.fold(op, cl, parts[h][slot], y)?;
                    }
                    let [Some(r_lo), Some(r_hi)] = rows else { return Err(BackendError::Invalid("a fragment without rows".into())) };
                    let rows = [r_lo, r_hi];
                    if let (Some(buf), false) = (scratch, last) {
                        for (h, p) in parts.iter().enumerate() {
                            let r = rows[h];
                            for (slot, &x) in p.iter().enumerate() {
                                let idx = at(cg, r, slot)?;
                                cg.store_elem(buf, idx, acc_elem, x)?;
                            }
                        }
                        return Ok(());
                    }
                    let q = cg.b.build_and(t, cg.i32(3), "q")?;
                    let first = cg.b.build_int_compare(IntPredicate::EQ, q, cg.i32(0), "")?;
                    for (h, p) in parts.iter_mut().enumerate() {
                        let r = rows[h];
                        let y = cg.quad_butterfly(op, cl, p, w)?;
                        let y = cg.convert(y, acc_elem, out)?;
                        cg.if_then(first, &mut |cg| cg.store_elem(dst, r, out, y))?;
                    }
                    Ok(())
                };
                if d.pieces == 1 {
                    return body(cg);
                }
                // This unit's piece is the one folded now (uniform per warpgroup).
                let mine = cg.b.build_int_compare(IntPredicate::EQ, c0, cg.i32((piece * d.piece_n) as i32), "piece")?;
                cg.if_then(mine, &mut body)
            })?;
        }
        Ok(())
    }

    /// The butterfly of the row-reduction order over one row's `w` partials, held as
    /// `p[2a + b]` by the four threads of a quad (see the module docs); every lane of the quad
    /// ends with the row's result.
    fn quad_butterfly(&mut self, op: crate::ir::ReduceOp, cl: Class, p: &mut [BasicValueEnum<'ctx>], w: u32) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let (shfl, ty) = if cl == Class::Float { ("llvm.nvvm.shfl.sync.bfly.f32", self.ctx.f32_type().into()) } else { ("llvm.nvvm.shfl.sync.bfly.i32", self.ctx.i32_type().into()) };
        for step in quad_steps(w) {
            match step {
                // a ⊕ m in the same thread: keep the lower of each pair (both are equal).
                QuadStep::InThread(m) => {
                    for a in 0..m {
                        for b in 0..2 {
                            p[2 * a + b] = self.fold(op, cl, p[2 * a + b], p[2 * (a ^ m) + b])?;
                        }
                    }
                }
                QuadStep::Shuffle(lanes) => {
                    for b in 0..2 {
                        let other = self.call(shfl, Some(ty), &[self.i32(-1).into(), p[b], self.i32(lanes as i32).into(), self.i32(0x1f).into()])?;
                        p[b] = self.fold(op, cl, p[b], other)?;
                    }
                }
                QuadStep::Pair => p[0] = self.fold(op, cl, p[0], p[1])?,
            }
        }
        Ok(p[0])
    }
}

/// Where element `e` of a thread's unit (register `e` of [`fragment_coords`]) is folded: its row
/// `h` (rows g and g + 8 of the warp's 16) and its partial slot `2a + b` — column `8j + 2q + b`
/// of the row is partial class `a = j mod groups` (`groups = W/8`).
pub(crate) fn partial_slot(e: u32, groups: usize) -> (usize, usize) {
    (((e >> 1) & 1) as usize, 2 * ((e >> 2) as usize % groups) + (e & 1) as usize)
}

/// One step of a row's butterfly as the quad of threads holding the row runs it (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuadStep {
    /// Partials `2a + b` and `2(a ⊕ m) + b` of one thread (steps s ≥ 8, m = s/8).
    InThread(usize),
    /// `shfl.sync.bfly` with this lane mask, on partials 0 and 1 (s = 4: quad lane q ⊕ 2, s = 2:
    /// q ⊕ 1).
    Shuffle(u32),
    /// Partials 0 and 1 of one thread (s = 1: b = 0 with b = 1).
    Pair,
}

/// The steps of the row-reduction butterfly over `w` partials ([`butterfly`]), as a quad runs
/// them.
pub(crate) fn quad_steps(w: u32) -> impl Iterator<Item = QuadStep> {
    butterfly(w).map(|s| match s {
        s if s >= 8 => QuadStep::InThread((s / 8) as usize),
        4 | 2 => QuadStep::Shuffle(s / 2),
        _ => QuadStep::Pair,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::layout::reduction::fold_row;
    use crate::layout::Eval;

    /// Fold trees, interned: a node is its two children sorted (the folds are commutative), so
    /// two evaluations are equal exactly when they fold the same elements in the same tree.
    #[derive(Default)]
    struct Trees(HashMap<(usize, usize), usize>);

    impl Trees {
        fn fold(&mut self, a: usize, b: usize) -> usize {
            let key = (a.min(b), a.max(b));
            let next = 1_000_000 + self.0.len();
            *self.0.entry(key).or_insert(next)
        }
    }

    /// Runs the fragment reduction of one row for the four lanes of the quad that holds it
    /// (lanes 4g..4g+3 of warp 0, on symbols: element of column c is `c + 1`, the identity 0)
    /// and returns each lane's result.
    /// With `pieces` > 1 the row's columns are split into pieces of `n / pieces`, folded one
    /// piece after another into the same partial slots (the scratch hand-over between them).
    fn quad_result(trees: &mut Trees, n: u32, pieces: u32, g: u32) -> [usize; 4] {
        let w = row_lanes(n);
        let groups = (w / 8) as usize;
        let piece_n = n / pieces;
        let mut parts: Vec<Vec<usize>> = (0..4).map(|_| vec![0; 2 * groups]).collect();
        for piece in 0..pieces {
            for q in 0..4 {
                let t = 4 * g + q;
                for e in 0..piece_n / 2 {
                    let (r, c) = fragment_coords(&Eval, t, e).unwrap_or_else(|x| match x {});
                    let (h, slot) = partial_slot(e, groups);
                    if h == 0 {
                        assert_eq!(r, g, "register {e} of lane {t} is not in row {g}");
                        let c = piece * piece_n + c;
                        parts[q as usize][slot] = trees.fold(parts[q as usize][slot], c as usize + 1);
                    }
                }
            }
        }
        for step in quad_steps(w) {
            let before = parts.clone();
            for q in 0..4usize {
                let p = &mut parts[q];
                match step {
                    QuadStep::InThread(m) => {
                        for a in 0..m {
                            for b in 0..2 {
                                p[2 * a + b] = trees.fold(p[2 * a + b], p[2 * (a ^ m) + b]);
                            }
                        }
                    }
                    QuadStep::Shuffle(lanes) => {
                        let other = &before[q ^ lanes as usize];
                        for b in 0..2 {
                            p[b] = trees.fold(p[b], other[b]);
                        }
                    }
                    QuadStep::Pair => p[0] = trees.fold(p[0], p[1]),
                }
            }
        }
        [parts[0][0], parts[1][0], parts[2][0], parts[3][0]]
    }

    /// The quad's fold is the row-reduction order of `fold_row` (the interpreter's) as a tree, on
    /// every lane, at every width a whole-row unit has: a wrong shuffle lane, slot or step fails.
    #[test]
    fn the_quad_butterfly_is_the_row_reduction_order() {
        for n in [8, 16, 24, 32, 64, 128, 256] {
            let mut trees = Trees::default();
            let cols: Vec<usize> = (1..=n as usize).collect();
            let want = fold_row(&cols, 0, |a, b| Ok::<_, ()>(trees.fold(a, b))).unwrap_or(usize::MAX);
            for g in [0, 5] {
                assert_eq!(quad_result(&mut trees, n, 1, g), [want; 4], "n = {n}, row {g}");
            }
        }
    }

    /// Units of column pieces (two or four warpgroups over a 64-row tile) fold the pieces in
    /// column order through the same slots: the row-reduction order again, for every
    /// distribution `row_reducible` admits; a piece narrower than the partial classes is refused.
    #[test]
    fn column_pieces_fold_in_the_row_reduction_order() {
        let mut checked = 0;
        for n in [16, 32, 64, 128, 256] {
            for wgs in [2, 4] {
                let Some(d) = crate::layout::wgmma::Distribution::new(64, n, wgs) else { continue };
                if d.pieces == 1 {
                    continue;
                }
                if !d.row_reducible() {
                    assert!(d.piece_n < row_lanes(n), "n = {n}, {wgs} warpgroups: refused though every piece holds every class");
                    continue;
                }
                let mut trees = Trees::default();
                let cols: Vec<usize> = (1..=n as usize).collect();
                let want = fold_row(&cols, 0, |a, b| Ok::<_, ()>(trees.fold(a, b))).unwrap_or(usize::MAX);
                for g in [0, 7] {
                    assert_eq!(quad_result(&mut trees, n, d.pieces, g), [want; 4], "n = {n}, {} pieces, row {g}", d.pieces);
                }
                checked += 1;
            }
        }
        assert!(checked >= 4, "only {checked} piece distributions checked");
    }
}
