//! K#2: the WY / triangular-inverse VJP (stage B5 of the chunked backward).
//!
//! Source: gdn-math.md §4 "B5" and "Kernel contracts" (fla `gated_delta_rule/wy_fast.py`,
//! `prepare_wy_repr_bwd`), general form. Per chunk, with `W = Ai X_k`, `U = Ai X_v`,
//! `X_k = b⊙K⊙e^Γ`, `X_v = w⊙V`, `Ai = (I + L)^{-1}`:
//!
//! ```text
//! dT   = strict_lower(dW X_kᵀ + dU X_vᵀ)
//! dX_k = Aiᵀ dW ;  dX_v = Aiᵀ dU
//! dL   = strict_lower(−Aiᵀ dT Aiᵀ)                      (never re-inverts)
//! then chain dX_k, dX_v and dL into k, v, b, w and Γ.
//! ```
//! Masking dT is harmless: a strictly-lower perturbation of L only moves the strictly-lower
//! part of Ai.

use super::chunk_fwd::{chunk_block, wy_inputs};
use super::intra::{chunk_ranges, Decay};
use super::problem::check_shape;
use super::tensor::Mat;
use super::RecurrenceError;

/// Outputs of K#2 for one sequence and head (all `[T, ·]`).
#[derive(Clone, Debug)]
pub struct K2Output {
    /// `dK₂` `[T, K]`: the part of dk that flows through W and L.
    pub dk: Mat,
    /// `dv` `[T, V]` (complete: v only enters through U).
    pub dv: Mat,
    /// `db` `[T, K]` (complete: b only enters through W and L).
    pub db: Mat,
    /// `dw` `[T, V]` for the write gate (complete).
    pub dw: Mat,
    /// `dΓ₂` `[T, K]`: gradient w.r.t. the chunk-local cumulative gate, WY part.
    pub dgamma: Mat,
}

/// WY / inverse VJP (K#2) for one sequence and head.
///
/// Inputs: `k`, `b`, `gamma` `[T, K]`; `v`, `w` `[T, V]`; `ai` `[T, C]` (fla layout: row t holds
/// row `t mod C` of its chunk's `(I+L)^{-1}`); `d_wy_w` = ∂L/∂W `[T, K]` (from B4);
/// `du` = ∂L/∂U = dVn `[T, V]` (from K#1); `chunk` (C).
///
/// Errors: [`RecurrenceError::Shape`] if the shapes disagree.
#[allow(clippy::too_many_arguments)]
pub fn wy_backward(
    k: &Mat,
    v: &Mat,
    b: &Mat,
    w: &Mat,
    gamma: &Mat,
    ai: &Mat,
    d_wy_w: &Mat,
    du: &Mat,
    chunk: usize,
) -> Result<K2Output, RecurrenceError> {
    let (t, kd, vd) = (k.rows, k.cols, v.cols);
    for (name, m, r, c) in [("b", b, t, kd), ("gamma", gamma, t, kd), ("dw", d_wy_w, t, kd), ("w", w, t, vd), ("du", du, t, vd), ("ai", ai, t, chunk)] {
        check_shape(name, m, r, c)?;
    }
    let mut out = K2Output {
        dk: Mat::zeros(t, kd),
        dv: Mat::zeros(t, vd),
        db: Mat::zeros(t, kd),
        dw: Mat::zeros(t, vd),
        dgamma: Mat::zeros(t, kd),
    };
    let mut e = vec![0.0; kd];
    for (s, end) in chunk_ranges(t, chunk) {
        let c = end - s;
        let decay = Decay::new(gamma.rows_range(s, end));
        let (kc, vc, bc, wc) = (k.rows_range(s, end), v.rows_range(s, end), b.rows_range(s, end), w.rows_range(s, end));
        let (xk, xv) = wy_inputs(&kc, &vc, &bc, &wc, &decay);
        let a = chunk_block(ai, s, end);
        let (dwc, duc) = (d_wy_w.rows_range(s, end), du.rows_range(s, end));

        // dT = strict_lower(dW X_kᵀ + dU X_vᵀ); dL = strict_lower(−Aiᵀ dT Aiᵀ).
        let mut dt = dwc.matmul_t(&xk);
        dt.add_assign(&duc.matmul_t(&xv));
        strict_lower(&mut dt);
        let mut dl = a.tmatmul(&dt).matmul_t(&a).scaled(-1.0);
        strict_lower(&mut dl);

        // Through X_k = b⊙K⊙e^Γ and X_v = w⊙V.
        let dxk = a.tmatmul(&dwc);
        let dxv = a.tmatmul(&duc);
        let eg = decay.exp_gamma();
        let mut db = dxk.hadamard(&kc).hadamard(&eg);
        let mut dk = dxk.hadamard(&bc).hadamard(&eg);
        let mut dg = dxk.hadamard(&xk);
        out.dw.set_rows(s, &dxv.hadamard(&vc));
        out.dv.set_rows(s, &dxv.hadamard(&wc));

        // Through L_ij = Σ_c b_ic k_ic k_jc e^{Γ_ic − Γ_jc}, i > j.
        for i in 1..c {
            for j in 0..i {
                let g = dl[(i, j)];
                if g == 0.0 {
                    continue;
                }
                decay.pair(i, j, &mut e);
                let (bi, ki, kj) = (bc.row(i), kc.row(i), kc.row(j));
                let dbi = db.row_mut(i);
                for ch in 0..kd {
                    dbi[ch] += g * e[ch] * ki[ch] * kj[ch];
                }
                let (lo, hi) = dk.data.split_at_mut(i * kd);
                let (dkj, dki) = (&mut lo[j * kd..(j + 1) * kd], &mut hi[..kd]);
                let (glo, ghi) = dg.data.split_at_mut(i * kd);
                let (dgj, dgi) = (&mut glo[j * kd..(j + 1) * kd], &mut ghi[..kd]);
                for ch in 0..kd {
                    let gb = g * e[ch] * bi[ch];
                    dki[ch] += gb * kj[ch];
                    dkj[ch] += gb * ki[ch];
                    let r = gb * ki[ch] * kj[ch];
                    dgi[ch] += r;
                    dgj[ch] -= r;
                }
            }
        }
        out.dk.set_rows(s, &dk);
        out.db.set_rows(s, &db);
        out.dgamma.set_rows(s, &dg);
    }
    Ok(out)
}

/// Zeroes the diagonal and the upper triangle.
fn strict_lower(m: &mut Mat) {
    for i in 0..m.rows {
        for j in i..m.cols {
            m[(i, j)] = 0.0;
        }
    }
}
