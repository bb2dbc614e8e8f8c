//! Expressions: names, literals, arithmetic with broadcasting, builtins, loads.
//!
//! Type rules (docs/language.md, "Types"): integer arithmetic is i32; any arithmetic on float
//! operands is computed and returned in f32 (bf16/f16 values are widened exactly); an integer
//! *literal* next to a float operand is read as a float; other i32/float mixes need `f32(..)`.
//! Comparisons give `bool`. Narrowing to bf16/f16 happens only at `bf16(..)`/`f16(..)` and at
//! stores, always rounding to nearest even.

use super::consts::{eval_const, eval_extent, fold_binary};
use super::target::MAX_TILE_EXTENT;
use super::{Binding, KernelLowering};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{self, broadcast, Axis, Elem, Index, Op, ParamKind, ReduceOp, TriMask, Type, UnOp, Value};
use crate::syntax::ast::{self, BinOp, Expr, ExprKind, IndexExpr};

impl KernelLowering<'_> {
    pub(super) fn ty(&self, v: Value) -> Type {
        self.b.kernel.value_type(v)
    }

    /// Lowers an expression; `None` after an error (already reported).
    pub(super) fn expr(&mut self, e: &Expr) -> Option<Value> {
        self.b.set_span(e.span);
        match &e.kind {
            ExprKind::Error => {
                self.saw_parse_error = true; // already reported by the parser
                None
            }
            ExprKind::Int(s) => match s.parse::<i64>().ok().filter(|v| *v <= i32::MAX as i64) {
                Some(v) => Some(self.b.iconst(v)),
                None => {
                    self.error(Diagnostic::error(Code::LexBadNumber, format!("integer literal `{s}` is out of range"), e.span, "must fit in i32"));
                    None
                }
            },
            ExprKind::Float(s) if s == "inf" => Some(self.b.fconst(f64::INFINITY)),
            ExprKind::Float(s) => match s.parse::<f64>().ok().filter(|v| v.is_finite() && v.abs() <= f32::MAX as f64) {
                Some(v) => Some(self.b.fconst(v)),
                None => {
                    self.error(Diagnostic::error(Code::LexBadNumber, format!("float literal `{s}` is out of range for f32"), e.span, "here"));
                    None
                }
            },
            ExprKind::Name(n) => self.name(n, e.span),
            ExprKind::Unary(op, a) => {
                let v = self.expr(a)?;
                let t = self.ty(v);
                self.b.set_span(e.span);
                match op {
                    ast::UnOp::Neg if t.elem() == Elem::Bool => self.type_err(e.span, "cannot negate a bool"),
                    ast::UnOp::Neg => {
                        let rt = if t.elem().is_float() { t.with_elem(Elem::F32) } else { t };
                        Some(self.b.value(Op::Unary(UnOp::Neg, v), rt))
                    }
                    ast::UnOp::Not if t.elem() != Elem::Bool => self.type_err(e.span, "`!` needs a bool operand"),
                    ast::UnOp::Not => Some(self.b.value(Op::Unary(UnOp::Not, v), t)),
                }
            }
            ExprKind::Binary(BinOp::MatMul, _, _) => {
                self.error(
                    Diagnostic::error(Code::BadSpace, "a matrix multiply must be the whole right-hand side of `let`, `=`, `+=` or `-=`", e.span, "nested matrix multiply")
                        .with_note("bind the product first: `let p: tmem = a @ b;`"),
                );
                None
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, e.span),
            ExprKind::Call(f, args) => self.call(f, args, e.span),
            ExprKind::Field(a, f) => {
                if f.name != "T" {
                    self.error(Diagnostic::error(Code::UnknownFunction, format!("unknown field `.{}`", f.name), f.span, "only `.T` (transpose) exists"));
                    return None;
                }
                let v = self.expr(a)?;
                let t = self.ty(v);
                let Some((r, c)) = t.shape() else {
                    return self.type_err(e.span, "`.T` needs a tile, not a scalar");
                };
                self.b.set_span(e.span);
                Some(self.b.value(Op::Transpose(v), Type::tile(t.elem(), c, r)))
            }
            ExprKind::Load(t, index) => self.load(t, index, e.span),
            ExprKind::Index(a, index) => self.view(a, index, e.span),
        }
    }

    fn type_err(&mut self, span: Span, msg: &str) -> Option<Value> {
        self.error(Diagnostic::error(Code::TypeMismatch, msg.to_string(), span, "here"));
        None
    }

    fn name(&mut self, n: &str, span: Span) -> Option<Value> {
        let Some((binding, _)) = self.lookup(n).cloned() else {
            let names: Vec<String> = self.scopes.iter().flat_map(|s| s.keys().cloned()).collect();
            let d = did_you_mean(Diagnostic::error(Code::UndefinedName, format!("cannot find `{n}` in this scope"), span, "not defined"), n, names.iter().map(String::as_str));
            self.error(d);
            return None;
        };
        Some(match binding {
            Binding::Const(c) => self.b.iconst(c),
            Binding::Size(i) => self.b.value(Op::Size(i), Type::Scalar(Elem::I32)),
            Binding::Scalar(p) => {
                let ParamKind::Scalar(e) = self.b.kernel.params[p].kind else { unreachable!("scalar binding of a tensor") };
                self.b.value(Op::ScalarParam(p), Type::Scalar(e))
            }
            Binding::Tensor(_) => {
                self.error(
                    Diagnostic::error(Code::WrongKind, format!("tensor `{n}` used as a value"), span, "a global tensor")
                        .with_note(format!("read a tile with `load {n}[...]`")),
                );
                return None;
            }
            Binding::Poisoned => return None,
            Binding::Value(v) => v,
            Binding::Var(var, _) => {
                let ty = self.b.kernel.vars[var].ty;
                let tile = self.b.value(Op::ReadVar(var), ty);
                if !self.scalar_vars.contains(&var) {
                    return Some(tile);
                }
                let z = self.b.iconst(0);
                self.b.value(Op::Slice { src: tile, row: z, col: z }, Type::Scalar(ty.elem()))
            }
        })
    }

    /// Unifies int/float operands: an integer literal next to a float becomes a float constant.
    fn unify(&mut self, a: Value, b: Value, ea: &Expr, eb: &Expr, span: Span) -> Option<(Value, Value)> {
        let (ta, tb) = (self.ty(a).elem(), self.ty(b).elem());
        if ta.is_float() == tb.is_float() && (ta == Elem::Bool) == (tb == Elem::Bool) {
            return Some((a, b));
        }
        let lit = |e: &Expr| match &e.kind {
            ExprKind::Int(s) => s.parse::<f64>().ok(),
            ExprKind::Unary(ast::UnOp::Neg, x) => match &x.kind {
                ExprKind::Int(s) => s.parse::<f64>().ok().map(|v| -v),
                _ => None,
            },
            _ => None,
        };
        self.b.set_span(span);
        if ta == Elem::I32 && tb.is_float() {
            if let Some(c) = lit(ea) {
                return Some((self.b.fconst(c), b));
            }
        }
        if tb == Elem::I32 && ta.is_float() {
            if let Some(c) = lit(eb) {
                return Some((a, self.b.fconst(c)));
            }
        }
        self.error(
            Diagnostic::error(Code::TypeMismatch, format!("mismatched element types {ta} and {tb}"), span, "operands differ")
                .with_label(ea.span, format!("this is {ta}"))
                .with_label(eb.span, format!("this is {tb}"))
                .with_note("convert explicitly with f32(..) or i32(..)"),
        );
        None
    }

    fn broadcast_shape(&mut self, a: Value, b: Value, span: Span) -> Option<Option<(u32, u32)>> {
        let (ta, tb) = (self.ty(a), self.ty(b));
        match broadcast(ta, tb) {
            Ok(s) => Some(s),
            Err(()) => {
                self.error(
                    Diagnostic::error(Code::ShapeMismatch, format!("shapes {ta} and {tb} do not broadcast"), span, "incompatible tile shapes")
                        .with_note("a dimension broadcasts only when it is 1: per-row vectors are [R, 1], per-column vectors [1, C]"),
                );
                None
            }
        }
    }

    fn binary(&mut self, op: BinOp, ea: &Expr, eb: &Expr, span: Span) -> Option<Value> {
        let a = self.expr(ea);
        let b = self.expr(eb);
        let (a, b) = self.unify(a?, b?, ea, eb, span)?;
        let shape = self.broadcast_shape(a, b, span)?;
        let elem = self.ty(a).elem();
        let mk = |e: Elem| match shape {
            None => Type::Scalar(e),
            Some((r, c)) => Type::tile(e, r, c),
        };
        self.b.set_span(span);
        let cmp = |op| Some(ir::CmpOp::from(op));
        let (irop, res) = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                if elem == Elem::Bool {
                    return self.type_err(span, "arithmetic on bool");
                }
                if elem == Elem::I32 && matches!(op, BinOp::Div | BinOp::Rem) && eval_const(eb, self.consts) == Ok(0) {
                    self.error(
                        Diagnostic::error(Code::BadConst, "integer division by zero", eb.span, "this divisor is always 0")
                            .with_note("an i32 division by zero has no defined result on the GPU (the interpreter stops on it)"),
                    );
                    return None;
                }
                // i32 arithmetic on constants that leaves the i32 range: the GPU would wrap and the
                // interpreter would stop, so it is an error here (`const`s are i64 to the folder).
                if elem == Elem::I32 {
                    if let (Ok(x), Ok(y)) = (eval_const(ea, self.consts), eval_const(eb, self.consts)) {
                        let v = fold_binary(op, x, y);
                        if v.map_or(true, |v| i32::try_from(v).is_err()) {
                            let shown = v.map_or_else(|| "beyond i64".to_string(), |v| v.to_string());
                            self.error(
                                Diagnostic::error(Code::BadConst, format!("this i32 expression overflows: {x} {} {y} = {shown}", op.symbol()), span, "outside -2147483648..=2147483647")
                                    .with_note("note: i32 arithmetic wraps on the GPU and stops the interpreter; index arithmetic is i32"),
                            );
                            return None;
                        }
                    }
                }
                let o = match op {
                    BinOp::Add => ir::BinOp::Add,
                    BinOp::Sub => ir::BinOp::Sub,
                    BinOp::Mul => ir::BinOp::Mul,
                    BinOp::Div => ir::BinOp::Div,
                    _ => ir::BinOp::Rem,
                };
                (Op::Binary(o, a, b), mk(if elem.is_float() { Elem::F32 } else { elem }))
            }
            BinOp::And | BinOp::Or => {
                if elem != Elem::Bool {
                    return self.type_err(span, "`&&` and `||` need bool operands");
                }
                (Op::Binary(if op == BinOp::And { ir::BinOp::And } else { ir::BinOp::Or }, a, b), mk(Elem::Bool))
            }
            _ => {
                let c = cmp(op).flatten()?;
                (Op::Cmp(c, a, b), mk(Elem::Bool))
            }
        };
        Some(self.b.value(irop, res))
    }

    fn call(&mut self, f: &ast::Ident, args: &[Expr], span: Span) -> Option<Value> {
        let name = f.name.as_str();
        let arity = |n: usize, this: &mut Self| -> bool {
            if args.len() != n {
                this.error(Diagnostic::error(Code::BadArguments, format!("`{name}` takes {n} argument{}, found {}", if n == 1 { "" } else { "s" }, args.len()), span, "wrong number of arguments"));
                false
            } else {
                true
            }
        };
        match name {
            "program_id" => {
                if !arity(1, self) {
                    return None;
                }
                match eval_const(&args[0], self.consts) {
                    Ok(a) if (0..=2).contains(&a) && a as usize >= self.grid_rank => {
                        self.error(
                            Diagnostic::error(Code::BadArguments, format!("`program_id({a})` on a {}-D grid is always 0", self.grid_rank), args[0].span, "no such grid axis")
                                .with_note(format!("help: the grid has axes 0..{}; add a grid dimension (`grid(x, y, z)`) or use another axis", self.grid_rank)),
                        );
                        None
                    }
                    Ok(a @ 0..=2) => {
                        self.b.set_span(span);
                        Some(self.b.value(Op::ProgramId(a as u8), Type::Scalar(Elem::I32)))
                    }
                    _ => {
                        self.error(Diagnostic::error(Code::BadArguments, "`program_id` takes a constant axis 0, 1 or 2", args[0].span, "here"));
                        None
                    }
                }
            }
            "exp2" | "log2" | "exp" | "abs" | "sqrt" => {
                if !arity(1, self) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                let t = self.ty(v);
                if !t.elem().is_float() {
                    return self.type_err(args[0].span, &format!("`{name}` needs a float operand; convert with f32(..)"));
                }
                let u = match name {
                    "exp2" => UnOp::Exp2,
                    "log2" => UnOp::Log2,
                    "exp" => UnOp::Exp,
                    "abs" => UnOp::Abs,
                    _ => UnOp::Sqrt,
                };
                self.b.set_span(span);
                Some(self.b.value(Op::Unary(u, v), t.with_elem(Elem::F32)))
            }
            "min" | "max" | "fmin" | "fmax" | "cdiv" => {
                if !arity(2, self) {
                    return None;
                }
                let a = self.expr(&args[0]);
                let b = self.expr(&args[1]);
                let (a, b) = self.unify(a?, b?, &args[0], &args[1], span)?;
                let shape = self.broadcast_shape(a, b, span)?;
                let e = self.ty(a).elem();
                let float_only = matches!(name, "fmin" | "fmax");
                if e == Elem::Bool || (name == "cdiv" && e != Elem::I32) || (float_only && !e.is_float()) {
                    let need = match name {
                        "cdiv" => "i32",
                        "fmin" | "fmax" => "float",
                        _ => "numeric",
                    };
                    return self.type_err(span, &format!("`{name}` needs {need} operands"));
                }
                let re = if e.is_float() { Elem::F32 } else { e };
                let ty = shape.map(|(r, c)| Type::tile(re, r, c)).unwrap_or(Type::Scalar(re));
                let o = match name {
                    "min" => ir::BinOp::Min,
                    "max" => ir::BinOp::Max,
                    "fmin" => ir::BinOp::FMin,
                    "fmax" => ir::BinOp::FMax,
                    _ => ir::BinOp::Cdiv,
                };
                self.b.set_span(span);
                Some(self.b.value(Op::Binary(o, a, b), ty))
            }
            "select" => {
                if !arity(3, self) {
                    return None;
                }
                let c = self.expr(&args[0]);
                let a = self.expr(&args[1]);
                let b = self.expr(&args[2]);
                let (c, a, b) = (c?, a?, b?);
                if self.ty(c).elem() != Elem::Bool {
                    return self.type_err(args[0].span, "the condition of `select` must be bool");
                }
                let (a, b) = self.unify(a, b, &args[1], &args[2], span)?;
                let s1 = self.broadcast_shape(a, b, span)?;
                let probe = match s1 {
                    None => Type::Scalar(Elem::Bool),
                    Some((r, cc)) => Type::tile(Elem::Bool, r, cc),
                };
                let shape = match broadcast(self.ty(c), probe) {
                    Ok(s) => s,
                    Err(()) => {
                        let tc = self.ty(c);
                        self.error(Diagnostic::error(Code::ShapeMismatch, format!("condition {tc} does not broadcast with the values"), args[0].span, "incompatible shape"));
                        return None;
                    }
                };
                let e = self.ty(a).elem();
                let re = if e.is_float() { Elem::F32 } else { e };
                let ty = shape.map(|(r, cc)| Type::tile(re, r, cc)).unwrap_or(Type::Scalar(re));
                self.b.set_span(span);
                Some(self.b.value(Op::Select(c, a, b), ty))
            }
            "bf16" | "f16" | "f32" | "i32" => {
                if !arity(1, self) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                let to = Elem::from_name(name).unwrap_or_else(|| unreachable!("matched element names"));
                let t = self.ty(v);
                if t.elem() == Elem::Bool {
                    return self.type_err(args[0].span, "cannot convert a bool; use select(..)");
                }
                // To its own type, no instruction: `bf16(load x[...])` of a bf16 tensor stays a
                // plain load, which a pipeline copies with TMA.
                Some(self.convert(v, t.with_elem(to), span))
            }
            "zeros" | "strict_lower" | "lower" | "row_index" | "col_index" => {
                if !arity(2, self) {
                    return None;
                }
                let (r, c) = self.extents(&args[0], &args[1])?;
                self.b.set_span(span);
                Some(match name {
                    "zeros" => {
                        let z = self.b.fconst(0.0);
                        self.b.value(Op::Splat(z), Type::tile(Elem::F32, r, c))
                    }
                    "strict_lower" => self.b.value(Op::Mask(TriMask::StrictLower), Type::tile(Elem::Bool, r, c)),
                    "lower" => self.b.value(Op::Mask(TriMask::Lower), Type::tile(Elem::Bool, r, c)),
                    "row_index" => self.b.value(Op::Iota(Axis::Row), Type::tile(Elem::I32, r, c)),
                    _ => self.b.value(Op::Iota(Axis::Col), Type::tile(Elem::I32, r, c)),
                })
            }
            "full" => {
                if !arity(3, self) {
                    return None;
                }
                let (r, c) = self.extents(&args[0], &args[1])?;
                let v = self.expr(&args[2])?;
                let t = self.ty(v);
                if t.shape().is_some() {
                    return self.type_err(args[2].span, "`full` takes a scalar fill value");
                }
                let e = if t.elem().is_float() { Elem::F32 } else { t.elem() };
                self.b.set_span(span);
                Some(self.b.value(Op::Splat(v), Type::tile(e, r, c)))
            }
            "cumsum" | "rev_cumsum" => {
                if !arity(1, self) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                let t = self.ty(v);
                if t.shape().is_none() || t.elem() == Elem::Bool {
                    return self.type_err(args[0].span, &format!("`{name}` needs a numeric tile (it sums down each column)"));
                }
                let e = if t.elem().is_float() { Elem::F32 } else { t.elem() };
                self.b.set_span(span);
                Some(self.b.value(Op::Scan { src: v, reverse: name == "rev_cumsum" }, t.with_elem(e)))
            }
            "row_sum" | "col_sum" | "row_max" | "col_max" | "row_min" | "col_min" => {
                if !arity(1, self) {
                    return None;
                }
                let v = self.expr(&args[0])?;
                let t = self.ty(v);
                let Some((r, c)) = t.shape() else {
                    return self.type_err(args[0].span, &format!("`{name}` needs a tile"));
                };
                if t.elem() == Elem::Bool {
                    return self.type_err(args[0].span, "cannot reduce a bool tile");
                }
                let axis = if name.starts_with("row") { Axis::Row } else { Axis::Col };
                let op = match &name[4..] {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    _ => ReduceOp::Min,
                };
                let e = if t.elem().is_float() { Elem::F32 } else { t.elem() };
                let ty = if axis == Axis::Row { Type::tile(e, r, 1) } else { Type::tile(e, 1, c) };
                self.b.set_span(span);
                Some(self.b.value(Op::Reduce(op, axis, v), ty))
            }
            _ => {
                self.error(
                    did_you_mean(
                        Diagnostic::error(Code::UnknownFunction, format!("unknown function `{name}`"), f.span, "not a builtin"),
                        name,
                        BUILTINS.iter().copied(),
                    )
                    .with_note(format!("builtins: {}", BUILTINS.join(", "))),
                );
                None
            }
        }
    }

    /// A constant index or slice against a constant extent that can never be in bounds.
    /// Out-of-bounds elements read 0 and writes are skipped at run time, which is for partial
    /// tiles at dynamic edges, not for an index that never fits. Each constant is evaluated
    /// once, with checked arithmetic (a start near `i64::MAX` must not overflow).
    fn static_bounds(&self, ix: &IndexExpr, dim: &ir::SizeExpr, tensor: &str) -> Option<Diagnostic> {
        let n = dim.as_const()?;
        let dim_text = self.b.kernel.size_text(dim);
        match ix {
            IndexExpr::Point(e) => {
                // A constant outside i32 is the overflow that lowering reports (E0205).
                let c = eval_const(e, self.consts).ok().filter(|c| i32::try_from(*c).is_ok())?;
                (c < 0 || c >= n).then(|| {
                    Diagnostic::error(Code::BadIndex, format!("index {c} is outside dimension `{dim_text}` of `{tensor}` (extent {n})"), e.span, "always out of bounds")
                        .with_note(format!("help: valid indices are 0..{n}"))
                })
            }
            IndexExpr::Range { start, len, span } => {
                let l = eval_const(len, self.consts).ok()?;
                let what = if l > n {
                    format!("a slice of {l} is longer than dimension `{dim_text}` of `{tensor}` (extent {n})")
                } else {
                    let s0 = eval_const(start, self.consts).ok().filter(|c| i32::try_from(*c).is_ok())?;
                    if s0 >= 0 && s0.checked_add(l).is_some_and(|end| end <= n) {
                        return None;
                    }
                    format!("the slice {s0}..+{l} runs past dimension `{dim_text}` of `{tensor}` (extent {n})")
                };
                Some(
                    Diagnostic::error(Code::BadIndex, what, *span, "never fits")
                        .with_note("help: a constant slice must fit a constant dimension; only a tile over a run-time extent may run past it, into a tensor declared `edge(zeros)` (docs/language.md, \"What happens out of bounds\")"),
                )
            }
            IndexExpr::Full(_) => None,
        }
    }

    fn extents(&mut self, r: &Expr, c: &Expr) -> Option<(u32, u32)> {
        let r = eval_extent(r, self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok();
        let c = eval_extent(c, self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok();
        Some((r?, c?))
    }

    /// Lowers the indices of a tensor access; returns the IR indices and the tile shape.
    pub(super) fn indices(&mut self, tensor: &ast::Ident, index: &[IndexExpr], span: Span) -> Option<(ir::Param, Elem, bool, Vec<Index>, Option<(u32, u32)>)> {
        let p = match self.lookup(&tensor.name).cloned() {
            Some((Binding::Tensor(p), _)) => p,
            Some((Binding::Poisoned, _)) => return None,
            Some(_) => {
                self.error(Diagnostic::error(Code::WrongKind, format!("`{}` is not a tensor parameter", tensor.name), tensor.span, "not a tensor"));
                return None;
            }
            None => {
                self.error(Diagnostic::error(Code::UndefinedName, format!("cannot find tensor `{}`", tensor.name), tensor.span, "not defined"));
                return None;
            }
        };
        let ParamKind::Tensor { elem, shape, output } = self.b.kernel.params[p].kind.clone() else { unreachable!("tensor binding") };
        if index.len() != shape.len() {
            self.error(
                Diagnostic::error(Code::BadIndex, format!("`{}` has {} dimensions but {} indices are given", tensor.name, shape.len(), index.len()), span, "wrong number of indices")
                    .with_label(self.b.kernel.params[p].span, "declared here"),
            );
            return None;
        }
        let mut out = vec![];
        let mut extents = vec![];
        let mut ok = true;
        for (ix, dim) in index.iter().zip(&shape) {
            if let Some(d) = self.static_bounds(ix, dim, &tensor.name) {
                self.error(d);
                ok = false;
                continue;
            }
            match ix {
                IndexExpr::Point(e) => match self.expr(e) {
                    Some(v) if self.ty(v) == Type::Scalar(Elem::I32) => out.push(Index::Point(v)),
                    Some(v) => {
                        let t = self.ty(v);
                        self.error(Diagnostic::error(Code::BadIndex, format!("index of type {t}"), e.span, "indices are i32 scalars"));
                        ok = false;
                    }
                    None => ok = false,
                },
                IndexExpr::Range { start, len, span: rs } => {
                    let s = self.expr(start);
                    let l = eval_extent(len, self.consts, MAX_TILE_EXTENT).map_err(|d| self.error(d)).ok();
                    match (s, l) {
                        (Some(s), Some(l)) if self.ty(s) == Type::Scalar(Elem::I32) => {
                            out.push(Index::Range { start: s, len: l });
                            extents.push(l);
                        }
                        (Some(_), Some(_)) => {
                            self.error(Diagnostic::error(Code::BadIndex, "range start must be an i32 scalar", *rs, "here"));
                            ok = false;
                        }
                        _ => ok = false,
                    }
                }
                IndexExpr::Full(fs) => match dim.as_const() {
                    Some(n) if n > MAX_TILE_EXTENT => {
                        self.error(
                            Diagnostic::error(Code::BadTileShape, format!("`:` over dimension `{}` makes a tile extent of {n}, above the largest tile extent {MAX_TILE_EXTENT}", self.b.kernel.size_text(dim)), *fs, "too long for one tile")
                                .with_note(format!("help: loop over the dimension in slices: `j * B..+B` with a constant B ≤ {MAX_TILE_EXTENT}")),
                        );
                        ok = false;
                    }
                    Some(n) if n > 0 && n <= MAX_TILE_EXTENT => {
                        self.b.set_span(*fs);
                        let z = self.b.iconst(0);
                        out.push(Index::Range { start: z, len: n as u32 });
                        extents.push(n as u32);
                    }
                    _ => {
                        self.error(
                            Diagnostic::error(Code::BadTileShape, format!("`:` over dimension `{}`, which is not a compile-time constant", self.b.kernel.size_text(dim)), *fs, "whole-dimension index")
                                .with_note("use `start..+LEN` with a constant LEN, or declare the dimension with a `const`"),
                        );
                        ok = false;
                    }
                },
            }
        }
        if extents.len() > 2 {
            self.error(Diagnostic::error(Code::BadIndex, format!("{} ranged indices; a tile has at most 2 dimensions", extents.len()), span, "too many ranges"));
            return None;
        }
        if !ok {
            return None;
        }
        let shape = match extents.as_slice() {
            [] => None,
            [n] => Some((*n, 1)),
            [m, n, ..] => Some((*m, *n)),
        };
        Some((p, elem, output, out, shape))
    }

    fn load(&mut self, t: &ast::Ident, index: &[IndexExpr], span: Span) -> Option<Value> {
        let (p, elem, _, idx, shape) = self.indices(t, index, span)?;
        let ty = shape.map(|(r, c)| Type::tile(elem, r, c)).unwrap_or(Type::Scalar(elem));
        self.b.set_span(span);
        if self.zeroed.contains(&p) {
            // An input the instance declares all zeros: the element type's 0, no memory access.
            let z = if elem == Elem::I32 { self.b.iconst(0) } else { self.b.fconst(0.0) };
            let z = if matches!(elem, Elem::I32 | Elem::F32) { z } else { self.b.value(Op::Cast(z, elem), Type::Scalar(elem)) };
            return Some(if shape.is_some() { self.b.value(Op::Splat(z), ty) } else { z });
        }
        Some(self.b.value(Op::Load { src: p, index: idx }, ty))
    }
}

impl ir::CmpOp {
    fn from(op: BinOp) -> Option<ir::CmpOp> {
        Some(match op {
            BinOp::Eq => ir::CmpOp::Eq,
            BinOp::Ne => ir::CmpOp::Ne,
            BinOp::Lt => ir::CmpOp::Lt,
            BinOp::Le => ir::CmpOp::Le,
            BinOp::Gt => ir::CmpOp::Gt,
            BinOp::Ge => ir::CmpOp::Ge,
            _ => return None,
        })
    }
}

/// Every builtin function the language has (the E0306 note lists them).
pub(super) const BUILTINS: [&str; 30] = [
    "program_id", "exp2", "log2", "exp", "abs", "sqrt", "min", "max", "fmin", "fmax", "cdiv", "select", "bf16", "f16", "f32", "i32", "zeros", "full",
    "strict_lower", "lower", "row_index", "col_index", "row_sum", "col_sum", "row_max", "col_max", "row_min", "col_min", "cumsum", "rev_cumsum",
];

/// Adds "did you mean" for the closest of `candidates` to `wrong` (Damerau–Levenshtein distance
/// at most a third of the name's length, and at most 2), if there is one.
pub(super) fn did_you_mean<'a>(d: Diagnostic, wrong: &str, candidates: impl Iterator<Item = &'a str>) -> Diagnostic {
    let limit = (wrong.chars().count() / 3).clamp(1, 2);
    let best = candidates
        .filter(|c| *c != wrong)
        .map(|c| (strsim::damerau_levenshtein(wrong, c), c))
        .filter(|(dist, _)| *dist <= limit)
        .min_by_key(|&(dist, c)| (dist, c.to_string()));
    match best {
        Some((_, c)) => d.with_note(format!("help: did you mean `{c}`?")),
        None => d,
    }
}
