//! K#1: the reverse inter-chunk state scan (stage B3 of the chunked backward).
//!
//! Source: gdn-math.md §4 "B3" and "Kernel contracts" (fla `common/chunk_delta_h.py`,
//! `chunk_gated_delta_rule_bwd_dhu`). Per sequence and head, serial over chunks n = N−1..0,
//! carrying `D` `[K, V]` from `dht`:
//!
//! ```text
//! dh[n] = D                                         (= ∂L/∂h[n+1], the state leaving chunk n)
//! dVn   = (K ⊙ e^{Γ_last − Γ}) D + dv_local          (c x V; total ∂L/∂v_new = ∂L/∂U)
//! D     = Diag(e^{Γ_last}) D + scale·(Q ⊙ e^Γ)ᵀ dO − Wᵀ dVn
//! dh0   = D after n = 0
//! ```
//! The GPU kernel holds `D` in fp32 and stores `dh`, `dVn` in bf16; here everything is fp64.

use super::intra::{chunk_ranges, Decay};
use super::problem::check_shape;
use super::tensor::Mat;
use super::RecurrenceError;

/// Outputs of K#1 for one sequence and head.
#[derive(Clone, Debug)]
pub struct K1Output {
    /// `dh[n]` `[K, V]` for n = 0..N−1: gradient w.r.t. the state leaving chunk n.
    pub dh: Vec<Mat>,
    /// `dVn` `[T, V]`: gradient w.r.t. `v_new` (equivalently `U`).
    pub dvn: Mat,
    /// `dh0` `[K, V]`: gradient w.r.t. the initial state.
    pub dh0: Mat,
}

/// Reverse state scan (K#1) for one sequence and head.
///
/// Inputs: `q`, `k`, `wy_w` (the WY matrix `W`) `[T, K]`; `gamma` `[T, K]` (chunk-local cumsum
/// of g, natural log); `d_o`, `dv_local` `[T, V]`; `dht` `[K, V]`; `scale`; `chunk` (C).
///
/// Errors: [`RecurrenceError::Shape`] if the shapes disagree.
#[allow(clippy::too_many_arguments)]
pub fn reverse_state_scan(
    q: &Mat,
    k: &Mat,
    wy_w: &Mat,
    gamma: &Mat,
    d_o: &Mat,
    dv_local: &Mat,
    dht: &Mat,
    scale: f64,
    chunk: usize,
) -> Result<K1Output, RecurrenceError> {
    let (t, kd, vd) = (q.rows, q.cols, d_o.cols);
    for (name, m, r, c) in [("k", k, t, kd), ("w", wy_w, t, kd), ("gamma", gamma, t, kd), ("dv_local", dv_local, t, vd), ("dht", dht, kd, vd)] {
        check_shape(name, m, r, c)?;
    }
    check_shape("do", d_o, t, vd)?;
    let ranges = chunk_ranges(t, chunk);
    let mut d = dht.clone();
    let mut dh = vec![Mat::zeros(kd, vd); ranges.len()];
    let mut dvn = Mat::zeros(t, vd);
    for (n, &(s, e)) in ranges.iter().enumerate().rev() {
        dh[n] = d.clone();
        let decay = Decay::new(gamma.rows_range(s, e));
        let kt = k.rows_range(s, e).hadamard(&decay.exp_to_last());
        let mut dv = kt.matmul(&d);
        dv.add_assign(&dv_local.rows_range(s, e));
        let last = decay.exp_last();
        for (c, a) in last.iter().enumerate() {
            d.row_mut(c).iter_mut().for_each(|z| *z *= a);
        }
        let qg = q.rows_range(s, e).hadamard(&decay.exp_gamma());
        d.add_assign(&qg.tmatmul(&d_o.rows_range(s, e)).scaled(scale));
        d.sub_assign(&wy_w.rows_range(s, e).tmatmul(&dv));
        dvn.set_rows(s, &dv);
    }
    Ok(K1Output { dh, dvn, dh0: d })
}
