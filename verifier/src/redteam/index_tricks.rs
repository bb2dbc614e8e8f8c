//! Red-team tricks on the index classes (argmax / argmin, issue 12 item 5): the tie rule and
//! NaN handling, each with its honest twin. Each has a NumPy twin of the same name in
//! `verifier/python/redteam/tricks.py`; all declare f32 inputs and i64 outputs (PyTorch's dtype).

use super::tricks::Trick;
use crate::candidate::inprocess::{honest, to_f32_vec, FwdFn, InProcess};
use crate::candidate::CandidateOutput;
use crate::error_model::Precision;
use crate::references::op_by_id;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

/// The declared precision of an index candidate: f32 in and accumulate, i64 out.
pub const INDEX_PRECISION: Precision = Precision { input: DType::F32, accumulator: DType::F32, output: DType::I64 };

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
    let op = op_by_id("argmax").unwrap_or_else(|| crate::references::all_ops().remove(0));
    let mut h = honest(&op, INDEX_PRECISION);
    h.name = "honest-argmax".into();
    h
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

fn nan_ignoring_argmax() -> InProcess {
    // A plain `v > best` loop that starts from -inf: NaN never compares greater, so it is
    // skipped (a row of NaN answers 0, NaN beside +inf answers the +inf).
    argmax_with("nan_ignoring_argmax", |v, b| v > b || b.is_nan() && !v.is_nan())
}

/// The tricks of this module.
pub fn tricks() -> Vec<Trick> {
    vec![
        Trick { name: "last_index_argmax", gate: "CMP-01", op: "argmax", what: "argmax answering the last index on ties (torch: the first)", build: last_index_argmax },
        Trick { name: "nan_ignoring_argmax", gate: "EXC-01", op: "argmax", what: "argmax skipping NaN (torch: the first NaN wins)", build: nan_ignoring_argmax },
    ]
}
