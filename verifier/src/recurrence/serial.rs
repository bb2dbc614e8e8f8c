//! Token-serial fp64 forward and exact backward of the general recurrence (the oracle).
//!
//! Source: gdn-math.md §2. Forward, per token:
//! `a = e^{g_t}`, `Ŝ = Diag(a) S_{t−1}`, `e = b_t⊙k_t`, `δ = w_t⊙v_t − Ŝᵀe`, `S_t = Ŝ + k_t δᵀ`,
//! `o_t = S_tᵀ(scale·q_t)`. Backward, carrying `D = ∂L/∂S_t` from `dst`:
//! `D += q̃_t do_tᵀ`, then the gradients of each step in reverse, and
//! `D ← Diag(a)(I − e kᵀ) D`, which is the transpose of the forward transition.
//!
//! All states `S_0..S_T` are kept (T·K·V values) so the backward is exact, not recomputed.

use super::problem::{HeadGrads, HeadInputs, HeadOutputs, HeadSeeds};
use super::tensor::{axpy, dot, Mat};
use super::RecurrenceError;

/// Forward pass. Returns `o` `[T, V]` and `S_T` `[K, V]`.
///
/// Errors: shape mismatch or non-finite input ([`RecurrenceError`]).
pub fn forward(x: &HeadInputs) -> Result<HeadOutputs, RecurrenceError> {
    x.validate()?;
    let (out, _) = run_forward(x, false);
    Ok(out)
}

/// Forward and backward. Returns the outputs and the gradients of
/// `L = Σ o⊙do + Σ S_T⊙dst`.
///
/// Errors: shape mismatch or non-finite input/seed ([`RecurrenceError`]).
pub fn forward_backward(x: &HeadInputs, s: &HeadSeeds) -> Result<(HeadOutputs, HeadGrads), RecurrenceError> {
    x.validate()?;
    let (t_len, kd, vd) = x.dims();
    s.validate(t_len, kd, vd)?;
    let (out, states) = run_forward(x, true);

    let mut gr = HeadGrads {
        dq: Mat::zeros(t_len, kd),
        dk: Mat::zeros(t_len, kd),
        dv: Mat::zeros(t_len, vd),
        dg: Mat::zeros(t_len, kd),
        db: Mat::zeros(t_len, kd),
        dw: Mat::zeros(t_len, vd),
        ds0: Mat::zeros(kd, vd),
    };
    let mut d = s.dst.clone();
    let mut s_hat = Mat::zeros(kd, vd);
    let mut ddelta = vec![0.0; vd];
    let mut delta = vec![0.0; vd];
    for t in (0..t_len).rev() {
        let (q, k, g, b) = (x.q.row(t), x.k.row(t), x.g.row(t), x.b.row(t));
        let (v, w, dout) = (x.v.row(t), x.w.row(t), s.d_o.row(t));
        let s_prev = &states[t];
        let s_cur = &states[t + 1];
        // Recompute Ŝ and δ of this step from the stored S_{t−1}.
        for c in 0..kd {
            let a = g[c].exp();
            for (dst, src) in s_hat.row_mut(c).iter_mut().zip(s_prev.row(c)) {
                *dst = a * src;
            }
        }
        for j in 0..vd {
            delta[j] = w[j] * v[j];
        }
        for c in 0..kd {
            axpy(&mut delta, -(b[c] * k[c]), s_hat.row(c));
        }
        // The output reads S_t: D += q̃ doᵀ, dq = scale · S_t do.
        for c in 0..kd {
            axpy(d.row_mut(c), x.scale * q[c], dout);
            gr.dq[(t, c)] = x.scale * dot(s_cur.row(c), dout);
        }
        // From S_t = Ŝ + k δᵀ: dk = D δ, dδ = Dᵀ k.
        ddelta.iter_mut().for_each(|z| *z = 0.0);
        for c in 0..kd {
            gr.dk[(t, c)] = dot(d.row(c), &delta);
            axpy(&mut ddelta, k[c], d.row(c));
        }
        for j in 0..vd {
            gr.dw[(t, j)] = ddelta[j] * v[j];
            gr.dv[(t, j)] = ddelta[j] * w[j];
        }
        // From δ = w⊙v − Ŝᵀ e: de = −Ŝ dδ, dŜ = D − e dδᵀ; then through e = b⊙k and Ŝ = Diag(a) S.
        for c in 0..kd {
            let de = -dot(s_hat.row(c), &ddelta);
            gr.db[(t, c)] = de * k[c];
            gr.dk[(t, c)] += de * b[c];
            let e = b[c] * k[c];
            let a = g[c].exp();
            let drow = d.row_mut(c);
            axpy(drow, -e, &ddelta);
            gr.dg[(t, c)] = dot(drow, s_hat.row(c));
            drow.iter_mut().for_each(|z| *z *= a);
        }
    }
    gr.ds0 = d;
    Ok((out, gr))
}

/// Runs the forward; when `keep` is set, also returns every state `S_0..S_T`.
fn run_forward(x: &HeadInputs, keep: bool) -> (HeadOutputs, Vec<Mat>) {
    let (t_len, kd, vd) = x.dims();
    let mut st = x.s0.clone();
    let mut states = Vec::with_capacity(if keep { t_len + 1 } else { 0 });
    let mut o = Mat::zeros(t_len, vd);
    let mut delta = vec![0.0; vd];
    for t in 0..t_len {
        if keep {
            states.push(st.clone());
        }
        let (q, k, g, b) = (x.q.row(t), x.k.row(t), x.g.row(t), x.b.row(t));
        let (v, w) = (x.v.row(t), x.w.row(t));
        for c in 0..kd {
            let a = g[c].exp();
            st.row_mut(c).iter_mut().for_each(|z| *z *= a);
        }
        for j in 0..vd {
            delta[j] = w[j] * v[j];
        }
        for c in 0..kd {
            axpy(&mut delta, -(b[c] * k[c]), st.row(c));
        }
        let orow = o.row_mut(t);
        for c in 0..kd {
            let srow = st.row_mut(c);
            axpy(srow, k[c], &delta);
            axpy(orow, x.scale * q[c], srow);
        }
    }
    if keep {
        states.push(st.clone());
    }
    (HeadOutputs { o, st }, states)
}
