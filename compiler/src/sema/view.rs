//! Views of on-chip tiles: reads `t[r0..+R, c0..+C]`, `t[i, :]`, `t[:, j]`, `t[i, j]` (and
//! `v[i]` / `v[r0..+R]` on a per-row `[R, 1]` or per-column `[1, C]` vector), and writes of a
//! block of a mutable variable, `x[r0..+R, c0..+C] = e;` (also `+=`, `-=`).
//!
//! Starts are i32 scalars (run-time values allowed), lengths constants. A point index keeps its
//! dimension with extent 1 (`t[i, :]` is `[1, C]`), and a view with two points is the scalar
//! element. A view must lie inside its tile: a constant start that cannot fit is E0304 here, a
//! run-time one stops the interpreter (E0601) and traps on the GPU — never a masked read.

use super::consts::{eval_const, eval_extent};
use super::target::MAX_TILE_EXTENT;
use super::KernelLowering;
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{Axis, BinOp, Elem, Op, Type, Value};
use crate::syntax::ast::{AssignOp, Expr, IndexExpr};

/// One resolved dimension of a view: first index, extent, whether it was a point.
#[derive(Copy, Clone)]
struct Dim {
    start: Value,
    len: u32,
    point: bool,
}

impl KernelLowering<'_> {
    /// Lowers the read `base[index]`.
    pub(super) fn view(&mut self, base: &Expr, index: &[IndexExpr], span: Span) -> Option<Value> {
        let v = self.expr(base)?;
        let t = self.ty(v);
        let Some(shape) = t.shape() else {
            self.error(Diagnostic::error(Code::BadIndex, format!("cannot index a scalar ({t})"), span, "not a tile").with_note("views select rows, columns, blocks or elements of a tile"));
            return None;
        };
        // The indices' starts are lowered once, here, in order: a tile among them makes the read
        // a gather.
        let mut pre = vec![];
        for ix in index {
            pre.push(match ix {
                IndexExpr::Point(e) | IndexExpr::Range { start: e, .. } => Some(self.expr(e)?),
                IndexExpr::Full(_) => None,
            });
        }
        if pre.iter().flatten().any(|&x| self.ty(x).shape().is_some()) {
            return self.gather(v, shape, index, &pre, span);
        }
        let (r, c) = self.view_dims_lowered(index, &pre, shape, "the tile", span)?;
        let ty = if r.point && c.point { Type::Scalar(t.elem()) } else { Type::tile(t.elem(), r.len, c.len) };
        self.b.set_span(span);
        Some(self.b.value(Op::Slice { src: v, row: r.start, col: c.start }, ty))
    }

    /// Lowers the gather `src[rows, cols]` (`Op::Gather`): each index an i32 tile, an i32 scalar
    /// or `:` (every row or column of `src`, as `row_index` / `col_index`), broadcast together
    /// to the result's shape; `pre` holds the point indices already lowered.
    fn gather(&mut self, src: Value, (rows, cols): (u32, u32), index: &[IndexExpr], pre: &[Option<Value>], span: Span) -> Option<Value> {
        let elem = self.ty(src).elem();
        let [ri, ci] = index else {
            self.error(
                Diagnostic::error(Code::BadIndex, format!("{} indices for a gather from a [{rows}, {cols}] tile", index.len()), span, "a tile index needs two indices")
                    .with_note("a gather takes a row and a column index, `t[rows, cols]`: e.g. `t[:, ib - d]` or `t[r, col_index(1, N)]`"),
            );
            return None;
        };
        let mut ix = [None, None];
        for (k, (e, axis)) in [(ri, Axis::Row), (ci, Axis::Col)].into_iter().enumerate() {
            ix[k] = Some(match e {
                IndexExpr::Full(s) => {
                    self.b.set_span(*s);
                    let ty = if axis == Axis::Row { Type::tile(Elem::I32, rows, 1) } else { Type::tile(Elem::I32, 1, cols) };
                    self.b.value(Op::Iota(axis), ty)
                }
                IndexExpr::Point(e) => {
                    // A constant index beside a tile index: refused here when it can never fit,
                    // as a view's constant start is.
                    let (extent, name) = if axis == Axis::Row { (rows, "row") } else { (cols, "column") };
                    if let Ok(i) = eval_const(e, self.consts) {
                        if i < 0 || i >= extent as i64 {
                            self.error(
                                Diagnostic::error(Code::BadIndex, format!("{name} {i} of the tile, which has {extent} {name}s"), e.span, "always outside the tile")
                                    .with_note(format!("help: a gather's constant index must lie in 0..={}", extent - 1)),
                            );
                            return None;
                        }
                    }
                    let x = match pre[k] {
                        Some(x) => x,
                        None => self.expr(e)?,
                    };
                    let t = self.ty(x);
                    if t.elem() != Elem::I32 {
                        self.error(Diagnostic::error(Code::BadIndex, format!("gather index of type {t}"), e.span, "gather indices are i32").with_note("convert with `i32(...)`, or build the index from `row_index` / `col_index`"));
                        return None;
                    }
                    x
                }
                IndexExpr::Range { span, .. } => {
                    self.error(
                        Diagnostic::error(Code::BadIndex, "a range beside a tile index", *span, "a range")
                            .with_note("help: write the range as an index tile, e.g. `c0 + col_index(1, LEN)` for `c0..+LEN`"),
                    );
                    return None;
                }
            });
        }
        let (r, c) = (ix[0]?, ix[1]?);
        let (tr, tc) = (self.ty(r), self.ty(c));
        let Ok(Some((gr, gc))) = crate::ir::broadcast(tr, tc) else {
            self.error(Diagnostic::error(Code::ShapeMismatch, format!("gather indices {tr} and {tc} do not broadcast together"), span, "index shapes").with_note("each dimension of the two index tiles must be equal, or 1 in one of them"));
            return None;
        };
        self.b.set_span(span);
        Some(self.b.value(Op::Gather { src, row: r, col: c }, Type::tile(elem, gr, gc)))
    }

    /// Resolves a view's indices against a `shape` tile (`what` names it in messages).
    fn view_dims(&mut self, index: &[IndexExpr], shape: (u32, u32), what: &str, span: Span) -> Option<(Dim, Dim)> {
        self.view_dims_lowered(index, &[None, None], shape, what, span)
    }

    /// [`Self::view_dims`] with the point indices in `pre` already lowered (`None`: lower here).
    fn view_dims_lowered(&mut self, index: &[IndexExpr], pre: &[Option<Value>], shape: (u32, u32), what: &str, span: Span) -> Option<(Dim, Dim)> {
        let (rows, cols) = shape;
        let at = |k: usize| pre.get(k).copied().flatten();
        match index {
            [ri, ci] => {
                let r = self.view_dim(ri, at(0), rows, "row", what);
                let c = self.view_dim(ci, at(1), cols, "column", what);
                Some((r?, c?))
            }
            // A vector takes one index along its long axis.
            [i] if cols == 1 && rows > 1 => Some((self.view_dim(i, at(0), rows, "row", what)?, self.zero_dim(span))),
            [i] if rows == 1 => Some((self.zero_dim(span), self.view_dim(i, at(0), cols, "column", what)?)),
            _ => {
                self.error(
                    Diagnostic::error(Code::BadIndex, format!("{} indices for a [{rows}, {cols}] tile", index.len()), span, "wrong number of indices")
                        .with_note("a tile takes two indices, `t[rows, cols]` (each a point `i`, a range `s..+LEN` or `:`); a [R, 1] or [1, C] vector may take one"),
                );
                None
            }
        }
    }

    fn zero_dim(&mut self, span: Span) -> Dim {
        self.b.set_span(span);
        Dim { start: self.b.iconst(0), len: 1, point: true }
    }

    /// One index of a view along a dimension of `extent` (`pre`: its start, lowered).
    fn view_dim(&mut self, ix: &IndexExpr, pre: Option<Value>, extent: u32, axis: &str, what: &str) -> Option<Dim> {
        let (start, len, point, span) = match ix {
            IndexExpr::Full(s) => {
                self.b.set_span(*s);
                return Some(Dim { start: self.b.iconst(0), len: extent, point: false });
            }
            IndexExpr::Point(e) => (e, 1, true, e.span),
            IndexExpr::Range { start, len, span } => {
                let l = eval_extent(len, self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok()?;
                (start, l, false, *span)
            }
        };
        if len > extent {
            self.error(Diagnostic::error(Code::BadIndex, format!("a view of {len} {axis}s of {what}, which has {extent}"), span, "longer than the tile"));
            return None;
        }
        if let Ok(s0) = eval_const(start, self.consts) {
            if s0 < 0 || s0 + len as i64 > extent as i64 {
                let shown = if point { format!("{axis} {s0}") } else { format!("{axis}s {s0}..+{len}") };
                self.error(
                    Diagnostic::error(Code::BadIndex, format!("{shown} of {what}, which has {extent} {axis}s"), span, "always outside the tile")
                        .with_note(format!("help: a view must lie inside its tile: starts 0..={}", extent - len)),
                );
                return None;
            }
        }
        let s = match pre {
            Some(s) => s,
            None => self.expr(start)?,
        };
        if self.ty(s) != Type::Scalar(Elem::I32) {
            let t = self.ty(s);
            let note = if t.shape().is_some() && t.elem() == Elem::I32 {
                "help: an i32 tile index gathers, in a read with two indices (`t[:, idx]`); a range's start and a written block's index are i32 scalars"
            } else {
                "view indices are i32 scalars; a read may also gather with i32 tile indices (`t[:, idx]`)"
            };
            self.error(Diagnostic::error(Code::BadIndex, format!("view index of type {t}"), start.span, "view indices are i32 scalars").with_note(note));
            return None;
        }
        Some(Dim { start: s, len, point })
    }

    /// Lowers `name[index] op value;`: a read-modify-write of the variable's block.
    pub(super) fn assign_view(&mut self, name: &crate::syntax::ast::Ident, index: &[IndexExpr], op: AssignOp, value: &Expr, span: Span) {
        let Some(var) = self.mutable_var(name) else { return };
        let vd = self.b.kernel.vars[var].clone();
        if self.scalar_vars.contains(&var) {
            self.error(Diagnostic::error(Code::BadIndex, format!("`{}` is a scalar", name.name), name.span, "cannot be indexed").with_label(vd.span, "declared here"));
            return;
        }
        if super::stmt::is_matmul(value) {
            self.error(
                Diagnostic::error(Code::BadSpace, "a matrix product cannot be written into a view", value.span, "matrix multiply")
                    .with_note("bind the product first (`let p: tmem = a @ b;`), then write the view from it"),
            );
            return;
        }
        let Some(shape) = vd.ty.shape() else { return };
        let what = format!("`{}`", name.name);
        let Some((r, c)) = self.view_dims(index, shape, &what, span) else { return };
        let Some(v) = self.expr(value) else { return };
        let t = self.ty(v);
        let block = (r.len, c.len);
        if !crate::ir::broadcasts_to(t, block) {
            self.error(
                Diagnostic::error(Code::ShapeMismatch, format!("assigning {t} to a [{}, {}] view of `{}`", block.0, block.1, name.name), value.span, "value shape")
                    .with_label(vd.span, "declared here"),
            );
            return;
        }
        let ve = vd.ty.elem();
        if (t.elem() == Elem::Bool) != (ve == Elem::Bool) || (t.elem() == Elem::I32) != (ve == Elem::I32) {
            self.error(
                Diagnostic::error(Code::TypeMismatch, format!("assigning {} to a view of {}", t.elem(), vd.ty), value.span, "mismatched element types")
                    .with_note(super::conversion_note(ve, t.elem())),
            );
            return;
        }
        if t.elem() == Elem::Bool && op != AssignOp::Set {
            self.error(Diagnostic::error(Code::TypeMismatch, "`+=` / `-=` on a bool view", value.span, "bool values do not add").with_note("use `x[..] = x[..] || e` instead"));
            return;
        }
        if !super::assignable(ve, t.elem()) {
            self.error(
                Diagnostic::error(Code::TypeMismatch, format!("expected {ve}, found {}", t.elem()), value.span, format!("this is {}", t.elem()))
                    .with_label(vd.span, "declared here")
                    .with_note(super::conversion_note(ve, t.elem())),
            );
            return;
        }
        self.b.set_span(span);
        let cur = self.b.value(Op::ReadVar(var), vd.ty);
        let v = match op {
            AssignOp::Set => v,
            AssignOp::Add | AssignOp::Sub => {
                let old = self.b.value(Op::Slice { src: cur, row: r.start, col: c.start }, Type::tile(ve, block.0, block.1));
                let re = if ve.is_float() { Elem::F32 } else { Elem::I32 };
                let o = if op == AssignOp::Add { BinOp::Add } else { BinOp::Sub };
                self.b.value(Op::Binary(o, old, v), Type::tile(re, block.0, block.1))
            }
        };
        let new = self.b.value(Op::Insert { base: cur, value: v, row: r.start, col: c.start, rows: block.0, cols: block.1 }, vd.ty);
        self.b.effect(Op::WriteVar(var, new));
    }
}
