//! EXC-01's probe inputs beyond the scattered injections of [`super::inputs::Dist::NonFinite`]:
//!
//! * **non-finite rows**: standard-normal inputs whose first data input gets its first three
//!   rows (runs along its last axis) replaced: row 0 all -inf, row 1 all +inf, row 2 a NaN
//!   followed by +inf (NaN beside +inf). Only the first data input is poisoned and every other
//!   row stays finite, so the outputs hold both non-finite and finite elements to compare (a
//!   row of matmul's B or of attention's k would reach every output);
//! * **poison, then partial**: every input NaN-filled at the base shape, then a call with
//!   ordinary inputs at a shape that leaves partial tiles: the odd shapes of CMP-03 (every
//!   changeable dim at base ± 1, never a whole number of power-of-two tiles) and the all-minimum
//!   edge shape of RES-01. A kernel that reads past the end of its data into a workspace the
//!   poisoned call filled (and masks by multiplying with 0) turns finite answers into NaN.

use super::inputs::{generate, Dist, Inputs};
use super::{cmp03_shapes, res01_runtime, Ctx};
use crate::references::{Dims, Op};
use crate::tensor::{DType, Tensor};

/// Number of rows [`nonfinite_rows`] replaces (all -inf, all +inf, NaN beside +inf).
pub const ROWS: usize = 3;

/// Standard-normal inputs whose first data input has its first [`ROWS`] rows non-finite.
pub fn nonfinite_rows(op: &Op, dims: &Dims, seed: u64, in_dtype: DType) -> Inputs {
    let mut x = generate(op, dims, Dist::Normal, seed, in_dtype);
    let Some(i) = op.inputs.iter().position(|s| s.data) else { return x };
    let shape = x.reference[i].shape.clone();
    let len = shape.last().copied().unwrap_or(1).max(1);
    let mut v = x.reference[i].to_f64_vec();
    for row in 0..ROWS.min(v.len() / len) {
        for (j, e) in v[row * len..(row + 1) * len].iter_mut().enumerate() {
            *e = match row {
                0 => f64::NEG_INFINITY,
                1 => f64::INFINITY,
                _ if j == 0 => f64::NAN,
                _ => f64::INFINITY,
            };
        }
    }
    x.candidate[i] = Tensor::from_f64(shape.clone(), &v, in_dtype.storage());
    x.reference[i] = Tensor::f64(shape, v);
    x
}

/// Every input of `op` at `dims` filled with NaN.
pub fn poison(op: &Op, dims: &Dims, in_dtype: DType) -> Inputs {
    let shapes = op.input_shapes(dims);
    let nan = |s: &Vec<usize>| vec![f64::NAN; s.iter().product()];
    Inputs {
        reference: shapes.iter().map(|s| Tensor::f64(s.clone(), nan(s))).collect(),
        candidate: shapes.iter().map(|s| Tensor::from_f64(s.clone(), &nan(s), in_dtype.storage())).collect(),
    }
}

/// The partial-tile shapes the poison-then-partial sequence visits after each poisoned call.
pub fn partial_shapes(ctx: &Ctx) -> Vec<(String, Dims)> {
    let mut v: Vec<(String, Dims)> = cmp03_shapes::shape_set(ctx.op, &ctx.dims).0.into_iter().filter(|(l, _)| l.starts_with("odd")).collect();
    if let Some(e) = res01_runtime::edge_dims(ctx) {
        if e != ctx.dims && !v.iter().any(|(_, d)| d == &e) {
            v.push(("minimum".into(), e));
        }
    }
    v
}
