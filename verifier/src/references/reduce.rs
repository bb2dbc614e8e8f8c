//! Reductions over the last axis of x[R,N]: sum, mean, max (NaN-propagating) and cumulative sum.
//!
//! Profiles: sum scale = sum|x|, depth N (Higham eq. 4.4 for recursive summation);
//! mean scale = sum|x| / N, depth N + 1; max is exact (scale 0); cumsum element j has
//! scale sum_{k<=j} |x_k| and is charged depth N (its longest prefix).

use super::{c, nan_max, Backward, DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;


fn dims() -> Vec<DimSpec> {
    vec![
        DimSpec { name: "R", native: 64, min: 1, max: 65536, kind: DimKind::Batch },
        DimSpec { name: "N", native: 256, min: 1, max: 65536, kind: DimKind::Reduction },
    ]
}

fn ok(_: &Dims) -> Result<(), String> {
    Ok(())
}

fn x_input() -> InputSpec {
    InputSpec { name: "x", shape: |d| vec![d.get("R"), d.get("N")], reduction_axis: Some(1), data: true }
}

/// What a row reduction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowReduce {
    /// Sum (sequential, ascending index).
    Sum,
    /// Sum / N.
    Mean,
    /// NaN-propagating max.
    Max,
}

/// Reduce each row of x[R,N] in ascending index order.
pub fn reduce_kernel<T: Float>(kind: RowReduce, d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let row = &x[0][i * n..(i + 1) * n];
        let v = match kind {
            RowReduce::Sum | RowReduce::Mean => {
                let mut s = T::zero();
                for &v in row {
                    s = s + v;
                }
                if kind == RowReduce::Mean {
                    s / c::<T>(n as f64)
                } else {
                    s
                }
            }
            RowReduce::Max => row.iter().fold(T::neg_infinity(), |a, &b| nan_max(a, b)),
        };
        out.push(v);
    }
    vec![out]
}

fn sum_bwd<T: Float>(d: &Dims, _x: &[&[T]], g: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut dx = Vec::with_capacity(r * n);
    for i in 0..r {
        dx.extend(std::iter::repeat_n(g[0][i], n));
    }
    vec![dx]
}

/// `sum`, `mean` or `max` over the last axis: y[R].
pub fn row_reduce(kind: RowReduce) -> Op {
    let (id, summary) = match kind {
        RowReduce::Sum => ("sum", "y[R] = sum_N x[R,N]"),
        RowReduce::Mean => ("mean", "y[R] = mean_N x[R,N]"),
        RowReduce::Max => ("max", "y[R] = max_N x[R,N] (NaN-propagating)"),
    };
    Op {
        input_rule: None,
        wide_outputs: &[],
        id,
        summary,
        dims: dims(),
        constraint: ok,
        inputs: vec![x_input()],
        outputs: vec![|d| vec![d.get("R")]],
        k64: Arc::new(move |d, x| reduce_kernel::<f64>(kind, d, x)),
        k32: Arc::new(move |d, x| reduce_kernel::<f32>(kind, d, x)),
        profile: Arc::new(move |d, x, _| {
            let (r, n) = d.rows();
            let abs_sum: Vec<f64> = (0..r).map(|i| x[0][i * n..(i + 1) * n].iter().map(|v| v.abs()).sum()).collect();
            match kind {
                RowReduce::Sum => vec![ErrorProfile { depth: n, scale: abs_sum }],
                RowReduce::Mean => vec![ErrorProfile { depth: n + 1, scale: abs_sum.iter().map(|s| s / n as f64).collect() }],
                RowReduce::Max => vec![ErrorProfile { depth: 1, scale: vec![0.0; r] }],
            }
        }),
        backward: match kind {
            RowReduce::Sum => Some(Backward {
                k64: Arc::new(sum_bwd::<f64>),
                k32: Arc::new(sum_bwd::<f32>),
                profile: Arc::new(|d, _, _, _| {
                    let (r, n) = d.rows();
                    vec![ErrorProfile { depth: 1, scale: vec![0.0; r * n] }]
                }),
            }),
            RowReduce::Mean => Some(super::reduce_bwd::mean()),
            RowReduce::Max => Some(super::reduce_bwd::max()),
        },
    }
}

fn cumsum_kernel<T: Float>(d: &Dims, x: &[&[T]]) -> Vec<Vec<T>> {
    let (r, n) = d.rows();
    let mut out = vec![T::zero(); r * n];
    for i in 0..r {
        let mut s = T::zero();
        for j in 0..n {
            s = s + x[0][i * n + j];
            out[i * n + j] = s;
        }
    }
    vec![out]
}

/// `cumsum` over the last axis: y[r,j] = sum_{k<=j} x[r,k].
pub fn cumsum() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "cumsum",
        summary: "y[R,N] = cumsum_N x[R,N]",
        dims: dims(),
        constraint: ok,
        inputs: vec![x_input()],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(cumsum_kernel::<f64>),
        k32: Arc::new(cumsum_kernel::<f32>),
        profile: Arc::new(|d, x, _| {
            let (r, n) = d.rows();
            let mut scale = vec![0.0; r * n];
            for i in 0..r {
                let mut s = 0.0;
                for j in 0..n {
                    s += x[0][i * n + j].abs();
                    scale[i * n + j] = s;
                }
            }
            vec![ErrorProfile { depth: n, scale }]
        }),
        backward: Some(super::reduce_bwd::cumsum()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn d(r: usize, n: usize) -> Dims {
        Dims(vec![("R".into(), r), ("N".into(), n)])
    }

    #[test]
    fn max_propagates_nan_and_handles_inf() {
        let x = Tensor::f64(vec![3, 2], vec![1.0, f64::NAN, f64::NEG_INFINITY, 2.0, f64::INFINITY, 0.0]);
        let y = row_reduce(RowReduce::Max).forward(&d(3, 2), &[x]).unwrap().outputs[0].to_f64_vec();
        assert!(y[0].is_nan());
        assert_eq!(y[1], 2.0);
        assert_eq!(y[2], f64::INFINITY);
    }

    #[test]
    fn sum_mean_cumsum_values() {
        let x = Tensor::f64(vec![1, 4], vec![1.0, -2.0, 3.0, 4.0]);
        assert_eq!(row_reduce(RowReduce::Sum).forward(&d(1, 4), &[x.clone()]).unwrap().outputs[0].to_f64_vec(), vec![6.0]);
        assert_eq!(row_reduce(RowReduce::Mean).forward(&d(1, 4), &[x.clone()]).unwrap().outputs[0].to_f64_vec(), vec![1.5]);
        assert_eq!(cumsum().forward(&d(1, 4), &[x]).unwrap().outputs[0].to_f64_vec(), vec![1.0, -1.0, 2.0, 6.0]);
    }
}
