//! Statements: `let`, assignment (including matrix multiply-accumulate), `store`, `for`.
//!
//! Matrix multiplies are statement-level: `let d: tmem = a @ b;`, `d = a @ b;`, `d += a @ b;`,
//! `d -= a @ b;`. Operands name shared- or tensor-memory bindings, optionally transposed with
//! `.T`; the accumulator is a tensor-memory variable (register-resident on sm_90a).

use super::consts::eval_extent;
use super::target::{check_mma, MAX_TILE_EXTENT};
use super::{Binding, KernelLowering};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{Elem, MmaOperand, Op, Space, Type, Value, Var};
use crate::syntax::ast::{self, AssignOp, BinOp, Expr, ExprKind, SpaceKw, Stmt};

/// A recognised `a @ b` right-hand side.
struct MatMul<'e> {
    a: &'e Expr,
    b: &'e Expr,
    negate: bool,
}

/// Whether `e` is a matrix product (`a @ b` or its negation).
pub(super) fn is_matmul(e: &Expr) -> bool {
    as_matmul(e).is_some()
}

fn as_matmul(e: &Expr) -> Option<MatMul<'_>> {
    match &e.kind {
        ExprKind::Binary(BinOp::MatMul, a, b) => Some(MatMul { a, b, negate: false }),
        ExprKind::Unary(ast::UnOp::Neg, inner) => as_matmul(inner).map(|m| MatMul { negate: !m.negate, ..m }),
        _ => None,
    }
}

impl KernelLowering<'_> {
    pub(super) fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Error(_) => self.saw_parse_error = true,
            Stmt::Let { mutable, name, ann, value, span } => self.let_stmt(*mutable, name, ann.as_ref(), value, *span),
            Stmt::Assign { name, index, op, value, span } if !index.is_empty() => self.assign_view(name, index, *op, value, *span),
            Stmt::Assign { name, op, value, span, .. } => self.assign(name, *op, value, *span),
            Stmt::Store { tensor, index, value, mask, span } => {
                let idx = self.indices(tensor, index, *span);
                let v = self.expr(value);
                let ((p, elem, output, idx, shape), v) = match (idx, v) {
                    (Some(i), Some(v)) => (i, v),
                    _ => return,
                };
                if !output {
                    self.error(
                        Diagnostic::error(Code::WrongKind, format!("store to `{}`, which is not an `out` parameter", tensor.name), tensor.span, "read-only tensor")
                            .with_label(self.b.kernel.params[p].span, "declare it `out` to write it"),
                    );
                    return;
                }
                let vt = self.ty(v);
                if vt.shape().is_some() && vt.shape() != shape {
                    let want = shape.map(|(r, c)| format!("[{r}, {c}]")).unwrap_or_else(|| "a scalar".into());
                    self.error(Diagnostic::error(Code::ShapeMismatch, format!("storing {vt} into a tile of shape {want}"), value.span, "shape differs from the indexed tile"));
                    return;
                }
                if vt.elem() == Elem::Bool || (vt.elem() == Elem::I32) != (elem == Elem::I32) {
                    self.error(Diagnostic::error(Code::TypeMismatch, format!("storing {} into a {elem} tensor", vt.elem()), value.span, "convert explicitly"));
                    return;
                }
                // Scalars stored into a tile are broadcast.
                let v = match (vt.shape(), shape) {
                    (None, Some((r, c))) => {
                        self.b.set_span(value.span);
                        self.b.value(Op::Splat(v), Type::tile(vt.elem(), r, c))
                    }
                    _ => v,
                };
                let mask = match mask {
                    None => None,
                    Some(m) => match self.store_mask(m, shape) {
                        Some(m) => Some(m),
                        None => return,
                    },
                };
                self.b.set_span(*span);
                self.b.effect(Op::Store { dst: p, index: idx, value: v, mask });
            }
            Stmt::For { var, reverse, lo, hi, body, span } => {
                let l = self.expr(lo);
                let h = self.expr(hi);
                let (Some(l), Some(h)) = (l, h) else { return };
                for (v, e) in [(l, lo), (h, hi)] {
                    if self.ty(v) != Type::Scalar(Elem::I32) {
                        let t = self.ty(v);
                        self.error(Diagnostic::error(Code::TypeMismatch, format!("loop bound of type {t}"), e.span, "loop bounds are i32 scalars"));
                        return;
                    }
                }
                self.b.set_span(*span);
                let (_, iv, blk) = self.b.for_loop(l, h, *reverse);
                let outer = self.b.block();
                self.b.switch_to(blk);
                self.scopes.push(std::collections::HashMap::new());
                self.bind(var, Binding::Value(iv));
                self.block(body);
                self.scopes.pop();
                self.b.switch_to(outer);
            }
        }
    }

    fn space_of(ann: Option<&ast::TypeAnn>) -> Option<(Space, Span)> {
        ann.and_then(|a| a.space).map(|(s, sp)| {
            (
                match s {
                    SpaceKw::Reg => Space::Reg,
                    SpaceKw::Smem => Space::Smem,
                    SpaceKw::Tmem => Space::Tmem,
                },
                sp,
            )
        })
    }

    /// Checks a value's type against an annotation; returns the declared type.
    fn check_ann(&mut self, ann: Option<&ast::TypeAnn>, t: Type, value_span: Span) -> Option<Type> {
        let Some(ann) = ann else { return Some(t) };
        let mut ty = t;
        if let Some(e) = &ann.elem {
            let Some(elem) = Elem::from_name(&e.name) else {
                self.error(Diagnostic::error(Code::TypeMismatch, format!("unknown element type `{}`", e.name), e.span, "expected bf16, f16, f32, i32 or bool"));
                return None;
            };
            let widening = elem == Elem::F32 && matches!(t.elem(), Elem::Bf16 | Elem::F16);
            if elem != t.elem() && !widening {
                self.error(
                    Diagnostic::error(Code::TypeMismatch, format!("expected {elem}, found {}", t.elem()), value_span, format!("this is {}", t.elem()))
                        .with_label(e.span, "declared here")
                        .with_note(super::conversion_note(elem, t.elem())),
                );
                return None;
            }
            ty = t.with_elem(elem);
        }
        if let Some(shape) = &ann.shape {
            if shape.len() != 2 {
                self.error(Diagnostic::error(Code::BadTileShape, format!("a tile type has 2 dimensions, not {}", shape.len()), ann.span, "here"));
                return None;
            }
            let r = eval_extent(&shape[0], self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok()?;
            let c = eval_extent(&shape[1], self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok()?;
            if t.shape() != Some((r, c)) {
                self.error(
                    Diagnostic::error(Code::ShapeMismatch, format!("declared [{r}, {c}], but the value is {t}"), value_span, "value shape")
                        .with_label(ann.span, "declared here"),
                );
                return None;
            }
        }
        Some(ty)
    }

    fn let_stmt(&mut self, mutable: bool, name: &ast::Ident, ann: Option<&ast::TypeAnn>, value: &Expr, span: Span) {
        // Loads and matrix products that are never read have their own lints (W0502, W0501).
        self.lets.push((name.clone(), matches!(value.kind, ExprKind::Load(..)) || as_matmul(value).is_some()));
        self.let_inner(mutable, name, ann, value, span);
        // A failed definition still binds the name so that its uses report nothing further —
        // also when it failed silently because it used an already poisoned name (the error was
        // reported once, where that name was defined).
        let bound = self.scopes.last().is_some_and(|s| s.get(&name.name).is_some_and(|(_, sp)| *sp == name.span));
        if !bound {
            if let Some(scope) = self.scopes.last_mut() {
                scope.entry(name.name.clone()).or_insert((Binding::Poisoned, name.span));
            }
        }
    }

    fn let_inner(&mut self, mutable: bool, name: &ast::Ident, ann: Option<&ast::TypeAnn>, value: &Expr, span: Span) {
        let space = Self::space_of(ann);
        if let Some(mm) = as_matmul(value) {
            if let Some((s, sp)) = space {
                if s != Space::Tmem {
                    self.error(Diagnostic::error(Code::BadSpace, format!("a matrix multiply accumulates in tensor memory, not {s}"), sp, "declare it `tmem`"));
                    return;
                }
            }
            let Some((a, b, m, n)) = self.mma_operands(&mm, span) else { return };
            let ty = Type::tile(Elem::F32, m, n);
            let Some(ty) = self.check_ann(ann, ty, value.span) else { return };
            self.b.set_span(name.span);
            let var = self.b.var(&name.name, Space::Tmem, ty, name.span);
            self.b.set_span(span);
            self.b.effect(Op::Mma { dst: var, a, b, accumulate: false, negate: mm.negate });
            self.bind(name, Binding::Var(var, mutable));
            return;
        }
        let Some(v) = self.expr(value) else { return };
        let t = self.ty(v);
        let Some(ty) = self.check_ann(ann, t, value.span) else { return };
        let space = space.map(|s| s.0).or(if mutable { Some(Space::Reg) } else { None });
        match space {
            None => {
                let v = self.convert(v, ty, value.span);
                self.b.kernel.bindings.push((name.name.clone(), v));
                self.bind(name, Binding::Value(v));
            }
            Some(space) => {
                let Some((r, c)) = ty.shape() else {
                    if space != Space::Reg || !mutable {
                        self.error(Diagnostic::error(Code::BadSpace, format!("a scalar cannot live in {space}"), name.span, "only tiles have a memory space"));
                        return;
                    }
                    // A mutable scalar is a [1, 1] register variable; `name` reads it back as a
                    // scalar (an element view), assignments broadcast into it.
                    self.b.set_span(name.span);
                    let var = self.b.var(&name.name, Space::Reg, Type::tile(ty.elem(), 1, 1), name.span);
                    self.scalar_vars.insert(var);
                    self.b.set_span(span);
                    let one = self.b.value(Op::Splat(v), Type::tile(ty.elem(), 1, 1));
                    self.b.effect(Op::WriteVar(var, one));
                    self.bind(name, Binding::Var(var, mutable));
                    return;
                };
                if space == Space::Tmem && r != 64 && r != 128 {
                    self.error(
                        Diagnostic::error(Code::BadTmemBuffer, format!("a tensor-memory tile has {r} rows"), value.span, "must be 64 or 128 rows (TMEM lanes)")
                            .with_note("tensor memory has 128 lanes; a tile's row i lives in lane i (blackwell.md §1.1)"),
                    );
                    return;
                }
                self.b.set_span(name.span);
                let var = self.b.var(&name.name, space, Type::tile(ty.elem(), r, c), name.span);
                let v = self.convert(v, ty, value.span);
                self.b.set_span(span);
                self.b.effect(Op::WriteVar(var, v));
                self.bind(name, Binding::Var(var, mutable));
            }
        }
    }

    /// Lowers the mask of `store … where m;`: a bool that broadcasts to the stored `shape`.
    fn store_mask(&mut self, m: &Expr, shape: Option<(u32, u32)>) -> Option<Value> {
        let v = self.expr(m)?;
        let t = self.ty(v);
        if t.elem() != Elem::Bool {
            self.error(Diagnostic::error(Code::TypeMismatch, format!("a store mask of type {t}"), m.span, "must be bool").with_note("e.g. `where row_index(C, 1) + t0 < T`"));
            return None;
        }
        let (r, c) = shape.unwrap_or((1, 1));
        if !crate::ir::broadcasts_to(t, (r, c)) {
            self.error(Diagnostic::error(Code::ShapeMismatch, format!("a {t} mask for a [{r}, {c}] store"), m.span, "does not broadcast to the stored tile"));
            return None;
        }
        Some(v)
    }

    /// Converts `v` to `ty`'s element type: no instruction when it already has it (a bf16 value
    /// is a bf16 number), else a `Cast` (implicit conversions here are exact widenings; an
    /// explicit `bf16(x)` may round).
    pub(super) fn convert(&mut self, v: Value, ty: Type, span: Span) -> Value {
        let t = self.ty(v);
        if t.elem() == ty.elem() {
            return v;
        }
        self.b.set_span(span);
        self.b.value(Op::Cast(v, ty.elem()), t.with_elem(ty.elem()))
    }

    pub(super) fn mutable_var(&mut self, name: &ast::Ident) -> Option<Var> {
        match self.lookup(&name.name).cloned() {
            Some((Binding::Var(v, true), _)) => Some(v),
            Some((Binding::Poisoned, _)) => None,
            Some((Binding::Var(_, false), decl)) | Some((Binding::Value(_), decl)) => {
                self.error(
                    Diagnostic::error(Code::AssignImmutable, format!("cannot assign twice to immutable `{}`", name.name), name.span, "assignment here")
                        .with_label(decl, "declared without `mut`"),
                );
                None
            }
            Some(_) => {
                self.error(Diagnostic::error(Code::WrongKind, format!("`{}` cannot be assigned", name.name), name.span, "not a variable"));
                None
            }
            None => {
                self.error(Diagnostic::error(Code::UndefinedName, format!("cannot find `{}` in this scope", name.name), name.span, "not defined"));
                None
            }
        }
    }

    fn assign(&mut self, name: &ast::Ident, op: AssignOp, value: &Expr, span: Span) {
        let Some(var) = self.mutable_var(name) else { return };
        let vd = self.b.kernel.vars[var].clone();
        if let Some(mm) = as_matmul(value) {
            if vd.space != Space::Tmem {
                self.error(
                    Diagnostic::error(Code::BadSpace, format!("`{}` is in {}, but a matrix multiply accumulates in tensor memory", name.name, vd.space), name.span, "accumulator")
                        .with_label(vd.span, "declare it `tmem`"),
                );
                return;
            }
            let Some((a, b, m, n)) = self.mma_operands(&mm, span) else { return };
            if vd.ty != Type::tile(Elem::F32, m, n) {
                self.error(
                    Diagnostic::error(Code::ShapeMismatch, format!("product is f32[{m}, {n}] but `{}` is {}", name.name, vd.ty), value.span, "product")
                        .with_label(vd.span, "accumulator declared here"),
                );
                return;
            }
            let negate = mm.negate ^ (op == AssignOp::Sub);
            self.b.set_span(span);
            self.b.effect(Op::Mma { dst: var, a, b, accumulate: op != AssignOp::Set, negate });
            return;
        }
        let Some(v) = self.expr(value) else { return };
        let t = self.ty(v);
        let operand_elem = t.elem();
        let v = match op {
            AssignOp::Set => v,
            AssignOp::Add | AssignOp::Sub => {
                self.b.set_span(span);
                let cur = self.b.value(Op::ReadVar(var), vd.ty);
                let Ok(Some(shape)) = crate::ir::broadcast(vd.ty, t) else {
                    self.error(Diagnostic::error(Code::ShapeMismatch, format!("cannot add {t} to `{}` of type {}", name.name, vd.ty), value.span, "incompatible shape"));
                    return;
                };
                // The sum broadcasts both ways, but it is stored back into the variable: it may
                // not grow past the variable's own shape (as `=` would refuse it too).
                if Some(shape) != vd.ty.shape() {
                    let (r, c) = shape;
                    let sym = if op == AssignOp::Add { "+=" } else { "-=" };
                    self.error(
                        Diagnostic::error(Code::ShapeMismatch, format!("`{} {sym} …` would make a [{r}, {c}] tile, but `{}` is {}", name.name, name.name, vd.ty), value.span, format!("this is {t}"))
                            .with_label(vd.span, "declared here")
                            .with_note("help: reduce the value to the variable's shape first (e.g. `row_sum(...)` for a [R, 1] accumulator), or declare the variable with the full shape"),
                    );
                    return;
                }
                if (t.elem() == Elem::I32) != (vd.ty.elem() == Elem::I32) || t.elem() == Elem::Bool {
                    self.error(Diagnostic::error(Code::TypeMismatch, format!("cannot add {} to {}", t.elem(), vd.ty.elem()), value.span, "mismatched element types"));
                    return;
                }
                let re = if vd.ty.elem().is_float() { Elem::F32 } else { Elem::I32 };
                let o = if op == AssignOp::Add { crate::ir::BinOp::Add } else { crate::ir::BinOp::Sub };
                let (r, c) = vd.ty.shape().unwrap_or((1, 1));
                self.b.value(Op::Binary(o, cur, v), Type::tile(re, r, c))
            }
        };
        let t = self.ty(v);
        let v = if t.shape().is_none() {
            self.b.set_span(value.span);
            self.b.value(Op::Splat(v), vd.ty.with_elem(t.elem()))
        } else {
            v
        };
        let t = self.ty(v);
        if t.shape() != vd.ty.shape() {
            self.error(
                Diagnostic::error(Code::ShapeMismatch, format!("assigning {t} to `{}` of type {}", name.name, vd.ty), value.span, "value shape")
                    .with_label(vd.span, "declared here"),
            );
            return;
        }
        // `acc += y` on a bf16/f16 variable adds in f32 and rounds the sum back: allowed when the
        // operand already has the variable's type; an f32 operand needs an explicit bf16(...).
        if !super::assignable(vd.ty.elem(), operand_elem) {
            self.error(
                Diagnostic::error(Code::TypeMismatch, format!("expected {}, found {}", vd.ty.elem(), operand_elem), value.span, format!("this is {}", operand_elem))
                    .with_label(vd.span, "declared here")
                    .with_note(super::conversion_note(vd.ty.elem(), operand_elem)),
            );
            return;
        }
        let v = self.convert(v, vd.ty, value.span);
        self.b.set_span(span);
        self.b.effect(Op::WriteVar(var, v));
    }

    /// Resolves `a @ b` operands; returns them with the product's `M x N`.
    fn mma_operands(&mut self, mm: &MatMul<'_>, span: Span) -> Option<(MmaOperand, MmaOperand, u32, u32)> {
        let a = self.mma_operand(mm.a, "A");
        let b = self.mma_operand(mm.b, "B");
        let (a, b) = (a?, b?);
        let (av, bv) = (self.b.kernel.vars[a.var].clone(), self.b.kernel.vars[b.var].clone());
        let dims = |t: Type, tr: bool| {
            let (r, c) = t.shape().unwrap_or((0, 0));
            if tr {
                (c, r)
            } else {
                (r, c)
            }
        };
        let ((m, ka), (kb, n)) = (dims(av.ty, a.transposed), dims(bv.ty, b.transposed));
        if ka != kb {
            self.error(
                Diagnostic::error(Code::ShapeMismatch, format!("inner dimensions differ: A is {m}x{ka}, B is {kb}x{n}"), span, "in this matrix multiply")
                    .with_label(mm.a.span, format!("A: {m}x{ka}"))
                    .with_label(mm.b.span, format!("B: {kb}x{n}")),
            );
            return None;
        }
        if bv.space != Space::Smem {
            self.error(
                Diagnostic::error(Code::BadSpace, format!("the B operand must be in shared memory, not {}", bv.space), mm.b.span, "B operand")
                    .with_label(bv.span, "declared here")
                    .with_note("tcgen05.mma reads B through a shared-memory descriptor (blackwell.md §2.1)"),
            );
            return None;
        }
        if av.space == Space::Tmem && a.transposed {
            self.error(Diagnostic::error(Code::BadSpace, "an A operand in tensor memory cannot be transposed", mm.a.span, "transposed TMEM operand").with_note("A from TMEM must be K-major (blackwell.md §2.1)"));
            return None;
        }
        let problems = check_mma(m, n, ka, av.ty.elem(), bv.ty.elem(), Elem::F32);
        if !problems.is_empty() {
            // Name the real cause in the headline: operand types, or the shape.
            let (ae, be) = (av.ty.elem(), bv.ty.elem());
            let types_wrong = !matches!(ae, Elem::Bf16 | Elem::F16) || ae != be;
            let shape_wrong = !crate::sema::target::check_mma(m, n, ka, Elem::Bf16, Elem::Bf16, Elem::F32).is_empty();
            let headline = match (types_wrong, shape_wrong) {
                (true, false) => format!("illegal MMA operand types {ae} @ {be} (tensor cores take bf16 @ bf16 or f16 @ f16)"),
                (false, _) => format!("illegal MMA shape {m}x{n}x{ka} for sm_100a"),
                (true, true) => format!("illegal MMA shape {m}x{n}x{ka} and operand types {ae} @ {be}"),
            };
            let mut d = Diagnostic::error(Code::IllegalMmaShape, headline, span, "this matrix multiply");
            for p in problems {
                d = d.with_note(p);
            }
            self.error(d.with_note("legal (kind::f16, cta_group::1): M ∈ {64, 128}, N a multiple of 16 up to 256 per instruction (512 per tile), K a multiple of 16"));
            return None;
        }
        Some((a, b, m, n))
    }

    fn mma_operand(&mut self, e: &Expr, which: &str) -> Option<MmaOperand> {
        let (inner, transposed) = match &e.kind {
            ExprKind::Field(x, f) if f.name == "T" => (x.as_ref(), true),
            _ => (e, false),
        };
        let ExprKind::Name(n) = &inner.kind else {
            self.error(
                Diagnostic::error(Code::BadSpace, format!("the {which} operand of `@` must name a shared- or tensor-memory tile"), e.span, "not a binding")
                    .with_note("bind it first, e.g. `let ks: smem = load k[...];`"),
            );
            return None;
        };
        match self.lookup(n).cloned() {
            Some((Binding::Poisoned, _)) => None,
            Some((Binding::Var(v, _), _)) if self.b.kernel.vars[v].space != Space::Reg => Some(MmaOperand { var: v, transposed }),
            Some((Binding::Var(v, _), _)) => {
                let decl = self.b.kernel.vars[v].span;
                self.error(
                    Diagnostic::error(Code::BadSpace, format!("the {which} operand `{n}` is in registers"), e.span, "register tile")
                        .with_label(decl, "declare it `smem` (or `tmem` for A)"),
                );
                None
            }
            Some((Binding::Value(_), decl)) => {
                self.error(
                    Diagnostic::error(Code::BadSpace, format!("the {which} operand `{n}` is a register value"), e.span, "register value")
                        .with_label(decl, format!("declare it `let {n}: smem = ...`")),
                );
                None
            }
            Some(_) => {
                self.error(Diagnostic::error(Code::WrongKind, format!("`{n}` cannot be an MMA operand"), e.span, "not a tile binding"));
                None
            }
            None => {
                self.error(Diagnostic::error(Code::UndefinedName, format!("cannot find `{n}` in this scope"), inner.span, "not defined"));
                None
            }
        }
    }
}
