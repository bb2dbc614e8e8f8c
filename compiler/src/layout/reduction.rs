//! The order in which a row reduction (`row_sum`, `row_max`, `row_min`) folds a row, shared by
//! the back ends and the interpreter so that both give the same bits.
//!
//! A row of `n` elements is reduced by `W = min(32, n.next_power_of_two())` lanes of one warp:
//! lane `l` folds elements `l, l + W, l + 2W, …` in that order, starting from the identity
//! (+0.0 for sums, ∓∞ for max/min); the `W` partials are then combined by a butterfly, lane `l`
//! folding its partial with lane `l ⊕ s`'s for `s = W/2, …, 2, 1`; the result is lane 0's.
//! (Sum, max and min are commutative, so both lanes of a pair hold the same value after each
//! step.) A warp thus reads 32 consecutive elements of a row per step. Before, one thread
//! folded a whole row left to right: 32 threads read the same column of 32 rows, which a
//! row-major tile of 128-byte rows puts in one shared-memory bank — a 32-way conflict that
//! made the row sums of dqkwg and K#2 most of their shared-memory time on the H200.
//!
//! Column reductions keep one thread per column, folding down the rows in order.

/// Threads per warp, the widest butterfly.
pub const WARP: u32 = 32;

/// The lanes `W` that reduce a row of `n` elements.
pub fn row_lanes(n: u32) -> u32 {
    n.next_power_of_two().clamp(1, WARP)
}

/// The butterfly's partner distances for `w` lanes, in order: `w/2, …, 2, 1` (empty for one
/// lane). Lane `l` folds its partial with lane `l ⊕ s`'s at each step `s`.
pub fn butterfly(w: u32) -> impl Iterator<Item = u32> {
    std::iter::successors(Some(w / 2), |s| Some(s / 2)).take_while(|&s| s >= 1)
}

/// Lanes of a row one thread may hold in registers ([`RowPlan`]): 8 partials, so that a
/// reduction adds at most 8 registers per row it folds at once.
pub const MAX_LANES_PER_THREAD: u32 = 8;

/// How a CTA's threads run the row reductions of a `rows × cols` tile in shared memory (or
/// evaluated element by element) in the order above. `u` consecutive threads take a row and
/// each holds `k = W / u` of its `W` lanes: thread `t` lanes `t + u·m`, `m < k`. The butterfly's
/// steps `s ≥ u` join lanes of one thread, the steps `s < u` are `shfl.sync.bfly` between
/// threads `t` and `t ⊕ s`. `u = W` is a lane per thread, as the order is defined; fewer threads
/// per row only when the CTA has too few threads for one pass over the rows, so that a thread
/// folds in registers what would otherwise be further passes, each with `log2 W` shuffles
/// (dqkwg_channel's distance loop: two `[64, 16]` row sums at 256 threads took 4 passes and 32
/// shuffles per step; as 4 threads per row, one pass and 4 shuffles).
///
/// Register `j` of a thread holds lane `m = (j + ρ) mod k`, where `ρ` = [`RowPlan::rotation`] of
/// the row: rows of a warp whose f32 elements start in the same shared-memory bank read
/// different columns with the same instruction, so the loads do not conflict. The in-thread
/// steps pair registers `j` and `j + d` (lanes `m` and `m ⊕ d`: adding `d` modulo `2d`-aligned
/// `k` flips that bit), so the rotation changes only the order of a fold's two operands, and sum,
/// max and min are commutative: the result is the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPlan {
    /// Lanes of the order, [`row_lanes`]`(cols)`.
    pub w: u32,
    /// Threads per row (a power of two dividing `w`).
    pub u: u32,
    /// Lanes per thread, `w / u`.
    pub k: u32,
    /// Rows whose first f32 element falls in distinct banks, `32 / gcd(cols, 32)`: rows
    /// `r / cycle` apart start in the same bank, so the rotation steps every `cycle` rows.
    pub cycle: u32,
}

impl RowPlan {
    /// The plan for a `rows × cols` tile reduced by `threads` threads (a multiple of 32).
    pub fn new(rows: u32, cols: u32, threads: u32) -> Self {
        let w = row_lanes(cols);
        let mut u = w;
        while u > 1 && w / u < MAX_LANES_PER_THREAD && u64::from(rows) * u64::from(u) > u64::from(threads) {
            u /= 2;
        }
        let cycle = WARP / (cols.max(1) & cols.max(1).wrapping_neg()).min(WARP);
        RowPlan { w, u, k: w / u, cycle }
    }

    /// The rotation `ρ` of `row`'s lanes in its threads' registers.
    pub fn rotation(&self, row: u32) -> u32 {
        (row / self.cycle) % self.k
    }

    /// The lane that register `j` of thread `t` (`t < u`) holds for `row`.
    pub fn lane(&self, row: u32, t: u32, j: u32) -> u32 {
        t + self.u * ((j + self.rotation(row)) % self.k)
    }
}

/// Folds `xs` (one row) in the row-reduction order with `fold`, starting every lane from
/// `init`; `fold`'s error (an integer overflow) stops it.
///
/// # Errors
/// The first error `fold` returns.
pub fn fold_row<T: Copy, E>(xs: &[T], init: T, mut fold: impl FnMut(T, T) -> Result<T, E>) -> Result<T, E> {
    let w = row_lanes(u32::try_from(xs.len()).unwrap_or(u32::MAX)) as usize;
    let mut p = vec![init; w];
    for (i, &x) in xs.iter().enumerate() {
        p[i % w] = fold(p[i % w], x)?;
    }
    for s in butterfly(w as u32) {
        let q = p.clone();
        for (l, slot) in p.iter_mut().enumerate() {
            *slot = fold(q[l], q[l ^ s as usize])?;
        }
    }
    Ok(p[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(xs: &[f32]) -> f32 {
        fold_row(xs, 0.0f32, |a, b| Ok::<_, ()>(a + b)).unwrap_or(f32::NAN)
    }

    #[test]
    fn lanes_are_the_next_power_of_two_up_to_a_warp() {
        assert_eq!([1, 2, 3, 5, 16, 17, 32, 33, 128].map(row_lanes), [1, 2, 4, 8, 16, 32, 32, 32, 32]);
    }

    #[test]
    fn the_butterfly_halves_the_distance_down_to_one() {
        assert_eq!(butterfly(32).collect::<Vec<_>>(), [16, 8, 4, 2, 1]);
        assert_eq!(butterfly(4).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(butterfly(1).count(), 0);
    }

    #[test]
    fn the_order_is_strided_partials_then_a_butterfly() {
        // Three elements, W = 4: lanes (x0), (x1), (x2), (0); then (x0 + x2) + x1.
        let (a, b, c) = (1.0f32, 1e-8f32, -1.0f32);
        assert_eq!(sum(&[a, b, c]), (a + c) + b);
        assert_ne!(sum(&[a, b, c]), (a + b) + c, "a left-to-right fold would round 1e-8 away");
        // 64 elements, W = 32: lane l holds x_l + x_{l+32}; pairs (l, l ⊕ 16) first.
        let xs: Vec<f32> = (0..64).map(|i| (i as f32).sin() * 10f32.powi(i % 7 - 3)).collect();
        let mut p: Vec<f32> = (0..32).map(|l| 0.0 + xs[l] + xs[l + 32]).collect();
        for s in [16, 8, 4, 2, 1] {
            p = (0..32).map(|l| p[l] + p[l ^ s]).collect();
        }
        assert_eq!(sum(&xs).to_bits(), p[0].to_bits());
    }

    /// Runs a row as [`RowPlan`] lays it out: each thread folds its registers' lanes, joins
    /// them in-thread, then the threads' butterfly; symbols stand for elements (element `c` is
    /// `c + 1`, the identity 0) and folds are interned with sorted children (commutative), so
    /// equal results mean the same elements folded in the same tree as [`fold_row`].
    fn planned_row(trees: &mut std::collections::HashMap<(u64, u64), u64>, plan: RowPlan, row: u32, cols: u32) -> u64 {
        let mut fold = |a: u64, b: u64| {
            let next = 1_000_000 + trees.len() as u64;
            *trees.entry((a.min(b), a.max(b))).or_insert(next)
        };
        let mut per_thread = Vec::new();
        for t in 0..plan.u {
            let mut regs: Vec<u64> = (0..plan.k)
                .map(|j| {
                    let lane = plan.lane(row, t, j);
                    (lane..cols).step_by(plan.w as usize).fold(0, |acc, c| fold(acc, u64::from(c) + 1))
                })
                .collect();
            for d in butterfly(plan.k) {
                for j in 0..d as usize {
                    regs[j] = fold(regs[j], regs[j + d as usize]);
                }
            }
            per_thread.push(regs[0]);
        }
        for s in butterfly(plan.u) {
            let q = per_thread.clone();
            for (t, slot) in per_thread.iter_mut().enumerate() {
                *slot = fold(q[t], q[t ^ s as usize]);
            }
        }
        per_thread[0]
    }

    #[test]
    fn a_planned_row_folds_the_same_tree_as_the_order() {
        let mut trees = std::collections::HashMap::new();
        let mut shrunk = 0;
        for threads in [32, 128, 256, 512] {
            for rows in [1, 3, 16, 64, 100, 256, 1024] {
                for cols in [1, 2, 3, 5, 8, 12, 16, 17, 32, 33, 64, 100, 128, 300] {
                    let plan = RowPlan::new(rows, cols, threads);
                    assert_eq!(plan.u * plan.k, plan.w);
                    assert!(plan.k <= MAX_LANES_PER_THREAD && plan.u.is_power_of_two());
                    shrunk += usize::from(plan.k > 1);
                    for row in [0, 1, 2, 5, rows / 2, rows - 1] {
                        let elems: Vec<u64> = (0..cols).map(|c| u64::from(c) + 1).collect();
                        let mut fold = |a: u64, b: u64| {
                            let next = 1_000_000 + trees.len() as u64;
                            Ok::<_, ()>(*trees.entry((a.min(b), a.max(b))).or_insert(next))
                        };
                        let want = fold_row(&elems, 0, &mut fold).unwrap_or(u64::MAX);
                        assert_eq!(planned_row(&mut trees, plan, row, cols), want, "{rows}x{cols} at {threads} threads, row {row}: {plan:?}");
                    }
                }
            }
        }
        assert!(shrunk > 50, "the plans never hold several lanes per thread ({shrunk})");
    }

    #[test]
    fn fewer_threads_per_row_only_where_one_pass_would_not_cover_the_rows() {
        // dqkwg_channel's [64, 16] row sums at 256 threads: 4 passes of 16 lanes before.
        assert_eq!(RowPlan::new(64, 16, 256), RowPlan { w: 16, u: 4, k: 4, cycle: 2 });
        // One pass already: unchanged.
        assert_eq!(RowPlan::new(16, 16, 256), RowPlan { w: 16, u: 16, k: 1, cycle: 2 });
        // Wide rows: at most 8 lanes per thread, even if passes remain.
        assert_eq!(RowPlan::new(1024, 128, 128), RowPlan { w: 32, u: 4, k: 8, cycle: 1 });
        // Rows of a warp that start in one bank read distinct columns with each load.
        let p = RowPlan::new(64, 16, 256);
        for j in 0..p.k {
            let mut banks: Vec<u32> = (0..32 / p.u).flat_map(|r| (0..p.u).map(move |t| (r * 16 + p.lane(r, t, j)) % 32)).collect();
            banks.sort_unstable();
            banks.dedup();
            assert_eq!(banks.len(), 32, "load {j} of a warp conflicts");
        }
    }

    #[test]
    fn an_error_stops_the_fold() {
        let r = fold_row(&[1i64, 2, 3], 0, |a, b| if a + b > 3 { Err("overflow") } else { Ok(a + b) });
        assert_eq!(r, Err("overflow"));
    }
}
