//! Index reductions over the last axis of x[R,N]: `argmax` and `argmin`, y[R] = the index of the
//! row's maximum (minimum), as `torch.argmax(x, dim=1)` / `torch.argmin` define it:
//!
//! * ties: the **first** index attaining the extreme (PyTorch documents it for `argmax` and
//!   `argmin`; NumPy's `argmax` / `argmin` agree);
//! * NaN: NaN counts as larger (smaller) than everything, so a row holding NaN answers the index
//!   of its first NaN (PyTorch and NumPy agree); ±Inf are ordinary extremes.
//!
//! Outputs are integers: a candidate declares an integer output dtype (`i64` as PyTorch, or
//! `i32`) and answers an I64 / I32 tensor (the protocol carries them as safetensors `I64`/`I32`).
//! Inside kverify the reference carries the indices as f64 (exact below 2^53); the profile is
//! exact (depth 0, scale 0) and an integer output has unit roundoff 0, so every bound is 0:
//! every compared index must be equal. No backward: the output is piecewise constant (CMP-02
//! `n/a`); no accumulation (PRC-02 `n/a`: the input has no reduction axis to accumulate along).

use super::{DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

/// Which extreme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgReduce {
    /// Index of the maximum.
    Max,
    /// Index of the minimum.
    Min,
}

/// The ids of the index-output classes.
pub const INDEX_CLASSES: [&str; 2] = ["argmax", "argmin"];

/// Index of the first extreme of `row` (first NaN if any), as torch.argmax / argmin.
pub fn arg_extreme<T: Float>(kind: ArgReduce, row: &[T]) -> usize {
    let mut best = 0usize;
    for (j, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return j;
        }
        let b = row[best];
        if (kind == ArgReduce::Max && v > b) || (kind == ArgReduce::Min && v < b) {
            best = j;
        }
    }
    best
}

fn kernel<T: Float>(kind: ArgReduce, d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = (d.get("R"), d.get("N"));
    let out = (0..r).map(|i| T::from(arg_extreme(kind, &x[0][i * n..(i + 1) * n])).unwrap_or_else(T::nan)).collect();
    vec![out]
}

/// `argmax` or `argmin` over the last axis: y[R] (integer indices).
pub fn arg_reduce(kind: ArgReduce) -> Op {
    let (id, summary) = match kind {
        ArgReduce::Max => ("argmax", "y[R] = argmax_N x[R,N] (first index on ties, first NaN wins; integer output)"),
        ArgReduce::Min => ("argmin", "y[R] = argmin_N x[R,N] (first index on ties, first NaN wins; integer output)"),
    };
    Op {
        input_rule: None,
        wide_outputs: &[],
        id,
        summary,
        dims: vec![
            DimSpec { name: "R", native: 64, min: 1, max: 65536, kind: DimKind::Batch },
            DimSpec { name: "N", native: 256, min: 1, max: 65536, kind: DimKind::Reduction },
        ],
        constraint: |_| Ok(()),
        inputs: vec![InputSpec { name: "x", shape: |d| vec![d.get("R"), d.get("N")], reduction_axis: None, data: true }],
        outputs: vec![|d| vec![d.get("R")]],
        k64: Arc::new(move |d, x| kernel::<f64>(kind, d, x)),
        k32: Arc::new(move |d, x| kernel::<f32>(kind, d, x)),
        profile: Arc::new(|d, _, _| vec![ErrorProfile { depth: 0, scale: vec![0.0; d.get("R")] }]),
        backward: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_index_on_ties_and_first_nan_wins() {
        let inf = f64::INFINITY;
        assert_eq!(arg_extreme(ArgReduce::Max, &[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(arg_extreme(ArgReduce::Min, &[1.0, 0.0, 3.0, 0.0]), 1);
        assert_eq!(arg_extreme(ArgReduce::Max, &[1.0, f64::NAN, inf, f64::NAN]), 1);
        assert_eq!(arg_extreme(ArgReduce::Min, &[-inf, 2.0, f64::NAN]), 2);
        assert_eq!(arg_extreme(ArgReduce::Max, &[-inf, -inf]), 0);
        assert_eq!(arg_extreme(ArgReduce::Min, &[inf, 5.0, -inf, -inf]), 2);
    }
}
