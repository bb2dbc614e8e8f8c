//! Forward stages of the chunkwise algorithm, in fla's order (gdn-math.md §3):
//! cumsum → L and `Ai = (I+L)^{-1}` → W, U (WY form) → inter-chunk state scan → output.
//! Each function works on one sequence and head; `[T, ·]` matrices hold every chunk's rows.

use super::intra::{chunk_ranges, Decay};
use super::inverse::blocked_inverse;
use super::tensor::Mat;

/// Intra-chunk matrix `L` `[c, c]` of one chunk (§3.2):
/// `L_ij = Σ_c b_ic k_ic k_jc exp(Γ_ic − Γ_jc)` for `i > j`, else 0.
pub fn build_l(k: &Mat, b: &Mat, decay: &Decay) -> Mat {
    let c = k.rows;
    let mut l = Mat::zeros(c, c);
    let mut e = vec![0.0; k.cols];
    let bk = b.hadamard(k);
    for i in 1..c {
        for j in 0..i {
            decay.pair(i, j, &mut e);
            l[(i, j)] = dot3(bk.row(i), k.row(j), &e);
        }
    }
    l
}

/// Causal score matrix `P` `[c, c]` of one chunk (§3.6):
/// `P_ij = scale · Σ_c q_ic k_jc exp(Γ_ic − Γ_jc)` for `i ≥ j`, else 0.
pub fn build_p(q: &Mat, k: &Mat, decay: &Decay, scale: f64) -> Mat {
    let c = q.rows;
    let mut p = Mat::zeros(c, c);
    let mut e = vec![0.0; q.cols];
    for i in 0..c {
        for j in 0..=i {
            decay.pair(i, j, &mut e);
            p[(i, j)] = scale * dot3(q.row(i), k.row(j), &e);
        }
    }
    p
}

/// `Pᵀ` of every chunk, stored as `[T, C]`: row `t` is key row `j = t mod C` of its chunk,
/// column `i` holds `P_ij` (the query row `i ≥ j`; 0 for `i < j` and past a partial chunk's
/// length). fla's chunk_kda and chunk_gla save the same scores (`Aqk`, query-major) for their
/// backward; tilec's `scores_channel` stores this key-major form (`pt`). Not part of
/// [`super::chunk::Saved`]: only a verifier judging or feeding a saved `pt` needs it.
///
/// `q`, `k`, `gamma`: `[T, K]` (gamma = chunk-local cumsum of g).
pub fn scores_t(q: &Mat, k: &Mat, gamma: &Mat, scale: f64, chunk: usize) -> Mat {
    let mut pt = Mat::zeros(k.rows, chunk);
    for (s, e) in chunk_ranges(k.rows, chunk) {
        let decay = Decay::new(gamma.rows_range(s, e));
        let p = build_p(&q.rows_range(s, e), &k.rows_range(s, e), &decay, scale);
        for j in 0..(e - s) {
            for i in j..(e - s) {
                pt[(s + j, i)] = p[(i, j)];
            }
        }
    }
    pt
}

/// `Ai` of every chunk, stored fla-style as `[T, C]`: row t holds row `t mod C` of its chunk's
/// inverse; columns past a partial chunk's length are 0 (§3.2 + §3.3).
///
/// `k`, `b`, `gamma`: `[T, K]` (gamma = chunk-local cumsum of g).
pub fn kkt_solve(k: &Mat, b: &Mat, gamma: &Mat, chunk: usize) -> Mat {
    let mut ai = Mat::zeros(k.rows, chunk);
    for (s, e) in chunk_ranges(k.rows, chunk) {
        let decay = Decay::new(gamma.rows_range(s, e));
        let inv = blocked_inverse(&build_l(&k.rows_range(s, e), &b.rows_range(s, e), &decay));
        for r in 0..(e - s) {
            ai.row_mut(s + r)[..(e - s)].copy_from_slice(inv.row(r));
        }
    }
    ai
}

/// The `[c, c]` inverse of chunk `[s, e)` out of the `[T, C]` layout.
pub fn chunk_block(ai: &Mat, s: usize, e: usize) -> Mat {
    let c = e - s;
    let mut m = Mat::zeros(c, c);
    for r in 0..c {
        m.row_mut(r).copy_from_slice(&ai.row(s + r)[..c]);
    }
    m
}

/// WY inputs of one chunk: `X_k = b⊙K⊙e^Γ` `[c, K]` and `X_v = w⊙V` `[c, V]` (§3.4).
pub fn wy_inputs(k: &Mat, v: &Mat, b: &Mat, w: &Mat, decay: &Decay) -> (Mat, Mat) {
    (b.hadamard(k).hadamard(&decay.exp_gamma()), w.hadamard(v))
}

/// `W = Ai X_k` `[T, K]` and `U = Ai X_v` `[T, V]` (§3.4, fla `recompute_w_u_fwd`; also B0).
pub fn recompute_w_u(ai: &Mat, k: &Mat, v: &Mat, b: &Mat, w: &Mat, gamma: &Mat, chunk: usize) -> (Mat, Mat) {
    let mut wy_w = Mat::zeros(k.rows, k.cols);
    let mut wy_u = Mat::zeros(v.rows, v.cols);
    for (s, e) in chunk_ranges(k.rows, chunk) {
        let decay = Decay::new(gamma.rows_range(s, e));
        let (xk, xv) = wy_inputs(&k.rows_range(s, e), &v.rows_range(s, e), &b.rows_range(s, e), &w.rows_range(s, e), &decay);
        let a = chunk_block(ai, s, e);
        wy_w.set_rows(s, &a.matmul(&xk));
        wy_u.set_rows(s, &a.matmul(&xv));
    }
    (wy_w, wy_u)
}

/// Result of the inter-chunk state scan.
pub struct ScanOutput {
    /// `h[n]` `[K, V]`: the state entering chunk n (`h[0] = S_0`).
    pub h: Vec<Mat>,
    /// `v_new = U − W h[n]` `[T, V]`: the stacked innovations δ (not decayed).
    pub v_new: Mat,
    /// Final state `[K, V]`.
    pub st: Mat,
}

/// Inter-chunk state scan (§3.5, fla `chunk_gated_delta_rule_fwd_h`; also B1):
/// `v_new = U − W h`, `h ← Diag(e^{Γ_last}) h + (K ⊙ e^{Γ_last − Γ})ᵀ v_new`.
pub fn state_scan(k: &Mat, gamma: &Mat, wy_w: &Mat, wy_u: &Mat, s0: &Mat, chunk: usize) -> ScanOutput {
    let mut h = s0.clone();
    let mut hs = Vec::new();
    let mut v_new = Mat::zeros(wy_u.rows, wy_u.cols);
    for (s, e) in chunk_ranges(k.rows, chunk) {
        hs.push(h.clone());
        let decay = Decay::new(gamma.rows_range(s, e));
        let mut vn = wy_u.rows_range(s, e);
        vn.sub_assign(&wy_w.rows_range(s, e).matmul(&h));
        let kt = k.rows_range(s, e).hadamard(&decay.exp_to_last());
        let last = decay.exp_last();
        for (c, a) in last.iter().enumerate() {
            h.row_mut(c).iter_mut().for_each(|z| *z *= a);
        }
        h.add_assign(&kt.tmatmul(&vn));
        v_new.set_rows(s, &vn);
    }
    ScanOutput { h: hs, v_new, st: h }
}

/// Output (§3.6, fla `chunk_fwd_o`): `O = scale·(Q⊙e^Γ) h[n] + P v_new`, `[T, V]`.
pub fn output(q: &Mat, k: &Mat, gamma: &Mat, h: &[Mat], v_new: &Mat, scale: f64, chunk: usize) -> Mat {
    let mut o = Mat::zeros(v_new.rows, v_new.cols);
    for (n, (s, e)) in chunk_ranges(q.rows, chunk).into_iter().enumerate() {
        let decay = Decay::new(gamma.rows_range(s, e));
        let (qc, kc) = (q.rows_range(s, e), k.rows_range(s, e));
        let mut oc = qc.hadamard(&decay.exp_gamma()).matmul(&h[n]).scaled(scale);
        oc.add_assign(&build_p(&qc, &kc, &decay, scale).matmul(&v_new.rows_range(s, e)));
        o.set_rows(s, &oc);
    }
    o
}

/// `Σ_c x_c y_c z_c`.
#[inline]
pub(crate) fn dot3(x: &[f64], y: &[f64], z: &[f64]) -> f64 {
    x.iter().zip(y).zip(z).map(|((a, b), c)| a * b * c).sum()
}

