//! Element-wise comparison of candidate outputs against the reference under the error model,
//! and exact classification for the tolerance-free gates.

use crate::error_model::{element_bound, BoundKind, Precision};
use crate::references::RefOutput;
use crate::tensor::Tensor;

/// Result of a value comparison.
#[derive(Debug, Clone, Default)]
pub struct ValueReport {
    /// max over elements of err / bound (0 when every error is 0).
    pub worst_ratio: f64,
    /// |candidate - reference| at the worst element.
    pub worst_err: f64,
    /// Bound at the worst element.
    pub worst_bound: f64,
    /// Reference value at the worst element.
    pub worst_ref: f64,
    /// (output index, flat element index) of the worst element.
    pub worst_at: (usize, usize),
    /// Number of elements compared.
    pub compared: usize,
    /// Number of elements excluded because the reference is NaN/Inf (fairness rule 2).
    pub excluded_nonfinite: usize,
    /// A structural problem (output count or shape) that prevents comparison.
    pub structural: Option<String>,
}

impl ValueReport {
    /// True when the comparison ran and every element is within its bound.
    pub fn passed(&self) -> bool {
        self.structural.is_none() && self.worst_ratio <= 1.0
    }
}

/// Compare `outs` with the reference. Positions where the reference is NaN or +-Inf, or beyond
/// the range of the declared output dtype (so that it rounds to +-Inf there, as EXC-01 rounds
/// it), are left to EXC-01 (rule 2); a non-finite candidate value where the reference is finite
/// is an infinite error.
pub fn compare(r: &RefOutput, outs: &[Tensor], p: &Precision, kind: BoundKind) -> ValueReport {
    let mut rep = ValueReport::default();
    if outs.len() != r.outputs.len() {
        rep.structural = Some(format!("{} outputs, expected {}", outs.len(), r.outputs.len()));
        rep.worst_ratio = f64::INFINITY;
        return rep;
    }
    for (o, ((rt, prof), ct)) in r.outputs.iter().zip(&r.profiles).zip(outs).enumerate() {
        if rt.shape != ct.shape {
            rep.structural = Some(format!("output {o} has shape {:?}, expected {:?}", ct.shape, rt.shape));
            rep.worst_ratio = f64::INFINITY;
            return rep;
        }
        let rv = rt.to_f64_vec();
        let cv = ct.to_f64_vec();
        for (i, (&y, &x)) in rv.iter().zip(&cv).enumerate() {
            if !y.is_finite() || !p.output.round(y).is_finite() {
                rep.excluded_nonfinite += 1;
                continue;
            }
            rep.compared += 1;
            let err = if x.is_finite() { (x - y).abs() } else { f64::INFINITY };
            let bound = element_bound(kind, p, prof.depth, prof.scale.get(i).copied().unwrap_or(0.0), y);
            let ratio = if err == 0.0 { 0.0 } else if bound > 0.0 { err / bound } else { f64::INFINITY };
            if ratio > rep.worst_ratio || (rep.compared == 1 && ratio >= rep.worst_ratio) {
                rep.worst_ratio = ratio;
                rep.worst_err = err;
                rep.worst_bound = bound;
                rep.worst_ref = y;
                rep.worst_at = (o, i);
            }
        }
    }
    rep
}

/// IEEE class used by EXC-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFiniteClass {
    /// Not a number.
    Nan,
    /// +Inf.
    PosInf,
    /// -Inf.
    NegInf,
    /// Any finite value.
    Finite,
}

/// Classify for EXC-01.
pub fn nonfinite_class(x: f64) -> NonFiniteClass {
    if x.is_nan() {
        NonFiniteClass::Nan
    } else if x == f64::INFINITY {
        NonFiniteClass::PosInf
    } else if x == f64::NEG_INFINITY {
        NonFiniteClass::NegInf
    } else {
        NonFiniteClass::Finite
    }
}

/// Sign class used by EXC-02: -1, 0 or +1 (NaN and Inf are EXC-01's business).
pub fn sign_class(x: f64) -> i8 {
    if x > 0.0 {
        1
    } else if x < 0.0 {
        -1
    } else {
        0
    }
}
