//! Error profiles of the recurrence classes ([`super::recurrence`]): a first-order,
//! norm-based rounding analysis of the token-serial recurrence, computed from the inputs alone.
//!
//! Every member updates each state column j independently, `S_t[:,j] = A_t S_{t−1}[:,j] +
//! w_t v_tj k_t`, with `A_t = Diag(a_t)` (LA, GLA, SSD; w = 1) or `A_t = (I − β_t k_t k_tᵀ)
//! Diag(a_t)` (KDA, GDN; w = β), `a_t = e^{g_t}`. With `α_t = max_c a_tc`, `κ_t = ‖k_t‖₂` and
//! `b_t = β_t` for the delta members (0 otherwise), `‖A_t‖₂ ≤ ρ_t = α_t max(1, |1 − b_t κ_t²|)`
//! (the eigenvalues of `I − β k kᵀ` are 1 and `1 − βκ²`); with the gates' inputs (g ≤ 0,
//! β ∈ (0,1), unit keys) ρ ≤ 1. Per column j (2-norms; an element is at most its column's norm):
//!
//! * magnitude: `M_0 = ‖s0[:,j]‖`, `M_t = ρ_t M_{t−1} + w_t κ_t |v_tj|`;
//! * local rounding error of step t (Higham Lemma 3.1 / eq. 3.4 per operation; e^g charged 4 ulp
//!   = 8u as the elementwise classes): decay gamma(9)·N, read-out `Ŝᵀk` gamma(K)·Nκ, residual and
//!   β one rounding each, the rank-1 update two: in all `≤ gamma(K + 14)·m_t` with
//!   `N = α_t M_{t−1}` and `m_t = N(1 + 2b_tκ_t²) + 2w_tκ_t|v_tj| + UNDERFLOW(M_{t−1} + √K)`;
//! * underflow: an operation whose result is subnormal errs by up to half a subnormal, u·2^-126
//!   in f32, bf16 and tf32 (`eta`), not by a relative amount, and the state carries such errors
//!   from token to token (a read-out by a large q then amplifies them); a subnormal decay
//!   `e^g` errs by eta·‖S‖. So the local term also charges `UNDERFLOW·(M_{t−1} + √K)`,
//!   UNDERFLOW = 2^-126 (gamma·UNDERFLOW ≥ the eta of every operation counted in the depth).
//!   An f16 accumulator (smallest normal 2^-14) is not covered by this term;
//! * propagated error: an error made at step s reaches step t through `A_t ⋯ A_{s+1}`, of norm
//!   `≤ ρ_t ⋯ ρ_{s+1}`, so `|ΔS_t[c,j]| ≤ gamma·P_t`, `P_t = ρ_t P_{t−1} + m_t` (Higham eq. 4.3's
//!   "u times the running partial sums", here with contraction); `X_t = M_t + P_t`.
//!
//! The adjoint `D_t = ∂L/∂S_t` (after adding `q̃_t do_tᵀ`, q̃ = K^-0.5 q) runs backward through
//! `A_tᵀ` (same norm): `B_{T} = ‖dst[:,j]‖ + σκq_T|do_Tj|`, `B_t = ρ_{t+1}B_{t+1} + σκq_t|do_tj|`
//! (σ = K^-0.5, κq = ‖q_t‖), local error `n_t = (1 + α_t)(1 + 2b_tκ_t²)B_t + σκq_t|do_tj| +
//! UNDERFLOW(B_t + √K)`,
//! `F_t = ρ_{t+1}F_{t+1} + n_t`, `Y_t = B_t + F_t`. A product of two quantities known to within
//! gamma·(error coefficient) carries `≤ gamma·(M + P)(B + F)` to first order, so each output's
//! scale is the sum of such products over its terms (Xp = X_{t−1}, Xc = X_t):
//!
//! | output | scale (all elements of the row / column named) |
//! |---|---|
//! | `o[t, j]` | `σ κq_t Xc_j` |
//! | `st[c, j]` | `X_T,j` |
//! | `dq[t, c]` | `σ Σ_j Xc_j |do_tj|` |
//! | `dk[t, c]` | `Σ_j Y_tj (w_t|v_tj| + 2b_tκ_tα_t Xp_j)` |
//! | `dv[t, j]` | `w_t κ_t Y_tj` |
//! | `dg[t, c]` (scalar g: the same for the sum over c, by Cauchy–Schwarz) | `α_t(1 + b_tκ_t²) Σ_j Y_tj Xp_j` |
//! | `dbeta[t]` | `Σ_j κ_t Y_tj (|v_tj| + κ_tα_t Xp_j)` |
//! | `ds0[c, j]` | `ρ_1 Y_1,j + n_1,j` |
//!
//! **Depth** `2K + 2V + 16` for every output: the state chain's gamma(K + 14), the read-out's
//! gamma(K + 1) and the gradients' V-term (and, for a scalar dg, K-term) dot products, combined
//! with gamma(a) + gamma(b) ≤ gamma(a + b); it also charges `depth·eta` for the K + 1 products
//! that underflow when q is subnormal (EXC-02).
//!
//! **Scope.** The analysis is of the token-serial evaluation (any summation order inside each
//! step's dot products). A chunkwise kernel (fla's WY / UT form) has error sources it does not
//! derive: the decay taken as the exponential of a chunk-local cumulative sum of g (relative
//! error about gamma(C)·Σ|g| over the chunk) and the triangular solve of the delta members; the
//! bound's slack (the honest f32 recurrence passes with margins of 45–250x,
//! `tests/recurrence_candidate.rs`) is not a proof for them. The bound is still far below a bf16
//! rounding of the output or a dropped decay of s0 (the red team there).

use super::recurrence::{bthkv, layout, scale_of};
use super::Dims;
use crate::error_model::ErrorProfile;
use crate::recurrence::family::{Gate, Model};

/// The underflow allowance per unit of magnitude: the smallest normal of f32 (and bf16, tf32),
/// so that `gamma(depth, u)·UNDERFLOW` is at least `depth` half-subnormals (see the module doc).
pub const UNDERFLOW: f64 = 1.1754943508222875e-38;

/// The depth charged to every output and gradient: `2K + 2V + 16`.
pub fn depth(d: &Dims) -> usize {
    2 * d.get("K") + 2 * d.get("V") + 16
}

/// Per-token quantities of one (b, h): κ_t, κq_t, α_t, b_t, w_t, ρ_t.
struct Token {
    kappa: f64,
    kappa_q: f64,
    alpha: f64,
    b: f64,
    w: f64,
    rho: f64,
}

/// Index helpers for fla's layouts.
struct Ix {
    t: usize,
    h: usize,
    k: usize,
    v: usize,
}

impl Ix {
    fn bthk(&self, b: usize, t: usize, h: usize) -> usize {
        ((b * self.t + t) * self.h + h) * self.k
    }
    fn bthv(&self, b: usize, t: usize, h: usize) -> usize {
        ((b * self.t + t) * self.h + h) * self.v
    }
    fn bth(&self, b: usize, t: usize, h: usize) -> usize {
        (b * self.t + t) * self.h + h
    }
    fn bhkv(&self, b: usize, h: usize) -> usize {
        (b * self.h + h) * self.k * self.v
    }
}

fn norm(x: &[f64]) -> f64 {
    x.iter().map(|e| e * e).sum::<f64>().sqrt()
}

fn tokens(model: Model, ix: &Ix, xs: &[&[f64]], b: usize, h: usize) -> Vec<Token> {
    let (gi, bi, _) = layout(model);
    (0..ix.t)
        .map(|t| {
            let at = ix.bthk(b, t, h);
            let kappa = norm(&xs[1][at..at + ix.k]);
            let kappa_q = norm(&xs[0][at..at + ix.k]);
            let alpha = match (gi, model.gate()) {
                (Some(i), Gate::Scalar) => xs[i][ix.bth(b, t, h)].exp(),
                (Some(i), _) => xs[i][at..at + ix.k].iter().fold(0.0f64, |m, g| m.max(g.exp())),
                _ => 1.0,
            };
            let beta = bi.map(|i| xs[i][ix.bth(b, t, h)]);
            let (bg, w) = match beta {
                Some(be) => (be, be),
                None => (0.0, 1.0),
            };
            let rho = alpha * (1.0 - bg * kappa * kappa).abs().max(1.0);
            Token { kappa, kappa_q, alpha, b: bg, w: w.abs(), rho }
        })
        .collect()
}

/// Forward chain of one column: `X_t = M_t + P_t` for t = 0..T (X_0 = ‖s0[:,j]‖).
fn forward_chain(tok: &[Token], s0_col_norm: f64, root_k: f64, v_col: impl Fn(usize) -> f64) -> Vec<f64> {
    let (mut m, mut p) = (s0_col_norm, 0.0);
    let mut x = Vec::with_capacity(tok.len() + 1);
    x.push(m);
    for (t, k) in tok.iter().enumerate() {
        let vj = v_col(t).abs();
        let n = k.alpha * m;
        let local = n * (1.0 + 2.0 * k.b * k.kappa * k.kappa) + 2.0 * k.w * k.kappa * vj + UNDERFLOW * (m + root_k);
        p = k.rho * p + local;
        m = k.rho * m + k.w * k.kappa * vj;
        x.push(m + p);
    }
    x
}

/// `X_t` of every (b, h, j), indexed `[b][h][j][t]`.
type Chains = Vec<Vec<Vec<Vec<f64>>>>;
/// The per-token quantities of every (b, h), indexed `[b][h][t]`.
type Tokens = Vec<Vec<Vec<Token>>>;

/// Forward chain of every (b, h, j), with the per-token quantities.
fn all_forward(model: Model, d: &Dims, xs: &[&[f64]]) -> (Ix, Chains, Tokens) {
    let (bn, t, h, k, v) = bthkv(d);
    let ix = Ix { t, h, k, v };
    let s0 = xs[xs.len() - 1];
    let mut chains = Vec::with_capacity(bn);
    let mut toks = Vec::with_capacity(bn);
    for b in 0..bn {
        let (mut cb, mut tb) = (Vec::with_capacity(h), Vec::with_capacity(h));
        for hh in 0..h {
            let tok = tokens(model, &ix, xs, b, hh);
            let base = ix.bhkv(b, hh);
            let cols: Vec<Vec<f64>> = (0..v)
                .map(|j| {
                    let s0n = (0..k).map(|c| s0[base + c * v + j].powi(2)).sum::<f64>().sqrt();
                    forward_chain(&tok, s0n, (k as f64).sqrt(), |tt| xs[2][ix.bthv(b, tt, hh) + j])
                })
                .collect();
            cb.push(cols);
            tb.push(tok);
        }
        chains.push(cb);
        toks.push(tb);
    }
    (ix, chains, toks)
}

/// Profiles of `o` and `st` (see the module doc): `xs` are the class's f64 inputs, of the
/// lengths [`super::Op::forward`] has checked (`q k v [g] [beta] s0` at `d`).
pub fn forward_profiles(model: Model, d: &Dims, xs: &[&[f64]]) -> Vec<ErrorProfile> {
    let (bn, t, h, k, v) = bthkv(d);
    let sigma = scale_of(d);
    let (ix, chains, toks) = all_forward(model, d, xs);
    let mut o = vec![0.0; bn * t * h * v];
    let mut st = vec![0.0; bn * h * k * v];
    for b in 0..bn {
        for hh in 0..h {
            for j in 0..v {
                let x = &chains[b][hh][j];
                for tt in 0..t {
                    o[ix.bthv(b, tt, hh) + j] = sigma * toks[b][hh][tt].kappa_q * x[tt + 1];
                }
                for c in 0..k {
                    st[ix.bhkv(b, hh) + c * v + j] = x[t];
                }
            }
        }
    }
    let depth = depth(d);
    vec![ErrorProfile { depth, scale: o }, ErrorProfile { depth, scale: st }]
}

/// Profiles of the input gradients `dq, dk, dv, [dg], [dbeta], ds0` given the output gradients
/// `grads = [do [B,T,H,V], dst [B,H,K,V]]` (see the module doc); inputs as for
/// [`forward_profiles`]. A missing or short gradient counts as 0.
pub fn backward_profiles(model: Model, d: &Dims, xs: &[&[f64]], grads: &[&[f64]]) -> Vec<ErrorProfile> {
    let (bn, t, h, k, v) = bthkv(d);
    let sigma = scale_of(d);
    let (gi, bi, _) = layout(model);
    let (ix, chains, toks) = all_forward(model, d, xs);
    let (d_o, dst) = (grads.first().copied().unwrap_or(&[]), grads.get(1).copied().unwrap_or(&[]));
    let n_bthk = bn * t * h * k;
    let (mut dq, mut dk, mut dv) = (vec![0.0; n_bthk], vec![0.0; n_bthk], vec![0.0; bn * t * h * v]);
    let mut dg = vec![0.0; if model.gate() == Gate::Scalar { bn * t * h } else { n_bthk }];
    let mut dbeta = vec![0.0; bn * t * h];
    let mut ds0 = vec![0.0; bn * h * k * v];
    let do_at = |b: usize, tt: usize, hh: usize, j: usize| d_o.get(ix.bthv(b, tt, hh) + j).copied().unwrap_or(0.0).abs();
    for b in 0..bn {
        for hh in 0..h {
            let tok = &toks[b][hh];
            // Adjoint chain per column: y[j][t] = B_t + F_t, and ds0's coefficient.
            let mut y = vec![vec![0.0; t]; v];
            for (j, yj) in y.iter_mut().enumerate() {
                let base = ix.bhkv(b, hh);
                let dst_n = (0..k).map(|c| dst.get(base + c * v + j).copied().unwrap_or(0.0).powi(2)).sum::<f64>().sqrt();
                let (mut bb, mut ff) = (dst_n, 0.0);
                let mut last_n = 0.0;
                for tt in (0..t).rev() {
                    let tk = &tok[tt];
                    let inject = sigma * tk.kappa_q * do_at(b, tt, hh, j);
                    bb += inject;
                    let n = (1.0 + tk.alpha) * (1.0 + 2.0 * tk.b * tk.kappa * tk.kappa) * bb + inject + UNDERFLOW * (bb + (k as f64).sqrt());
                    ff += n;
                    yj[tt] = bb + ff;
                    last_n = n;
                    bb *= tk.rho;
                    ff *= tk.rho;
                }
                for c in 0..k {
                    ds0[base + c * v + j] = tok[0].rho * yj[0] + last_n;
                }
            }
            for (tt, tk) in tok.iter().enumerate() {
                let xc = |j: usize| chains[b][hh][j][tt + 1];
                let xp = |j: usize| chains[b][hh][j][tt];
                let sq: f64 = sigma * (0..v).map(|j| xc(j) * do_at(b, tt, hh, j)).sum::<f64>();
                let sk: f64 = (0..v).map(|j| y[j][tt] * (tk.w * xs[2][ix.bthv(b, tt, hh) + j].abs() + 2.0 * tk.b * tk.kappa * tk.alpha * xp(j))).sum();
                let sg: f64 = tk.alpha * (1.0 + tk.b * tk.kappa * tk.kappa) * (0..v).map(|j| y[j][tt] * xp(j)).sum::<f64>();
                let sb: f64 = (0..v).map(|j| tk.kappa * y[j][tt] * (xs[2][ix.bthv(b, tt, hh) + j].abs() + tk.kappa * tk.alpha * xp(j))).sum();
                let at = ix.bthk(b, tt, hh);
                dq[at..at + k].iter_mut().for_each(|e| *e = sq);
                dk[at..at + k].iter_mut().for_each(|e| *e = sk);
                for j in 0..v {
                    dv[ix.bthv(b, tt, hh) + j] = tk.w * tk.kappa * y[j][tt];
                }
                if model.gate() == Gate::Scalar {
                    dg[ix.bth(b, tt, hh)] = sg;
                } else {
                    dg[at..at + k].iter_mut().for_each(|e| *e = sg);
                }
                dbeta[ix.bth(b, tt, hh)] = sb;
            }
        }
    }
    let depth = depth(d);
    let mut out = vec![ErrorProfile { depth, scale: dq }, ErrorProfile { depth, scale: dk }, ErrorProfile { depth, scale: dv }];
    if gi.is_some() {
        out.push(ErrorProfile { depth, scale: dg });
    }
    if bi.is_some() {
        out.push(ErrorProfile { depth, scale: dbeta });
    }
    out.push(ErrorProfile { depth, scale: ds0 });
    out
}
