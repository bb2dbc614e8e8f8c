//! Intra-chunk helpers: the chunk grid, chunk-local cumulative gates, and pairwise decays
//! `exp(Γ_ic − Γ_jc)` (gdn-math.md §3.1, §3.7).

use super::tensor::Mat;

/// Half-open token ranges `[nC, min((n+1)C, T))` of the chunks of one sequence of `t` tokens.
/// A partial last chunk is kept; chunks never straddle sequences (varlen is split above this).
pub fn chunk_ranges(t: usize, chunk: usize) -> Vec<(usize, usize)> {
    (0..t.div_ceil(chunk)).map(|n| (n * chunk, ((n + 1) * chunk).min(t))).collect()
}

/// Chunk-local cumulative sum of the log-decay `g` `[T, K]`: `Γ_r = Σ_{s≤r} g_{nC+s}`, restarting
/// at every chunk (fla `chunk_local_cumsum`, in natural-log units; fla also scales by log2 e,
/// which only changes how the exponentials are evaluated).
pub fn chunk_local_cumsum(g: &Mat, chunk: usize) -> Mat {
    let mut out = g.clone();
    for (s, e) in chunk_ranges(g.rows, chunk) {
        for r in (s + 1)..e {
            for c in 0..g.cols {
                out[(r, c)] += out[(r - 1, c)];
            }
        }
    }
    out
}

/// Reverse chunk-local cumsum: `dg_t = Σ_{s ≥ t, same chunk} dΓ_s` (B6; the adjoint of
/// [`chunk_local_cumsum`]).
pub fn reverse_chunk_local_cumsum(dgamma: &Mat, chunk: usize) -> Mat {
    let mut out = dgamma.clone();
    for (s, e) in chunk_ranges(dgamma.rows, chunk) {
        for r in (s..e.saturating_sub(1)).rev() {
            for c in 0..dgamma.cols {
                out[(r, c)] += out[(r + 1, c)];
            }
        }
    }
    out
}

/// Largest |Γ| for which `e^{Γ_i}·e^{−Γ_j}` is used instead of `e^{Γ_i − Γ_j}`: both factors stay
/// within about 1e±130, far from fp64 overflow and from subnormals.
const FACTOR_LIMIT: f64 = 300.0;

/// Pairwise decays of one chunk. Holds the chunk's `Γ` `[c, K]`; when every |Γ| is moderate it
/// also holds `e^{Γ}` and `e^{−Γ}`, so a pair costs one multiply per channel instead of one `exp`
/// (a speed device only: the relative error of either form is a few ulp times |Γ|).
pub struct Decay {
    gamma: Mat,
    factors: Option<(Mat, Mat)>,
}

impl Decay {
    /// `gamma`: the chunk's rows of the chunk-local cumsum, `[c, K]`.
    pub fn new(gamma: Mat) -> Self {
        let factors = (gamma.max_abs() <= FACTOR_LIMIT).then(|| {
            let ep = Mat::from_vec(gamma.rows, gamma.cols, gamma.data.iter().map(|x| x.exp()).collect());
            let en = Mat::from_vec(gamma.rows, gamma.cols, gamma.data.iter().map(|x| (-x).exp()).collect());
            (ep, en)
        });
        Decay { gamma, factors }
    }

    /// Rows in the chunk.
    pub fn len(&self) -> usize {
        self.gamma.rows
    }

    /// True for an empty chunk.
    pub fn is_empty(&self) -> bool {
        self.gamma.rows == 0
    }

    /// `out[c] = exp(Γ_ic − Γ_jc)` for every channel.
    #[inline]
    pub fn pair(&self, i: usize, j: usize, out: &mut [f64]) {
        match &self.factors {
            Some((ep, en)) => {
                for ((o, a), b) in out.iter_mut().zip(ep.row(i)).zip(en.row(j)) {
                    *o = a * b;
                }
            }
            None => {
                for ((o, a), b) in out.iter_mut().zip(self.gamma.row(i)).zip(self.gamma.row(j)) {
                    *o = (a - b).exp();
                }
            }
        }
    }

    /// `exp(Γ_r)` `[c, K]`.
    pub fn exp_gamma(&self) -> Mat {
        Mat::from_vec(self.gamma.rows, self.gamma.cols, self.gamma.data.iter().map(|x| x.exp()).collect())
    }

    /// `exp(Γ_last − Γ_r)` `[c, K]`, with `Γ_last` the last valid row.
    pub fn exp_to_last(&self) -> Mat {
        let last = self.gamma.rows - 1;
        let mut m = Mat::zeros(self.gamma.rows, self.gamma.cols);
        for r in 0..self.gamma.rows {
            for c in 0..self.gamma.cols {
                m[(r, c)] = (self.gamma[(last, c)] - self.gamma[(r, c)]).exp();
            }
        }
        m
    }

    /// `exp(Γ_last)` `[K]`.
    pub fn exp_last(&self) -> Vec<f64> {
        self.gamma.row(self.gamma.rows - 1).iter().map(|x| x.exp()).collect()
    }
}
