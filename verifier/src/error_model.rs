//! The floating-point error model behind every thresholded gate.
//!
//! A candidate declares its compute precision ([`Precision`]): the dtype its inputs arrive in,
//! the dtype it accumulates in and the dtype it writes. Inputs are rounded to the input dtype
//! *before* both the reference and the candidate see them, so input rounding is never charged
//! (fairness rules 3 and 7). What remains is the rounding of the computation itself, bounded per
//! output element by
//!
//! ```text
//!   bound_i = gamma(depth, u_acc) * scale_i + u_out * |ref_i| + depth * eta_acc
//! ```
//!
//! * `gamma(n, u) = n u / (1 - n u)`: Higham, *Accuracy and Stability of Numerical Algorithms*
//!   (2nd ed.), Lemma 3.1; for a dot product of length n, |fl(x.y) - x.y| <= gamma(n) sum|x_i y_i|
//!   (eq. 3.4). When n u >= 1 the bound is vacuous and we return +inf (never charged).
//! * `scale_i`: the reference's own condition-weighted magnitude for output i (for a sum,
//!   sum |terms|); each reference documents how it computes it.
//! * `u_out * |ref_i|`: the final rounding to the output dtype.
//! * `eta_acc`: half the smallest subnormal of the accumulator, the absolute underflow error
//!   of one multiplication (Higham §2.1, the underflow term of the standard model).
//!
//! ORD-01 uses the probabilistic bound `4 u sqrt(n) scale` (Higham & Mary, "A New Approach to
//! Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019, Theorem 2.4 with
//! lambda = 4), which is what a legitimate reordering of the same-precision sum produces.
//!
//! **Intermediate storage.** A multi-kernel program may also store intermediate values in a
//! narrower float between its stages (tilec's gated-recurrence operators keep w, u and the
//! chunk states in bf16 between kernels, as fla does): `R` rounding points of unit roundoff
//! `u_mid` ([`Storage`], declared with the precision; for a tilec operator counted from its IR by
//! the compiler, `tilec build --verify`'s `R`). Each is one more `(1 + δ)`, `|δ| ≤ u_mid`, on a
//! quantity whose first-order influence on the output is bounded by the same condition-weighted
//! `scale_i` (Higham Lemma 3.1 applied once per point), so the deterministic bound gains
//! `R u_mid scale_i`; under the probabilistic model the independent roundings add in variance,
//! `lambda sqrt(n u_acc^2 + R u_mid^2) scale_i` (Higham & Mary Theorem 2.4, whose proof bounds a
//! sum of independent mean-zero roundings of any sizes) — tilec's own `lambda sqrt(R) kappa u`
//! with the condition taken from the profile.

use crate::tensor::DType;
use serde::{Deserialize, Serialize};

/// A candidate's declared compute precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Precision {
    /// Dtype of the inputs the candidate receives.
    pub input: DType,
    /// Dtype it accumulates reductions in.
    pub accumulator: DType,
    /// Dtype of its outputs.
    pub output: DType,
    /// Intermediate values it stores in a narrower float between stages, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate: Option<Storage>,
}

/// Intermediate storage: `points` rounding points to `dtype` on the way to each output (module
/// doc, "Intermediate storage").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Storage {
    /// The float intermediates are stored in.
    pub dtype: DType,
    /// Rounding points R.
    pub points: u32,
}

impl Precision {
    /// fp32 in, fp32 accumulate, fp32 out.
    pub const F32: Precision = Precision::new(DType::F32, DType::F32, DType::F32);
    /// bf16 in, fp32 accumulate, bf16 out (the usual mixed-precision convention).
    pub const BF16_F32ACC: Precision = Precision::new(DType::Bf16, DType::F32, DType::Bf16);

    /// Input, accumulator and output dtypes, no intermediate storage.
    pub const fn new(input: DType, accumulator: DType, output: DType) -> Precision {
        Precision { input, accumulator, output, intermediate: None }
    }

    /// The same with `points` intermediate roundings to `dtype`.
    pub const fn storing(self, dtype: DType, points: u32) -> Precision {
        Precision { intermediate: Some(Storage { dtype, points }), ..self }
    }

    /// `R u_mid`, the first-order relative error of the intermediate storage (0 without).
    fn storage_error(&self) -> f64 {
        self.intermediate.map(|m| m.points as f64 * m.dtype.unit_roundoff()).unwrap_or(0.0)
    }

    /// `R u_mid^2`, the variance term of the intermediate storage (0 without).
    fn storage_variance(&self) -> f64 {
        self.intermediate.map(|m| m.points as f64 * m.dtype.unit_roundoff().powi(2)).unwrap_or(0.0)
    }
}

/// `gamma(n, u) = n u / (1 - n u)`, or +inf when `n u >= 1` (Higham Lemma 3.1).
pub fn gamma(n: usize, u: f64) -> f64 {
    let nu = n as f64 * u;
    if nu >= 1.0 {
        f64::INFINITY
    } else {
        nu / (1.0 - nu)
    }
}

/// How the reference describes the rounding sensitivity of one output tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorProfile {
    /// Longest chain of rounded operations feeding one output element (reduction length plus
    /// the documented number of elementwise steps).
    pub depth: usize,
    /// Per-element condition-weighted magnitude (same length as the output).
    pub scale: Vec<f64>,
}

/// Which bound a comparison uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    /// Worst-case deterministic bound (CMP-01/02/03, PRC-01/02).
    Deterministic,
    /// Probabilistic reordering bound `4 u sqrt(n) scale` (ORD-01).
    Reordering,
    /// ORD-03's backstop: [`ORD03_FACTOR`] times the reordering bound, never below the
    /// deterministic one.
    Backstop,
}

/// The documented multiple of the ORD-01 bound that ORD-03 allows.
pub const ORD03_FACTOR: f64 = 16.0;
/// lambda of the probabilistic bound (failure probability <= 2 exp(-lambda^2/2) per element
/// under the model's independence assumption).
pub const ORD01_LAMBDA: f64 = 4.0;

/// Per-element absolute bound for output element with reference value `r` and scale `s`.
pub fn element_bound(kind: BoundKind, p: &Precision, depth: usize, s: f64, r: f64) -> f64 {
    if p.output.is_integer() {
        // An integer output (argmax / argmin indices) is exact: nothing rounds it.
        return 0.0;
    }
    let u_acc = p.accumulator.unit_roundoff();
    let u_out = p.output.unit_roundoff();
    let eta = 0.5 * p.accumulator.min_subnormal() * depth.max(1) as f64;
    let out_round = u_out * r.abs();
    let n = depth.max(1) as f64;
    let det = (gamma(depth.max(1), u_acc) + p.storage_error()) * s + out_round + eta;
    let reord = ORD01_LAMBDA * (n * u_acc * u_acc + p.storage_variance()).sqrt() * s + out_round + eta;
    match kind {
        BoundKind::Deterministic => det,
        BoundKind::Reordering => reord,
        BoundKind::Backstop => (ORD03_FACTOR * reord).max(det),
    }
}

/// The reduced precisions PRC-01 tries as explanations of an error above the declared bound,
/// widest significand first: TF32 and FP16 (u = 2^-11; TF32 first for its wider exponent
/// range), then bf16 (u = 2^-8). Unit roundoffs from Higham Table 2.1 ([`DType::unit_roundoff`]).
pub const REDUCED_PRECISIONS: [DType; 3] = [DType::Tf32, DType::F16, DType::Bf16];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_matches_definition_and_saturates() {
        let u = 2f64.powi(-24);
        assert!((gamma(10, u) - 10.0 * u / (1.0 - 10.0 * u)).abs() < 1e-30);
        assert!(gamma(1 << 25, u).is_infinite());
    }

    #[test]
    fn backstop_is_never_tighter_than_deterministic() {
        let p = Precision::F32;
        for n in [1usize, 16, 4096, 1 << 20] {
            let det = element_bound(BoundKind::Deterministic, &p, n, 1.0, 1.0);
            let bs = element_bound(BoundKind::Backstop, &p, n, 1.0, 1.0);
            assert!(bs >= det);
        }
    }

    #[test]
    fn intermediate_storage_adds_its_roundings() {
        let p = Precision::BF16_F32ACC;
        let q = p.storing(DType::Bf16, 9);
        let (n, s, u, ub) = (64usize, 2.0, 2f64.powi(-24), 2f64.powi(-8));
        let det = |p: &Precision| element_bound(BoundKind::Deterministic, p, n, s, 0.0);
        assert!((det(&q) - det(&p) - 9.0 * ub * s).abs() < 1e-15, "R u_mid scale on top");
        let ord = element_bound(BoundKind::Reordering, &q, n, s, 0.0);
        let want = ORD01_LAMBDA * (n as f64 * u * u + 9.0 * ub * ub).sqrt() * s + 0.5 * DType::F32.min_subnormal() * n as f64;
        assert!((ord - want).abs() < 1e-15 * want, "{ord} vs {want}");
        assert_eq!(element_bound(BoundKind::Reordering, &p, n, s, 0.0), ORD01_LAMBDA * u * (n as f64).sqrt() * s + 0.5 * DType::F32.min_subnormal() * n as f64);
    }

    #[test]
    fn reduced_precisions_are_widest_first() {
        let u: Vec<f64> = REDUCED_PRECISIONS.iter().map(|d| d.unit_roundoff()).collect();
        assert_eq!(u, vec![2f64.powi(-11), 2f64.powi(-11), 2f64.powi(-8)]);
        assert!(REDUCED_PRECISIONS.iter().all(|d| d.unit_roundoff() > DType::F32.unit_roundoff()));
    }
}
