//! `(I + L)^{-1}` for a strictly-lower `L`, computed the way fla's `solve_tril` does it.
//!
//! Source: gdn-math.md §3.3 (fla `fla/ops/utils/solve_tril.py`,
//! `fla/ops/gated_delta_rule/chunk_fwd.py`). The chunk is cut into 16x16 blocks:
//! 1. each diagonal block is inverted by forward substitution,
//!    `N[i,j] = −L[i,j] − Σ_{j<m<i} L[i,m] N[m,j]`, `Ai_kk = I + N`;
//! 2. off-diagonal blocks are merged in order of block distance,
//!    `Ai_IJ = −Ai_II · Σ_{M=J}^{I−1} L_IM · Ai_MJ`.
//!
//! A partial last chunk (`c` not a multiple of 16) has a short last block; rows past `c` do not exist.

use super::tensor::Mat;

/// Block size of the diagonal forward substitution (fla's `BC`).
pub const BLOCK: usize = 16;

/// Blocked inverse of `I + L`, `L` strictly lower `[c, c]`. Returns `Ai` `[c, c]`, lower
/// triangular with a unit diagonal. Only the strictly-lower part of `l` is read.
pub fn blocked_inverse(l: &Mat) -> Mat {
    let c = l.rows;
    assert_eq!(l.cols, c, "blocked_inverse: L must be square");
    let nb = c.div_ceil(BLOCK);
    let span = |blk: usize| (blk * BLOCK, ((blk + 1) * BLOCK).min(c));
    let mut ai = Mat::zeros(c, c);
    // 1. diagonal blocks by forward substitution, one row at a time (as a vector update).
    for blk in 0..nb {
        let (s, e) = span(blk);
        for i in s..e {
            for j in s..i {
                let mut acc = -l[(i, j)];
                for m in (j + 1)..i {
                    acc -= l[(i, m)] * ai[(m, j)];
                }
                ai[(i, j)] = acc;
            }
            ai[(i, i)] = 1.0;
        }
    }
    // 2. off-diagonal blocks, nearest diagonal first, so every Ai_MJ needed is ready.
    for dist in 1..nb {
        for bj in 0..(nb - dist) {
            let bi = bj + dist;
            let (is, ie) = span(bi);
            let (js, je) = span(bj);
            // tmp = Σ_{M=J}^{I−1} L_IM · Ai_MJ   (rows of block I, columns of block J)
            let mut tmp = Mat::zeros(ie - is, je - js);
            for i in is..ie {
                for m in js..is {
                    let lim = l[(i, m)];
                    if lim == 0.0 {
                        continue;
                    }
                    for j in js..je.min(m + 1) {
                        tmp[(i - is, j - js)] += lim * ai[(m, j)];
                    }
                }
            }
            // Ai_IJ = −Ai_II · tmp
            for i in is..ie {
                for j in js..je {
                    let mut acc = 0.0;
                    for m in is..=i {
                        acc += ai[(i, m)] * tmp[(m - is, j - js)];
                    }
                    ai[(i, j)] = -acc;
                }
            }
        }
    }
    ai
}

/// Plain (unblocked) forward substitution for `(I + L)^{-1}`: the cross-check for
/// [`blocked_inverse`].
pub fn unblocked_inverse(l: &Mat) -> Mat {
    let c = l.rows;
    let mut ai = Mat::eye(c);
    for i in 0..c {
        for j in 0..i {
            let mut acc = -l[(i, j)];
            for m in (j + 1)..i {
                acc -= l[(i, m)] * ai[(m, j)];
            }
            ai[(i, j)] = acc;
        }
    }
    ai
}
