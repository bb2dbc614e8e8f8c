//! Value ranges of i32 index values: a closed interval that holds every value an i32 scalar or
//! every element of an i32 tile can take at run time, derived from constants, `row_index` /
//! `col_index` (their tile's extent), loop induction variables (their bounds) and the integer
//! operators over them. The back end uses it to drop the run-time test of a view or gather
//! index that lies inside its tile on every path ([`crate::backend`], view.rs): the key-row
//! loops' `sx[16 + blk + sj, :]` is inside `sx` for every row and step, so its test — a compare
//! and a branch per element and step — is proven once here instead.
//!
//! Sound by construction: each rule is the interval-arithmetic image of the operator (integer
//! division and remainder truncate, `BinOp::Div`/`Rem`; `cdiv` is the exact ceiling, as the
//! interpreter and the back end compute it), in i64. A result outside the i32 range has no
//! interval. A value without a rule — from memory, a parameter or a variable, or an operator the
//! rules do not cover — takes the whole i32 range (program ids and sizes from 0), which bounds
//! nothing but what `min`/`max` clamp: `for t in 0..min(n, 64)` takes t in [0, 63]. An i32
//! operation whose exact result fits in i32 computes that result on the GPU too, so every
//! interval holds for the emitted code. Correlations between operands are lost (`x − x` is not
//! 0) except the one index pattern that needs it, `x − x % m` for `x ≥ 0`.

use std::collections::HashMap;

use super::{Axis, BinOp, Elem, Kernel, Op, UnOp, Value, ValueDef};

/// The closed interval `[lo, hi]` holding every run-time value of i32 value `v`; `None` when `v`
/// is not an i32 value, or a rule's result may leave the i32 range (the emitted code wraps).
pub fn int_range(k: &Kernel, v: Value) -> Option<(i64, i64)> {
    Ranges {
        k,
        memo: HashMap::new(),
    }
    .of(v, 0)
}

/// Whether every run-time value of i32 value `v` lies in `lo..=hi`.
pub fn within(k: &Kernel, v: Value, lo: i64, hi: i64) -> bool {
    int_range(k, v).is_some_and(|(a, b)| a >= lo && b <= hi)
}

/// Whether `a` and `b` hold the same values element for element: one value, or the same pure
/// operator on the same operands (two `row_index(C, 1)` calls, or an index tile and its copy in a
/// loop, `passes::remat`).
fn same(k: &Kernel, a: Value, b: Value, depth: u32) -> bool {
    if a == b {
        return true;
    }
    let (ValueDef::Result(i), ValueDef::Result(j)) = (k.values[a].def, k.values[b].def) else {
        return false;
    };
    if depth > MAX_DEPTH || k.values[a].ty != k.values[b].ty {
        return false;
    }
    let (oi, oj) = (&k.insts[i].op, &k.insts[j].op);
    let args_same = || {
        let (x, y) = (k.inst_args(i), k.inst_args(j));
        x.len() == y.len() && x.iter().zip(&y).all(|(&p, &q)| same(k, p, q, depth + 1))
    };
    match (oi, oj) {
        (Op::ConstInt(c), Op::ConstInt(e)) => c == e,
        (Op::Iota(p), Op::Iota(q)) => p == q,
        (Op::Splat(_), Op::Splat(_)) => args_same(),
        (Op::Unary(p, _), Op::Unary(q, _)) => p == q && args_same(),
        (Op::Binary(p, ..), Op::Binary(q, ..)) => p == q && args_same(),
        _ => false,
    }
}

/// Deeper expression chains than this are not bounded (each level is one operator).
const MAX_DEPTH: u32 = 64;

struct Ranges<'k> {
    k: &'k Kernel,
    memo: HashMap<Value, Option<(i64, i64)>>,
}

/// `[lo, hi]` if it fits in i32.
fn fit(lo: i64, hi: i64) -> Option<(i64, i64)> {
    (lo >= i64::from(i32::MIN) && hi <= i64::from(i32::MAX) && lo <= hi).then_some((lo, hi))
}

impl Ranges<'_> {
    fn of(&mut self, v: Value, depth: u32) -> Option<(i64, i64)> {
        if let Some(r) = self.memo.get(&v) {
            return *r;
        }
        if depth > MAX_DEPTH {
            return None; // not remembered: a shallower path to `v` may still bound it
        }
        let r = if self.k.values[v].ty.elem() != Elem::I32 {
            None
        } else {
            self.compute(v, depth + 1)
        };
        self.memo.insert(v, r);
        r
    }

    fn compute(&mut self, v: Value, d: u32) -> Option<(i64, i64)> {
        let k = self.k;
        let inst = match k.values[v].def {
            ValueDef::LoopIndex(l) => {
                let Op::For { lo, hi, .. } = k.insts[l].op else {
                    return None;
                };
                // An index takes lo..hi − 1; a loop that runs no iteration has no index to bound.
                let ((a, _), (_, b)) = (self.of(lo, d)?, self.of(hi, d)?);
                return fit(a, b - 1);
            }
            ValueDef::Result(i) => i,
        };
        match &k.insts[inst].op {
            Op::ConstInt(c) => fit(*c, *c),
            Op::Iota(axis) => {
                let (rows, cols) = k.values[v].ty.shape()?;
                let n = if *axis == Axis::Row { rows } else { cols };
                fit(0, i64::from(n) - 1)
            }
            // A broadcast, a view, a transpose or a gather of a tile takes some of its values.
            Op::Splat(x)
            | Op::Transpose(x)
            | Op::Slice { src: x, .. }
            | Op::Gather { src: x, .. } => self.of(*x, d),
            Op::Unary(UnOp::Neg, x) => {
                let (a, b) = self.of(*x, d)?;
                fit(-b, -a)
            }
            Op::Select(_, x, y) => {
                let ((a, b), (c, e)) = (self.of(*x, d)?, self.of(*y, d)?);
                fit(a.min(c), b.max(e))
            }
            Op::Binary(op, x, y) => self.binary(*op, *x, *y, d),
            Op::ProgramId(_) | Op::Size(_) => fit(0, i64::from(i32::MAX)),
            _ => fit(i64::from(i32::MIN), i64::from(i32::MAX)),
        }
    }

    fn binary(&mut self, op: BinOp, x: Value, y: Value, d: u32) -> Option<(i64, i64)> {
        // `x − x % m` with x ≥ 0, m ≥ 1: the multiple of m at or below x, in [0, x]; for one m,
        // between the multiples at or below x's bounds (`blk` of the key-row loops, a 16-row
        // block's first row of 64: [0, 48], where [0, 63] left `kx[16 + blk + sj, :]` tested).
        if op == BinOp::Sub {
            if let ValueDef::Result(r) = self.k.values[y].def {
                if let Op::Binary(BinOp::Rem, x2, m) = self.k.insts[r].op {
                    if same(self.k, x2, x, 0) {
                        if let (Some((a, b)), Some((ma, me))) = (self.of(x, d), self.of(m, d)) {
                            if a >= 0 && ma >= 1 {
                                return if ma == me { fit(a / ma * ma, b / ma * ma) } else { fit(0, b) };
                            }
                        }
                    }
                }
            }
        }
        let ((a, b), (c, e)) = (self.of(x, d)?, self.of(y, d)?);
        match op {
            BinOp::Add => fit(a + c, b + e),
            BinOp::Sub => fit(a - e, b - c),
            BinOp::Mul => {
                let p = [a * c, a * e, b * c, b * e];
                fit(*p.iter().min()?, *p.iter().max()?)
            }
            BinOp::Min => fit(a.min(c), b.min(e)),
            BinOp::Max => fit(a.max(c), b.max(e)),
            // Non-negative operands and a positive divisor only (truncation then floors).
            BinOp::Div if a >= 0 && c >= 1 => fit(a / e, b / c),
            BinOp::Cdiv if a >= 0 && c >= 1 => fit((a + e - 1) / e, (b + c - 1) / c),
            BinOp::Rem if a >= 0 && c >= 1 => fit(0, b.min(e - 1)),
            _ => fit(i64::from(i32::MIN), i64::from(i32::MAX)),
        }
    }
}
