//! Backward of the row reductions mean, max and cumsum (over the last axis of x[R,N]).
//!
//! * mean: dx_rj = g_r / N: one rounding, scale |dx|, depth 1.
//! * max: dx_rj = g_r at the position of the row's maximum (the first NaN when the row holds
//!   one, as the NaN-propagating forward returns it), 0 elsewhere: exact (scale 0, depth 1).
//!   Where the maximum is attained more than once the gradient is not defined (PyTorch's
//!   `max(dim)` and `amax` disagree there), so the reference gives NaN for the whole row: such
//!   positions are left out of every value comparison (fairness rule 2), never charged.
//! * cumsum: dx_rj = sum_{k >= j} g_rk (a reversed cumulative sum): scale sum_{k >= j} |g_rk|,
//!   charged depth N (its longest suffix), as the forward.

use super::{c, Backward, Dims};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;


fn mean_bwd<T: Float>(d: &Dims, _x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let nt = c::<T>(n as f64);
    vec![(0..r * n).map(|i| g[0][i / n.max(1)] / nt).collect()]
}

/// Backward of `mean`.
pub fn mean() -> Backward {
    Backward {
        k64: Arc::new(mean_bwd::<f64>),
        k32: Arc::new(mean_bwd::<f32>),
        profile: Arc::new(|_, _, _, outs| vec![ErrorProfile { depth: 1, scale: outs[0].iter().map(|v| v.abs()).collect() }]),
    }
}

/// Index of the element the row's NaN-propagating max comes from, or None when the maximum is
/// attained more than once (no NaN in the row).
pub fn argmax_unique<T: Float>(row: &[T]) -> Option<usize> {
    if let Some(i) = row.iter().position(|v| v.is_nan()) {
        return Some(i);
    }
    let mut best = 0usize;
    let mut tie = false;
    for (j, &v) in row.iter().enumerate().skip(1) {
        if v > row[best] {
            best = j;
            tie = false;
        } else if v == row[best] {
            tie = true;
        }
    }
    if tie {
        None
    } else {
        Some(best)
    }
}

fn max_bwd<T: Float>(d: &Dims, x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut dx = vec![T::zero(); r * n];
    for i in 0..r {
        match argmax_unique(&x[0][i * n..(i + 1) * n]) {
            Some(j) => dx[i * n + j] = g[0][i],
            None => dx[i * n..(i + 1) * n].iter_mut().for_each(|v| *v = T::nan()),
        }
    }
    vec![dx]
}

/// Backward of `max`.
pub fn max() -> Backward {
    Backward {
        k64: Arc::new(max_bwd::<f64>),
        k32: Arc::new(max_bwd::<f32>),
        profile: Arc::new(|d, _, _, _| {
            let (r, n) = d.rows();
            vec![ErrorProfile { depth: 1, scale: vec![0.0; r * n] }]
        }),
    }
}

fn cumsum_bwd<T: Float>(d: &Dims, _x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut dx = vec![T::zero(); r * n];
    for i in 0..r {
        let mut s = T::zero();
        for j in (0..n).rev() {
            s = s + g[0][i * n + j];
            dx[i * n + j] = s;
        }
    }
    vec![dx]
}

/// Backward of `cumsum`.
pub fn cumsum() -> Backward {
    Backward {
        k64: Arc::new(cumsum_bwd::<f64>),
        k32: Arc::new(cumsum_bwd::<f32>),
        profile: Arc::new(|d, _, g, _| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let mut s = 0.0;
                for j in (0..n).rev() {
                    s += g[0][i * n + j].abs();
                    scale[i * n + j] = s;
                }
            }
            vec![ErrorProfile { depth: n, scale }]
        }),
    }
}
