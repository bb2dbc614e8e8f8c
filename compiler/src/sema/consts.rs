//! Compile-time integer expressions: `const` items, tile extents, ranges, `threads(..)`, and
//! size expressions (over symbolic sizes) for parameter shapes and the launch grid.

use std::collections::HashMap;

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{SizeExpr, SizeOp, SizeVar};
use crate::syntax::ast::{BinOp, Expr, ExprKind, UnOp};

/// The size operator of an arithmetic binary operator, if it has one.
fn size_op(op: BinOp) -> Option<SizeOp> {
    Some(match op {
        BinOp::Add => SizeOp::Add,
        BinOp::Sub => SizeOp::Sub,
        BinOp::Mul => SizeOp::Mul,
        BinOp::Div => SizeOp::Div,
        BinOp::Rem => SizeOp::Rem,
        _ => return None,
    })
}

/// The size operator of a two-argument builtin (`cdiv`, `min`, `max`).
fn size_fn(name: &str) -> Option<SizeOp> {
    Some(match name {
        "cdiv" => SizeOp::Cdiv,
        "min" => SizeOp::Min,
        "max" => SizeOp::Max,
        _ => return None,
    })
}

/// Folds `x op y` with the ABI's arithmetic (what the runtime, the interpreter and `div.s32`
/// compute); `None` on division by zero or overflow.
fn fold(op: SizeOp, x: i64, y: i64) -> Option<i64> {
    tilec_abi::expr::apply(op, x, y).ok()
}

/// Folds the arithmetic `x op y` of two constants (`None`: not arithmetic, division by zero, or
/// outside i64).
pub(super) fn fold_binary(op: BinOp, x: i64, y: i64) -> Option<i64> {
    fold(size_op(op)?, x, y)
}

/// Evaluates a constant integer expression over `consts`.
///
/// # Errors
/// A diagnostic for names that are not constants, non-integer literals, division by zero and
/// overflow.
pub fn eval_const(e: &Expr, consts: &HashMap<String, i64>) -> Result<i64, Diagnostic> {
    let bad = |msg: String, label: &str| Diagnostic::error(Code::BadConst, msg, e.span, label);
    match &e.kind {
        ExprKind::Int(s) => s.parse::<i64>().ok().filter(|v| *v <= i32::MAX as i64).ok_or_else(|| {
            Diagnostic::error(Code::LexBadNumber, format!("integer literal `{s}` is out of range"), e.span, "must fit in i32")
        }),
        ExprKind::Name(n) => consts
            .get(n)
            .copied()
            .ok_or_else(|| bad(format!("`{n}` is not a compile-time constant"), "expected a `const` here")),
        ExprKind::Unary(UnOp::Neg, a) => eval_const(a, consts)?.checked_neg().ok_or_else(|| bad("constant overflows".into(), "here")),
        ExprKind::Binary(op, a, b) => {
            let sop = size_op(*op).ok_or_else(|| bad("operator not allowed in a constant expression".into(), "use + - * / % cdiv min max"))?;
            let (x, y) = (eval_const(a, consts)?, eval_const(b, consts)?);
            fold(sop, x, y).ok_or_else(|| bad("constant expression divides by zero or overflows".into(), "here"))
        }
        ExprKind::Call(f, args) if args.len() == 2 && size_fn(&f.name).is_some() => {
            let sop = size_fn(&f.name).unwrap_or_else(|| unreachable!("checked by the guard"));
            let (x, y) = (eval_const(&args[0], consts)?, eval_const(&args[1], consts)?);
            fold(sop, x, y).ok_or_else(|| bad("constant expression divides by zero or overflows".into(), "here"))
        }
        _ => Err(bad("expected a compile-time integer constant".into(), "not a constant expression")),
    }
}

/// Evaluates a constant that must be positive (a tile extent, a range length).
///
/// # Errors
/// As [`eval_const`], plus a diagnostic for values ≤ 0 or above `max`.
pub fn eval_extent(e: &Expr, consts: &HashMap<String, i64>, max: i64) -> Result<u32, Diagnostic> {
    let v = eval_const(e, consts).map_err(|mut d| {
        d.code = Code::BadTileShape;
        d.notes.push("tile extents must be compile-time constants".into());
        d
    })?;
    if v <= 0 || v > max {
        return Err(Diagnostic::error(
            Code::BadTileShape,
            format!("tile extent {v} is out of range"),
            e.span,
            format!("must be in 1..={max}"),
        ));
    }
    Ok(v as u32)
}

/// Converts a shape or grid expression to a [`SizeExpr`]: constants fold, other names must be
/// symbolic sizes (`size_of` gives a name's size, if it is one).
///
/// # Errors
/// A diagnostic naming the first unknown name or unsupported operator.
pub fn size_expr(e: &Expr, consts: &HashMap<String, i64>, size_of: &dyn Fn(&str) -> Option<SizeVar>) -> Result<SizeExpr, Diagnostic> {
    if let Ok(c) = eval_const(e, consts) {
        return Ok(SizeExpr::Const(c));
    }
    let bad = |msg: String, span: Span| Diagnostic::error(Code::BadConst, msg, span, "in this size expression");
    match &e.kind {
        ExprKind::Name(n) if size_of(n).is_some() => Ok(SizeExpr::Sym(size_of(n).unwrap_or_else(|| unreachable!("checked by the guard")))),
        ExprKind::Name(n) => Err(Diagnostic::error(Code::UndefinedName, format!("`{n}` is not a size or constant"), e.span, "unknown size")),
        ExprKind::Binary(op, a, b) => {
            let sop = size_op(*op).ok_or_else(|| bad("operator not allowed in a size expression".into(), e.span))?;
            Ok(SizeExpr::Bin(sop, Box::new(size_expr(a, consts, size_of)?), Box::new(size_expr(b, consts, size_of)?)))
        }
        ExprKind::Call(f, args) if args.len() == 2 && size_fn(&f.name).is_some() => {
            let sop = size_fn(&f.name).unwrap_or_else(|| unreachable!("checked by the guard"));
            Ok(SizeExpr::Bin(sop, Box::new(size_expr(&args[0], consts, size_of)?), Box::new(size_expr(&args[1], consts, size_of)?)))
        }
        _ => Err(bad("expected a size expression (sizes, constants, + - * / % cdiv min max)".into(), e.span)),
    }
}
