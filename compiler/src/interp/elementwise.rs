//! Elementwise semantics: unary, binary, comparison, select and reductions.
//!
//! Rules (the numerics of tilec's GPU lowering, issue 3 part 4; MMA is in `mma.rs`):
//! * Float arithmetic: operands are widened to f32 (integers convert), the operation is done in
//!   f32 (IEEE, round to nearest even), and the result is rounded to the result's element type.
//!   So `bf16 * bf16 -> bf16` is one f32 multiply followed by one RNE rounding.
//! * Integer arithmetic is exact in i64 and must fit in i32 (`IntegerOverflow` otherwise);
//!   division truncates toward zero; division or remainder by zero is an error.
//! * `exp2` is the IR's sequence of f32 operations ([`crate::ir::exp2`]), the back ends' too;
//!   `exp` is `exp2(x * log2 e)` with both steps in f32, like the GPU lowering.
//! * Sums reduce sequentially from index 0 in f32.

use super::error::ExecError;
use super::value::{fit_i32, round_to, Val, S};
use crate::ir::exp2::exp2_f32;
use crate::ir::{Axis, BinOp, CmpOp, Elem, ReduceOp, Type, UnOp};

/// `f` over the f32 values of `a` (broadcast to `ty`), each result rounded to `ty`'s float
/// element type: the float case of [`unary`], one loop per operation so that the operation is
/// chosen once, not per element.
fn float_map(a: &Val, ty: Type, f: impl Fn(f32) -> f32) -> Result<Val, ExecError> {
    let e = ty.elem();
    if a.dims() == dims(ty) && ty.shape().is_some() {
        let data = a.data.iter().map(|x| Ok(S::F(round_to(e, f(x.as_f32()?))))).collect::<Result<Vec<_>, ExecError>>()?;
        return Ok(Val { elem: e, shape: ty.shape().map(|(r, c)| (r as usize, c as usize)), data });
    }
    let at = a.broadcaster(dims(ty))?;
    Val::build(ty, |r, c| Ok(S::F(round_to(e, f(at(r, c).as_f32()?)))))
}

/// `f` over pairs of f32 values of `a` and `b` (broadcast to `ty`), rounded to `ty`'s float
/// element type: the float case of [`binary`] (see [`float_map`]).
fn float_zip(a: &Val, b: &Val, ty: Type, f: impl Fn(f32, f32) -> f32) -> Result<Val, ExecError> {
    let e = ty.elem();
    let d = dims(ty);
    if a.dims() == d && b.dims() == d && ty.shape().is_some() {
        let data = a.data.iter().zip(&b.data).map(|(x, y)| Ok(S::F(round_to(e, f(x.as_f32()?, y.as_f32()?))))).collect::<Result<Vec<_>, ExecError>>()?;
        return Ok(Val { elem: e, shape: ty.shape().map(|(r, c)| (r as usize, c as usize)), data });
    }
    let (at, bt) = (a.broadcaster(d)?, b.broadcaster(d)?);
    Val::build(ty, |r, c| Ok(S::F(round_to(e, f(at(r, c).as_f32()?, bt(r, c).as_f32()?)))))
}

/// `op(a)` with result type `ty`.
pub fn unary(op: UnOp, a: &Val, ty: Type) -> Result<Val, ExecError> {
    if ty.elem().is_float() {
        match op {
            UnOp::Neg => return float_map(a, ty, |x| -x),
            UnOp::Abs => return float_map(a, ty, f32::abs),
            UnOp::Exp2 => return float_map(a, ty, exp2_f32),
            UnOp::Log2 => return float_map(a, ty, f32::log2),
            UnOp::Exp => return float_map(a, ty, |x| exp2_f32(x * std::f32::consts::LOG2_E)),
            UnOp::Sqrt => return float_map(a, ty, f32::sqrt),
            UnOp::Not => {}
        }
    }
    let at = a.broadcaster(dims(ty))?;
    let elem = ty.elem();
    Val::build(ty, |r, c| {
        let x = at(r, c);
        match (op, elem) {
            (UnOp::Not, _) => Ok(S::B(!x.as_bool()?)),
            (UnOp::Neg, Elem::I32) => Ok(S::I(fit_i32(-x.as_i64()?)?)),
            (UnOp::Abs, Elem::I32) => Ok(S::I(fit_i32(x.as_i64()?.abs())?)),
            (_, e) if e.is_float() => {
                let x = x.as_f32()?;
                let y = match op {
                    UnOp::Neg => -x,
                    UnOp::Abs => x.abs(),
                    UnOp::Exp2 => exp2_f32(x),
                    UnOp::Log2 => x.log2(),
                    UnOp::Exp => exp2_f32(x * std::f32::consts::LOG2_E),
                    UnOp::Sqrt => x.sqrt(),
                    UnOp::Not => unreachable!("handled above"),
                };
                Ok(S::F(round_to(e, y)))
            }
            (op, e) => Err(ExecError::Malformed(format!("{op:?} with result type {e}"))),
        }
    })
}

/// Float `%` ([`BinOp::Rem`]): `fma(−trunc(x / y), y, x)`, the quotient rounded to f32, and `x`
/// where `y` is ±inf — the back end's sequence, bit for bit (not C's exact `fmod`).
pub fn rem_f32(x: f32, y: f32) -> f32 {
    if y.is_infinite() {
        return x;
    }
    (-(x / y).trunc()).mul_add(y, x)
}

/// `op(a, b)` with broadcasting and result type `ty`.
pub fn binary(op: BinOp, a: &Val, b: &Val, ty: Type) -> Result<Val, ExecError> {
    if ty.elem().is_float() {
        match op {
            BinOp::Add => return float_zip(a, b, ty, |x, y| x + y),
            BinOp::Sub => return float_zip(a, b, ty, |x, y| x - y),
            BinOp::Mul => return float_zip(a, b, ty, |x, y| x * y),
            BinOp::Div => return float_zip(a, b, ty, |x, y| x / y),
            BinOp::Rem => return float_zip(a, b, ty, rem_f32),
            BinOp::Min => return float_zip(a, b, ty, minimum),
            BinOp::Max => return float_zip(a, b, ty, maximum),
            BinOp::FMin => return float_zip(a, b, ty, f32::min),
            BinOp::FMax => return float_zip(a, b, ty, f32::max),
            BinOp::Cdiv | BinOp::And | BinOp::Or => {}
        }
    }
    let (at, bt) = (a.broadcaster(dims(ty))?, b.broadcaster(dims(ty))?);
    let elem = ty.elem();
    Val::build(ty, |r, c| {
        let (x, y) = (at(r, c), bt(r, c));
        match elem {
            Elem::Bool => {
                let (x, y) = (x.as_bool()?, y.as_bool()?);
                match op {
                    BinOp::And => Ok(S::B(x && y)),
                    BinOp::Or => Ok(S::B(x || y)),
                    _ => Err(ExecError::Malformed(format!("{op:?} on predicates"))),
                }
            }
            Elem::I32 => int_binary(op, x.as_i64()?, y.as_i64()?).map(S::I),
            e => {
                let (x, y) = (x.as_f32()?, y.as_f32()?);
                let z = match op {
                    BinOp::Add => x + y,
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    BinOp::Div => x / y,
                    BinOp::Rem => rem_f32(x, y),
                    BinOp::Min => minimum(x, y),
                    BinOp::Max => maximum(x, y),
                    BinOp::FMin => x.min(y),
                    BinOp::FMax => x.max(y),
                    BinOp::Cdiv | BinOp::And | BinOp::Or => {
                        return Err(ExecError::Malformed(format!("{op:?} on floats")));
                    }
                };
                Ok(S::F(round_to(e, z)))
            }
        }
    })
}

/// IEEE 754-2019 `maximum`: NaN if either operand is NaN (the quiet NaN `max.NaN.f32` returns),
/// +0 above −0, else the larger.
pub fn maximum(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x == y {
        if x.is_sign_positive() { x } else { y }
    } else {
        x.max(y)
    }
}

/// IEEE 754-2019 `minimum`: NaN if either operand is NaN, −0 below +0, else the smaller.
pub fn minimum(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x == y {
        if x.is_sign_negative() { x } else { y }
    } else {
        x.min(y)
    }
}

fn int_binary(op: BinOp, x: i64, y: i64) -> Result<i64, ExecError> {
    let overflow = || ExecError::IntegerOverflow(format!("{op:?}({x}, {y})"));
    let z = match op {
        BinOp::Add => x.checked_add(y).ok_or_else(overflow)?,
        BinOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
        BinOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
        BinOp::Div | BinOp::Rem | BinOp::Cdiv if y == 0 => return Err(ExecError::DivisionByZero),
        BinOp::Div => x / y,
        BinOp::Rem => x % y,
        BinOp::Cdiv => crate::ir::int_cdiv(x, y),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And | BinOp::Or | BinOp::FMin | BinOp::FMax => return Err(ExecError::Malformed(format!("{op:?} on integers"))),
    };
    fit_i32(z)
}

/// `op(a, b)` with broadcasting; the result type `ty` is a predicate.
pub fn compare(op: CmpOp, a: &Val, b: &Val, ty: Type) -> Result<Val, ExecError> {
    let (at, bt) = (a.broadcaster(dims(ty))?, b.broadcaster(dims(ty))?);
    Val::build(ty.with_elem(Elem::Bool), |r, c| {
        let ord = match (at(r, c), bt(r, c)) {
            (S::I(x), S::I(y)) => x.partial_cmp(&y),
            (S::B(x), S::B(y)) => x.partial_cmp(&y),
            (x, y) => x.as_f32()?.partial_cmp(&y.as_f32()?),
        };
        use std::cmp::Ordering::*;
        // Comparisons with NaN are false except `!=`, as in IEEE 754 and PTX `setp`.
        Ok(S::B(match (op, ord) {
            (CmpOp::Ne, None) => true,
            (_, None) => false,
            (CmpOp::Eq, Some(o)) => o == Equal,
            (CmpOp::Ne, Some(o)) => o != Equal,
            (CmpOp::Lt, Some(o)) => o == Less,
            (CmpOp::Le, Some(o)) => o != Greater,
            (CmpOp::Gt, Some(o)) => o == Greater,
            (CmpOp::Ge, Some(o)) => o != Less,
        }))
    })
}

/// `select(cond, a, b)` with broadcasting, converting the chosen element to `ty`'s element.
pub fn select(cond: &Val, a: &Val, b: &Val, ty: Type) -> Result<Val, ExecError> {
    let d = dims(ty);
    let (ct, at, bt) = (cond.broadcaster(d)?, a.broadcaster(d)?, b.broadcaster(d)?);
    Val::build(ty, |r, c| if ct(r, c).as_bool()? { at(r, c) } else { bt(r, c) }.convert(ty.elem()))
}

/// Reduction of `a` along `axis` (`Row` gives `[R, 1]`, `Col` gives `[1, C]`) in f32 (exactly
/// in i64 for integers, each partial checked against the i32 range): a row in the order of
/// [`crate::layout::reduction`] (strided partials over up to 32 lanes, then a butterfly), a
/// column sequentially from row 0 — the orders the back ends use.
pub fn reduce(op: ReduceOp, axis: Axis, a: &Val, ty: Type) -> Result<Val, ExecError> {
    let (rows, cols) = a.dims();
    let (outer, inner) = match axis {
        Axis::Row => (rows, cols),
        Axis::Col => (cols, rows),
    };
    let want = match axis {
        Axis::Row => (rows, 1),
        Axis::Col => (1, cols),
    };
    if dims(ty) != want {
        return Err(ExecError::Malformed(format!("reduction of {} has result type {ty}", a.ty())));
    }
    let at = |o: usize, i: usize| match axis {
        Axis::Row => a.data[o * cols + i],
        Axis::Col => a.data[i * cols + o],
    };
    // A column folds sequentially; a row in the shared row-reduction order.
    fn fold_all<T: Copy>(axis: Axis, xs: &[T], init: T, mut f: impl FnMut(T, T) -> Result<T, ExecError>) -> Result<T, ExecError> {
        match axis {
            Axis::Row => crate::layout::reduction::fold_row(xs, init, f),
            Axis::Col => xs.iter().try_fold(init, |acc, &x| f(acc, x)),
        }
    }
    let mut out = Vec::with_capacity(outer);
    for o in 0..outer {
        let s = if a.elem == Elem::I32 {
            let xs = (0..inner).map(|i| at(o, i).as_i64()).collect::<Result<Vec<i64>, _>>()?;
            let init = match op {
                ReduceOp::Sum => 0,
                ReduceOp::Max => i64::MIN,
                ReduceOp::Min => i64::MAX,
            };
            S::I(fold_all(axis, &xs, init, |acc, x| match op {
                ReduceOp::Sum => fit_i32(acc + x),
                ReduceOp::Max => Ok(acc.max(x)),
                ReduceOp::Min => Ok(acc.min(x)),
            })?)
        } else {
            let xs = (0..inner).map(|i| at(o, i).as_f32()).collect::<Result<Vec<f32>, _>>()?;
            let init = match op {
                ReduceOp::Sum => 0.0f32,
                ReduceOp::Max => f32::NEG_INFINITY,
                ReduceOp::Min => f32::INFINITY,
            };
            S::F(fold_all(axis, &xs, init, |acc, x| {
                Ok(match op {
                    ReduceOp::Sum => acc + x,
                    ReduceOp::Max => maximum(acc, x),
                    ReduceOp::Min => minimum(acc, x),
                })
            })?)
        };
        out.push(s.convert(ty.elem())?);
    }
    Ok(Val { elem: ty.elem(), shape: ty.shape().map(|(r, c)| (r as usize, c as usize)), data: out })
}

/// Cumulative sum of `a` down each column: row `r` of the result is `Σ_{s ≤ r} a[s]`
/// (`Σ_{s ≥ r}` when `reverse`), folded one row at a time in that order in f32 (exactly for
/// i32, which must stay in range) — the order the back ends use.
pub fn scan(a: &Val, reverse: bool, ty: Type) -> Result<Val, ExecError> {
    let (rows, cols) = a.dims();
    if dims(ty) != (rows, cols) {
        return Err(ExecError::Malformed(format!("scan of {} has result type {ty}", a.ty())));
    }
    let mut out = vec![S::I(0); rows * cols];
    let order: Vec<usize> = if reverse { (0..rows).rev().collect() } else { (0..rows).collect() };
    for c in 0..cols {
        if a.elem == Elem::I32 {
            let mut acc = 0i64;
            for &r in &order {
                acc = fit_i32(acc + a.data[r * cols + c].as_i64()?)?;
                out[r * cols + c] = S::I(acc).convert(ty.elem())?;
            }
        } else {
            let mut acc = 0.0f32;
            for &r in &order {
                acc += a.data[r * cols + c].as_f32()?;
                out[r * cols + c] = S::F(acc).convert(ty.elem())?;
            }
        }
    }
    Ok(Val { elem: ty.elem(), shape: ty.shape().map(|(r, c)| (r as usize, c as usize)), data: out })
}

/// `(rows, cols)` of a type, scalars as `1 x 1`.
pub fn dims(ty: Type) -> (usize, usize) {
    ty.shape().map(|(r, c)| (r as usize, c as usize)).unwrap_or((1, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(elem: Elem, rows: usize, cols: usize, v: &[f32]) -> Val {
        Val { elem, shape: Some((rows, cols)), data: v.iter().map(|&x| S::F(x)).collect() }
    }

    #[test]
    fn float_ops_round_to_result_type() {
        let a = tile(Elem::Bf16, 1, 1, &[1.0]);
        let b = tile(Elem::Bf16, 1, 1, &[2f32.powi(-8)]);
        // 1 + 2^-8 in f32 is exact, then RNE to bf16 gives 1.0.
        let r = binary(BinOp::Add, &a, &b, Type::tile(Elem::Bf16, 1, 1)).unwrap();
        assert_eq!(r.data, vec![S::F(1.0)]);
        let r = binary(BinOp::Add, &a, &b, Type::tile(Elem::F32, 1, 1)).unwrap();
        assert_eq!(r.data, vec![S::F(1.0 + 2f32.powi(-8))]);
    }

    #[test]
    fn integer_ops_are_checked() {
        let i = |x| Val::scalar(Elem::I32, S::I(x));
        let t = Type::Scalar(Elem::I32);
        assert_eq!(binary(BinOp::Cdiv, &i(100), &i(32), t).unwrap().data, vec![S::I(4)]);
        assert_eq!(binary(BinOp::Cdiv, &i(96), &i(32), t).unwrap().data, vec![S::I(3)]);
        assert_eq!(binary(BinOp::Cdiv, &i(-5), &i(2), t).unwrap().data, vec![S::I(-2)]);
        assert_eq!(binary(BinOp::Div, &i(7), &i(0), t), Err(ExecError::DivisionByZero));
        assert_eq!(binary(BinOp::Rem, &i(7), &i(0), t), Err(ExecError::DivisionByZero));
        assert!(matches!(binary(BinOp::Mul, &i(1 << 20), &i(1 << 20), t), Err(ExecError::IntegerOverflow(_))));
    }

    #[test]
    fn reductions_and_compare() {
        let a = tile(Elem::F32, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let r = reduce(ReduceOp::Sum, Axis::Row, &a, Type::tile(Elem::F32, 2, 1)).unwrap();
        assert_eq!(r.data, vec![S::F(6.0), S::F(15.0)]);
        let c = reduce(ReduceOp::Max, Axis::Col, &a, Type::tile(Elem::F32, 1, 3)).unwrap();
        assert_eq!(c.data, vec![S::F(4.0), S::F(5.0), S::F(6.0)]);
        assert!(reduce(ReduceOp::Sum, Axis::Row, &a, Type::tile(Elem::F32, 1, 3)).is_err());
        let n = tile(Elem::F32, 1, 1, &[f32::NAN]);
        let t = Type::tile(Elem::Bool, 1, 1);
        assert_eq!(compare(CmpOp::Ne, &n, &n, t).unwrap().data, vec![S::B(true)]);
        assert_eq!(compare(CmpOp::Le, &n, &n, t).unwrap().data, vec![S::B(false)]);
    }

    #[test]
    fn float_remainder_is_the_gpus_truncated_quotient_sequence() {
        // 7 / 0.1f rounds to 70.0 (the exact quotient is 69.9999989...): the remainder is
        // 7 − 70·0.1f, computed exactly and rounded once (the FMA), a small negative number —
        // where C's fmod gives 0.0999999. The f64 product and difference are exact here (24-bit
        // by 7-bit operands), so one rounding to f32 is the FMA's.
        let y = 0.1f32;
        let want = (7.0f64 - 70.0 * f64::from(y)) as f32;
        assert!(want < 0.0 && (want + 1.043e-7).abs() < 1e-10, "{want}");
        assert_eq!(rem_f32(7.0, y).to_bits(), want.to_bits());
        assert!(7.0f32 % y > 0.099, "fmod differs: {}", 7.0f32 % y);
        // ±inf divisors give x; a zero divisor or an infinite dividend NaN; exact cases as fmod.
        assert_eq!(rem_f32(-3.5, f32::INFINITY), -3.5);
        assert_eq!(rem_f32(2.5, f32::NEG_INFINITY), 2.5);
        assert!(rem_f32(1.0, 0.0).is_nan() && rem_f32(f32::INFINITY, 2.0).is_nan());
        assert_eq!((rem_f32(7.25, -4.0), rem_f32(-7.25, 4.0), rem_f32(5.0, 2.5)), (3.25, -3.25, 0.0));
    }

    #[test]
    fn every_float_op_on_matching_and_broadcast_shapes() {
        // Asymmetric operands (x − y ≠ y − x, x / y ≠ y / x, ...), the same result whether the
        // shapes match (one loop over the data) or a row and a column broadcast to 2 x 2 (the
        // broadcasting path), and each element what the f32 operation gives, rounded to bf16.
        let (xs, ys) = ([3.0f32, -0.5, 7.25, 0.0], [2.0f32, 1.5, -4.0, -0.0]);
        let ty = Type::tile(Elem::Bf16, 2, 2);
        let want_of = |f: &dyn Fn(f32, f32) -> f32| -> Vec<u32> { xs.iter().zip(&ys).map(|(&x, &y)| round_to(Elem::Bf16, f(x, y)).to_bits()).collect() };
        let bits = |v: Val| -> Vec<u32> { v.data.iter().map(|s| s.as_f32().unwrap().to_bits()).collect() };
        let ops: [(BinOp, &dyn Fn(f32, f32) -> f32); 9] = [
            (BinOp::Add, &|x, y| x + y),
            (BinOp::Sub, &|x, y| x - y),
            (BinOp::Mul, &|x, y| x * y),
            (BinOp::Div, &|x, y| x / y),
            (BinOp::Rem, &rem_f32),
            (BinOp::Min, &minimum),
            (BinOp::Max, &maximum),
            (BinOp::FMin, &f32::min),
            (BinOp::FMax, &f32::max),
        ];
        for (op, f) in ops {
            let want = want_of(f);
            let same = binary(op, &tile(Elem::F32, 2, 2, &xs), &tile(Elem::F32, 2, 2, &ys), ty).unwrap();
            assert_eq!(bits(same), want, "{op:?}, matching shapes");
            // x as a [2, 1] column, y as a [1, 2] row: element (r, c) is op(x[r], y[c]).
            let (xc, yr) = (tile(Elem::F32, 2, 1, &[xs[0], xs[2]]), tile(Elem::F32, 1, 2, &[ys[0], ys[1]]));
            let cross: Vec<u32> = [(0, 0), (0, 1), (2, 0), (2, 1)].iter().map(|&(i, j)| round_to(Elem::Bf16, f(xs[i], ys[j])).to_bits()).collect();
            assert_eq!(bits(binary(op, &xc, &yr, ty).unwrap()), cross, "{op:?}, broadcast");
        }
        let uops: [(UnOp, &dyn Fn(f32) -> f32); 6] =
            [(UnOp::Neg, &|x| -x), (UnOp::Abs, &f32::abs), (UnOp::Exp2, &exp2_f32), (UnOp::Log2, &f32::log2), (UnOp::Exp, &|x| exp2_f32(x * std::f32::consts::LOG2_E)), (UnOp::Sqrt, &f32::sqrt)];
        for (op, f) in uops {
            let want: Vec<u32> = xs.iter().map(|&x| round_to(Elem::Bf16, f(x)).to_bits()).collect();
            assert_eq!(bits(unary(op, &tile(Elem::F32, 2, 2, &xs), ty).unwrap()), want, "{op:?}, matching shapes");
            let s = unary(op, &Val::scalar(Elem::F32, S::F(xs[2])), ty).unwrap();
            assert_eq!(bits(s), vec![round_to(Elem::Bf16, f(xs[2])).to_bits(); 4], "{op:?}, a scalar broadcast");
        }
    }

    #[test]
    fn exp_is_exp2_of_scaled_input() {
        let x = tile(Elem::F32, 1, 1, &[0.7]);
        let r = unary(UnOp::Exp, &x, Type::tile(Elem::F32, 1, 1)).unwrap();
        assert_eq!(r.data, vec![S::F(exp2_f32(0.7f32 * std::f32::consts::LOG2_E))]);
        assert!((r.data[0].to_f64() - 0.7f64.exp()).abs() < 1e-6);
    }
}
