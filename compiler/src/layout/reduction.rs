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

    #[test]
    fn an_error_stops_the_fold() {
        let r = fold_row(&[1i64, 2, 3], 0, |a, b| if a + b > 3 { Err("overflow") } else { Ok(a + b) });
        assert_eq!(r, Err("overflow"));
    }
}
