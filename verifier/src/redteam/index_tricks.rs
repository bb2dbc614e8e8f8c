//! Red-team tricks on the index classes (argmax / argmin, issue 12 item 5): the tie rule and
//! NaN handling, each with its honest twin. Each has a NumPy twin of the same name in
//! `verifier/python/redteam/tricks.py`; all declare f32 inputs and i64 outputs (PyTorch's dtype).

use super::tricks::Trick;
use crate::candidate::inprocess::{to_f32_vec, FwdFn, InProcess};
use crate::candidate::CandidateOutput;
use crate::error_model::Precision;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

/// The declared precision of an index candidate: f32 in and accumulate, i64 out.
pub const INDEX_PRECISION: Precision = Precision::new(DType::F32, DType::F32, DType::I64);

/// `p` with an i64 output when `op` answers indices (the declaration an honest mirror of an
/// index class makes), `p` unchanged otherwise.
pub fn declared_for(op: &crate::references::Op, p: Precision) -> Precision {
    if op.index_output() {
        Precision { output: DType::I64, ..p }
    } else {
        p
    }
}

/// The honest f32 mirror of argmax (first index on ties, first NaN wins), answering i64.
pub fn honest_argmax() -> InProcess {
    super::op_tricks::mirror_at("argmax", "honest-argmax", INDEX_PRECISION)
}

/// An argmax over x[R,N] picking with `better(v, best)` from best = the first element.
fn argmax_with(name: &str, better: fn(f32, f32) -> bool) -> InProcess {
    let fwd: FwdFn = Arc::new(move |d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        let out: Vec<f64> = (0..r)
            .map(|i| {
                let row = &v[i * n..(i + 1) * n];
                let mut b = 0usize;
                for j in 1..n {
                    if better(row[j], row[b]) {
                        b = j;
                    }
                }
                b as f64
            })
            .collect();
        Ok(CandidateOutput { outputs: vec![Tensor::from_f64(vec![r], &out, DType::I64)], ..Default::default() })
    });
    InProcess { name: name.into(), op_id: "argmax".into(), precision: INDEX_PRECISION, fwd, bwd: None }
}

fn last_index_argmax() -> InProcess {
    // `>=` for `>`: on ties the last index wins (NaN still wins, as the reference).
    argmax_with("last_index_argmax", |v, b| !b.is_nan() && (v.is_nan() || v >= b))
}

/// NaN read as −∞ (the NumPy twin's `where(isnan(x), -inf, x)`).
fn nan_low(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x
    }
}

fn nan_ignoring_argmax() -> InProcess {
    // NaN read as −∞, first maximum kept — the NumPy twin's `argmax(where(isnan(x), -inf, x))`:
    // NaN is skipped (a row of NaN answers 0, NaN beside +inf answers the +inf, [NaN, −inf]
    // answers 0).
    argmax_with("nan_ignoring_argmax", |v, b| nan_low(v) > nan_low(b))
}

/// The tricks of this module.
pub fn tricks() -> Vec<Trick> {
    vec![
        Trick { name: "last_index_argmax", gate: "CMP-01", op: "argmax", what: "argmax answering the last index on ties (torch: the first)", build: last_index_argmax },
        Trick { name: "nan_ignoring_argmax", gate: "EXC-01", op: "argmax", what: "argmax skipping NaN (torch: the first NaN wins)", build: nan_ignoring_argmax },
    ]
}

#[cfg(test)]
mod tests {
    use crate::references::Dims;
    use crate::tensor::Tensor;

    /// The in-process nan_ignoring_argmax answers what its NumPy twin
    /// (`argmax(where(isnan(x), -inf, x))`) does on the rows where NaN handling differs.
    #[test]
    fn nan_ignoring_argmax_matches_its_numpy_twin() {
        let nan = f32::NAN;
        let rows = [([nan, f32::NEG_INFINITY, -1.0], 2.0), ([nan, f32::NEG_INFINITY, f32::NEG_INFINITY], 0.0), ([nan, nan, nan], 0.0), ([nan, f32::INFINITY, 1.0], 1.0), ([2.0, nan, 2.0], 0.0)];
        let c = super::nan_ignoring_argmax();
        for (row, want) in rows {
            let mut x = [Tensor::f32(vec![1, 3], row.to_vec())];
            let out = (c.fwd)(&Dims(vec![("R".into(), 1), ("N".into(), 3)]), &mut x).map_err(|e| e.to_string());
            let got = out.map(|o| o.outputs[0].to_f64_vec()[0]);
            assert_eq!(got, Ok(want), "{row:?}");
        }
    }
}
