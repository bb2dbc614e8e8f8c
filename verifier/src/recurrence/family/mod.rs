//! The five family members, each written from its own definition (gdn-math.md §1, fla's
//! `naive_recurrent_*` references), with fla's conventions: `o_t = S_tᵀ(scale·q_t)`, the decay is
//! applied before the delta read-out, and β multiplies the whole innovation.
//!
//! | model | recurrence (per token) | gate tensors |
//! |---|---|---|
//! | LA   | `S = S + k vᵀ` | – |
//! | GLA  | `S = Diag(e^g) S + k vᵀ` | g `[T, K]` |
//! | SSD  | `S = e^g S + k vᵀ` | g `[T]` (scalar) |
//! | KDA  | `S = Diag(e^g) S;  S += k (β (v − Sᵀk))ᵀ` | g `[T, K]`, β `[T]` |
//! | GDN  | `S = e^g S;        S += k (β (v − Sᵀk))ᵀ` | g `[T]`, β `[T]` |
//!
//! [`Model::to_general`] and [`Model::reduce_grads`] map a member onto the general recurrence
//! (`b`, `w`, per-channel g) and its gradients back; the tests check the member references
//! against the general one through this map.

pub mod gdn;
pub mod gla;
pub mod kda;
pub mod la;
pub mod ssd;

use super::problem::{check_finite, check_shape, HeadGrads, HeadInputs, HeadOutputs, HeadSeeds};
use super::tensor::Mat;
use super::RecurrenceError;

/// Which recurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// The general form with channel-wise g, vector b (erase) and vector w (write).
    General,
    /// Linear attention: g = 0, b = 0, w = 1 (fla `chunk_linear_attn`, `chunk_simple_gla` with g = None).
    La,
    /// Gated linear attention: channel-wise g `[T, K]`, b = 0, w = 1 (fla `chunk_gla`).
    Gla,
    /// SSD / Mamba-2: scalar g `[T]` broadcast over K, b = 0, w = 1 (fla `chunk_simple_gla`).
    Ssd,
    /// Kimi Delta Attention: channel-wise g `[T, K]`, b = w = β·1 (fla `chunk_kda`).
    Kda,
    /// Gated DeltaNet: scalar g `[T]`, b = w = β·1 (fla `chunk_gated_delta_rule`).
    Gdn,
}

impl Model {
    /// All models, in CLI order.
    pub const ALL: [Model; 6] = [Model::General, Model::La, Model::Gla, Model::Ssd, Model::Kda, Model::Gdn];

    /// CLI / file name.
    pub fn name(self) -> &'static str {
        match self {
            Model::General => "general",
            Model::La => "la",
            Model::Gla => "gla",
            Model::Ssd => "ssd",
            Model::Kda => "kda",
            Model::Gdn => "gdn",
        }
    }

    /// The gate tensor: none (LA), scalar per token (SSD, GDN) or per channel.
    pub fn gate(self) -> Gate {
        match self {
            Model::La => Gate::None,
            Model::Ssd | Model::Gdn => Gate::Scalar,
            Model::General | Model::Gla | Model::Kda => Gate::Channel,
        }
    }

    /// Whether the model has a β (delta-rule members KDA and GDN).
    pub fn has_beta(self) -> bool {
        matches!(self, Model::Kda | Model::Gdn)
    }

    /// Maps a member's inputs onto the general recurrence (gdn-math.md §1 table):
    /// g broadcast to `[T, K]` (0 when absent), `b = β·1` or 0, `w = β·1` or 1.
    pub fn to_general(self, x: &MemberInputs) -> HeadInputs {
        let (t, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
        let g = match (&x.g, self.gate()) {
            (Some(g), Gate::Scalar) => Mat::from_vec(t, kd, (0..t).flat_map(|r| std::iter::repeat_n(g[(r, 0)], kd)).collect()),
            (Some(g), Gate::Channel) => g.clone(),
            _ => Mat::zeros(t, kd),
        };
        let (b, w) = match &x.beta {
            Some(beta) if self.has_beta() => (
                Mat::from_vec(t, kd, (0..t).flat_map(|r| std::iter::repeat_n(beta[(r, 0)], kd)).collect()),
                Mat::from_vec(t, vd, (0..t).flat_map(|r| std::iter::repeat_n(beta[(r, 0)], vd)).collect()),
            ),
            _ => (Mat::zeros(t, kd), Mat::filled(t, vd, 1.0)),
        };
        HeadInputs { q: x.q.clone(), k: x.k.clone(), v: x.v.clone(), g, b, w, s0: x.s0.clone(), scale: x.scale }
    }

    /// Maps general gradients back to the member's inputs (gdn-math.md §2, "Specialisations"):
    /// scalar dg = Σ_c dg_c; dβ = Σ_c db_c + Σ_v dw_v.
    pub fn reduce_grads(self, g: &HeadGrads) -> MemberGrads {
        let dg = match self.gate() {
            Gate::None => None,
            Gate::Scalar => Some(Mat::from_vec(g.dg.rows, 1, g.dg.row_sums())),
            Gate::Channel => Some(g.dg.clone()),
        };
        let dbeta = self.has_beta().then(|| {
            let (sb, sw) = (g.db.row_sums(), g.dw.row_sums());
            Mat::from_vec(g.db.rows, 1, sb.iter().zip(&sw).map(|(a, b)| a + b).collect())
        });
        MemberGrads { dq: g.dq.clone(), dk: g.dk.clone(), dv: g.dv.clone(), dg, dbeta, ds0: g.ds0.clone() }
    }

    /// The member's own token-serial forward and backward.
    ///
    /// Errors: [`RecurrenceError::Invalid`] for [`Model::General`] (use `serial` directly), or a
    /// shape / finiteness error.
    pub fn own_forward_backward(self, x: &MemberInputs, s: &HeadSeeds) -> Result<(HeadOutputs, MemberGrads), RecurrenceError> {
        x.validate(self)?;
        let (t, kd, vd) = (x.q.rows, x.q.cols, x.v.cols);
        s.validate(t, kd, vd)?;
        Ok(match self {
            Model::General => return Err(RecurrenceError::Invalid("the general model has no member reference".into())),
            Model::La => la::forward_backward(x, s),
            Model::Gla => gla::forward_backward(x, s)?,
            Model::Ssd => ssd::forward_backward(x, s)?,
            Model::Kda => kda::forward_backward(x, s)?,
            Model::Gdn => gdn::forward_backward(x, s)?,
        })
    }
}

/// Shape of a model's gate tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// No decay (LA): g = 0.
    None,
    /// One log-decay per token and head (SSD, GDN): `[T, 1]` per head, `[B, T, H]` in fla's layout.
    Scalar,
    /// One log-decay per token, head and key channel (general, GLA, KDA): `[T, K]`, `[B, T, H, K]`.
    Channel,
}

/// Inputs of a family member for one sequence and head.
#[derive(Clone, Debug)]
pub struct MemberInputs {
    /// `[T, K]` (unscaled).
    pub q: Mat,
    /// `[T, K]`.
    pub k: Mat,
    /// `[T, V]`.
    pub v: Mat,
    /// Log-decay: `[T, K]` (GLA, KDA), `[T, 1]` (SSD, GDN) or `None` (LA).
    pub g: Option<Mat>,
    /// β `[T, 1]` (KDA, GDN) or `None`.
    pub beta: Option<Mat>,
    /// Initial state `[K, V]`.
    pub s0: Mat,
    /// Multiplies q inside the recurrence, `o_t = S_tᵀ(scale·q_t)`.
    pub scale: f64,
}

/// Gradients of a family member (same shapes as [`MemberInputs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MemberGrads {
    /// `∂L/∂q` `[T, K]`, with respect to the unscaled q.
    pub dq: Mat,
    /// `∂L/∂k` `[T, K]`.
    pub dk: Mat,
    /// `∂L/∂v` `[T, V]`.
    pub dv: Mat,
    /// `∂L/∂g`, shaped as `g` (`[T, 1]` for a scalar gate: `Σ_c dg_c`); `None` for LA.
    pub dg: Option<Mat>,
    /// `∂L/∂β` `[T, 1]` = `Σ_c db_c + Σ_v dw_v` (KDA, GDN); `None` otherwise.
    pub dbeta: Option<Mat>,
    /// `∂L/∂S_0` `[K, V]`.
    pub ds0: Mat,
}

impl MemberInputs {
    /// Checks shapes and finiteness for `model`.
    ///
    /// Errors: [`RecurrenceError::Shape`], [`RecurrenceError::NonFinite`], or
    /// [`RecurrenceError::Missing`] when the model's g or β is absent.
    pub fn validate(&self, model: Model) -> Result<(), RecurrenceError> {
        let (t, kd, vd) = (self.q.rows, self.q.cols, self.v.cols);
        for (name, m, r, c) in [("q", &self.q, t, kd), ("k", &self.k, t, kd), ("v", &self.v, t, vd), ("s0", &self.s0, kd, vd)] {
            check_shape(name, m, r, c)?;
            check_finite(name, m)?;
        }
        match (model.gate(), &self.g) {
            (Gate::None, _) => {}
            (Gate::Scalar, Some(g)) => check_shape("g", g, t, 1).and_then(|_| check_finite("g", g))?,
            (Gate::Channel, Some(g)) => check_shape("g", g, t, kd).and_then(|_| check_finite("g", g))?,
            (_, None) => return Err(RecurrenceError::Missing("g".into())),
        }
        match (model.has_beta(), &self.beta) {
            (false, _) => {}
            (true, Some(b)) => check_shape("beta", b, t, 1).and_then(|_| check_finite("beta", b))?,
            (true, None) => return Err(RecurrenceError::Missing("beta".into())),
        }
        if !self.scale.is_finite() {
            return Err(RecurrenceError::NonFinite { name: "scale".into() });
        }
        Ok(())
    }
}

/// Storage shared by the member references: every state `S_0..S_T` is kept for the exact backward.
pub(crate) fn zero_like_grads(t: usize, kd: usize, vd: usize) -> (Mat, Mat, Mat) {
    (Mat::zeros(t, kd), Mat::zeros(t, kd), Mat::zeros(t, vd))
}
