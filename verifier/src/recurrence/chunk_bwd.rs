//! Backward stages B2 (local dv) and B4 (dq, dk, dW, dΓ inter + intra-P parts) of the chunked
//! backward (gdn-math.md §4; fla `common/chunk_o.py`: `chunk_bwd_dv_local`, `chunk_bwd_dqkwg`).
//! K#1 (B3) and K#2 (B5) are in their own modules.

use super::chunk_fwd::build_p;
use super::intra::{chunk_ranges, Decay};
use super::tensor::{axpy, axpy_mul, Mat};

/// B2: `dv_local = Pᵀ dO` `[T, V]`, with `P` the causal decayed score matrix of each chunk.
pub fn dv_local(q: &Mat, k: &Mat, gamma: &Mat, d_o: &Mat, scale: f64, chunk: usize) -> Mat {
    let mut out = Mat::zeros(d_o.rows, d_o.cols);
    for (s, e) in chunk_ranges(q.rows, chunk) {
        let decay = Decay::new(gamma.rows_range(s, e));
        let p = build_p(&q.rows_range(s, e), &k.rows_range(s, e), &decay, scale);
        out.set_rows(s, &p.tmatmul(&d_o.rows_range(s, e)));
    }
    out
}

/// Outputs of B4 (all `[T, K]`).
#[derive(Clone, Debug)]
pub struct DqkwgOutput {
    /// The whole dq (w.r.t. the unscaled q).
    pub dq: Mat,
    /// `dK₁`: the part of dk from the state update and from P.
    pub dk: Mat,
    /// `dW = −dVn h[n]ᵀ`: gradient w.r.t. the WY matrix W.
    pub d_wy_w: Mat,
    /// `dΓ₁`: gradient w.r.t. the chunk-local cumulative gate, output and state part.
    pub dgamma: Mat,
}

/// B4 for one sequence and head:
///
/// ```text
/// dP       = lower_incl(dO v_newᵀ)
/// dQ       = scale·(dO hᵀ)⊙e^Γ + scale·Σ_j dP_ij k_j ⊙ e^{Γ_i−Γ_j}
/// dK_state = (v_new dhᵀ) ⊙ e^{Γ_last−Γ};   dK₁ = dK_state + scale·Σ_i dP_ij q_i ⊙ e^{Γ_i−Γ_j}
/// dW       = −dVn hᵀ
/// dΓ₁      = Q⊙dQ − K⊙dK₁ (diagonal of P omitted: its two terms cancel exactly);  dΓ₁[last] += e^{Γ_last}⊙rowsum_v(h⊙dh) + Σ_r K_r⊙dK_state_r
/// ```
/// `h[n]` is the state entering chunk n, `dh[n]` the gradient of the state leaving it.
#[allow(clippy::too_many_arguments)]
pub fn dqkwg(
    q: &Mat,
    k: &Mat,
    gamma: &Mat,
    h: &[Mat],
    dh: &[Mat],
    v_new: &Mat,
    d_o: &Mat,
    dvn: &Mat,
    scale: f64,
    chunk: usize,
) -> DqkwgOutput {
    let (t, kd) = (q.rows, q.cols);
    let mut out = DqkwgOutput {
        dq: Mat::zeros(t, kd),
        dk: Mat::zeros(t, kd),
        d_wy_w: Mat::zeros(t, kd),
        dgamma: Mat::zeros(t, kd),
    };
    let mut e = vec![0.0; kd];
    for (n, (s, end)) in chunk_ranges(t, chunk).into_iter().enumerate() {
        let c = end - s;
        let decay = Decay::new(gamma.rows_range(s, end));
        let (qc, kc) = (q.rows_range(s, end), k.rows_range(s, end));
        let (doc, vnc) = (d_o.rows_range(s, end), v_new.rows_range(s, end));
        let dp = doc.matmul_t(&vnc);

        let mut dq = doc.matmul_t(&h[n]).hadamard(&decay.exp_gamma()).scaled(scale);
        let dk_state = vnc.matmul_t(&dh[n]).hadamard(&decay.exp_to_last());
        let mut dk = dk_state.clone();
        // dΓ₁ = Q⊙dQ − K⊙dK₁, assembled term by term: the diagonal of P (decay e^0 = 1) adds
        // q_i k_i dP_ii to dΓ_i once with each sign, so it is left out rather than left to cancel
        // in floating point (that cancellation costs ~1e-4 relative accuracy under strong decay).
        let kds = kc.hadamard(&dk_state);
        let mut dg = qc.hadamard(&dq);
        // −K⊙dK_state on every row but the last: the last row's term is added back below by the
        // Γ_last sum, so both copies are omitted (same exact-cancellation reason as above).
        for r in 0..c - 1 {
            axpy(dg.row_mut(r), -1.0, kds.row(r));
        }
        for i in 0..c {
            for j in 0..=i {
                let g = scale * dp[(i, j)];
                if g == 0.0 {
                    continue;
                }
                decay.pair(i, j, &mut e);
                e.iter_mut().for_each(|z| *z *= g);
                let (qi, kj) = (qc.row(i), kc.row(j));
                axpy_mul(dq.row_mut(i), &e, kj);
                axpy_mul(dk.row_mut(j), &e, qi);
                if j < i {
                    let (lo, hi) = dg.data.split_at_mut(i * kd);
                    let (dgj, dgi) = (&mut lo[j * kd..(j + 1) * kd], &mut hi[..kd]);
                    for ch in 0..kd {
                        let r = e[ch] * qi[ch] * kj[ch];
                        dgi[ch] += r;
                        dgj[ch] -= r;
                    }
                }
            }
        }
        // The last row of Γ also decays the carried state and scales every K̃ row.
        let last = decay.exp_last();
        let hd = h[n].hadamard(&dh[n]).row_sums();
        let mut extra: Vec<f64> = last.iter().zip(&hd).map(|(a, b)| a * b).collect();
        for r in 0..c - 1 {
            axpy(&mut extra, 1.0, kds.row(r));
        }
        axpy(dg.row_mut(c - 1), 1.0, &extra);

        out.d_wy_w.set_rows(s, &dvn.rows_range(s, end).matmul_t(&h[n]).scaled(-1.0));
        out.dq.set_rows(s, &dq);
        out.dk.set_rows(s, &dk);
        out.dgamma.set_rows(s, &dg);
    }
    out
}
