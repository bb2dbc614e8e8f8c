//! Per-(sequence, head) problem types shared by every reference in this module.
//!
//! Shapes use T = tokens of the sequence, K = key dim, V = value dim. All values are fp64.
//! The general recurrence (gdn-math.md §2) is
//! `S_t = (I − k_t (b_t ⊙ k_t)ᵀ) Diag(exp g_t) S_{t−1} + k_t (w_t ⊙ v_t)ᵀ`, `o_t = S_tᵀ (scale·q_t)`.

use super::tensor::Mat;
use super::RecurrenceError;

/// Inputs of the general recurrence for one sequence and head.
#[derive(Clone, Debug)]
pub struct HeadInputs {
    /// Queries `[T, K]`, unscaled (the recurrence reads `scale·q`).
    pub q: Mat,
    /// Keys `[T, K]`.
    pub k: Mat,
    /// Values `[T, V]`.
    pub v: Mat,
    /// Per-channel natural-log decay `[T, K]` (≤ 0 for a decay; any real value is accepted).
    pub g: Mat,
    /// Erase gate `[T, K]`.
    pub b: Mat,
    /// Write gate `[T, V]`.
    pub w: Mat,
    /// Initial state `[K, V]`.
    pub s0: Mat,
    /// Output scale (fla's default is `K^-0.5`).
    pub scale: f64,
}

/// Loss seeds: `d_o = ∂L/∂o` `[T, V]` and `dst = ∂L/∂S_T` `[K, V]`.
#[derive(Clone, Debug)]
pub struct HeadSeeds {
    /// `∂L/∂o` `[T, V]` (fla: `do`).
    pub d_o: Mat,
    /// `∂L/∂S_T` `[K, V]` (fla: `dht`; may be zero).
    pub dst: Mat,
}

/// Forward results: `o` `[T, V]` and the final state `st` `[K, V]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadOutputs {
    /// `o_t = S_tᵀ(scale·q_t)`, `[T, V]`.
    pub o: Mat,
    /// Final state `S_T` `[K, V]`.
    pub st: Mat,
}

/// Gradients of `L = Σ o⊙d_o + Σ S_T⊙dst` with respect to every input (same shapes as the
/// inputs; `dq` is with respect to the unscaled `q`, as in fla).
#[derive(Clone, Debug, PartialEq)]
pub struct HeadGrads {
    /// `∂L/∂q` `[T, K]` with respect to the unscaled q: `scale · S_t do_t` (gdn-math.md §2).
    pub dq: Mat,
    /// `∂L/∂k` `[T, K]` (through both the write `k δᵀ` and the erase `b ⊙ k`).
    pub dk: Mat,
    /// `∂L/∂v` `[T, V]`.
    pub dv: Mat,
    /// `∂L/∂g` `[T, K]` (per-channel log-decay).
    pub dg: Mat,
    /// `∂L/∂b` `[T, K]` (erase gate).
    pub db: Mat,
    /// `∂L/∂w` `[T, V]` (write gate).
    pub dw: Mat,
    /// `∂L/∂S_0` `[K, V]`.
    pub ds0: Mat,
}

impl HeadInputs {
    /// Sizes `(T, K, V)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.q.rows, self.q.cols, self.v.cols)
    }

    /// Checks that all shapes agree and every value is finite.
    ///
    /// Errors: [`RecurrenceError::Shape`] or [`RecurrenceError::NonFinite`].
    pub fn validate(&self) -> Result<(), RecurrenceError> {
        let (t, k, v) = self.dims();
        let want = [
            ("q", &self.q, t, k),
            ("k", &self.k, t, k),
            ("v", &self.v, t, v),
            ("g", &self.g, t, k),
            ("b", &self.b, t, k),
            ("w", &self.w, t, v),
            ("s0", &self.s0, k, v),
        ];
        for (name, m, r, c) in want {
            check_shape(name, m, r, c)?;
            check_finite(name, m)?;
        }
        if !self.scale.is_finite() {
            return Err(RecurrenceError::NonFinite { name: "scale".into() });
        }
        Ok(())
    }
}

impl HeadSeeds {
    /// Checks the seed shapes against `(T, K, V)` and that every value is finite.
    ///
    /// Errors: [`RecurrenceError::Shape`] or [`RecurrenceError::NonFinite`].
    pub fn validate(&self, t: usize, k: usize, v: usize) -> Result<(), RecurrenceError> {
        check_shape("do", &self.d_o, t, v)?;
        check_shape("dst", &self.dst, k, v)?;
        check_finite("do", &self.d_o)?;
        check_finite("dst", &self.dst)
    }
}

pub(crate) fn check_shape(name: &str, m: &Mat, rows: usize, cols: usize) -> Result<(), RecurrenceError> {
    if m.rows != rows || m.cols != cols {
        return Err(RecurrenceError::Shape {
            name: name.into(),
            expected: vec![rows, cols],
            got: vec![m.rows, m.cols],
        });
    }
    Ok(())
}

pub(crate) fn check_finite(name: &str, m: &Mat) -> Result<(), RecurrenceError> {
    if m.data.iter().all(|x| x.is_finite()) {
        Ok(())
    } else {
        Err(RecurrenceError::NonFinite { name: name.into() })
    }
}
