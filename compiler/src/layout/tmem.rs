//! Tensor-memory addressing of `tcgen05.ld/st.32x32b` (PTX ISA 8.8, "Tensor Memory" and
//! "tcgen05 memory consistency / access restrictions"; blackwell.md §1.1, §1.3).
//!
//! * An address is `lane << 16 | column` (32-bit cells).
//! * Warp `w` of a warpgroup may access only its lane quarter, lanes `32·(w mod 4) .. +32`
//!   ([`lane_base`]); with the `32x32b` shape thread `l` of the warp accesses lane
//!   `lane_base(w) + l`.
//! * Where the rows of an accumulator tile sit ([`lane_of_row`]): an M = 128 tile has row `i` at
//!   lane `i`; an M = 64 tile (`cta_group::1`) uses the first half of each lane quarter, rows
//!   `16q .. 16q+15` at lanes `32q .. 32q+15` (blackwell.md §1.1, CUTLASS's half sub-partition).
//! * So thread `(w, l)` holds row [`row_of_thread`]: `32w + l` (128 rows), `16w + l` for `l < 16`
//!   (64 rows; the other lanes hold no row).

use super::IndexArith;

/// First lane of warp `warp`'s lane quarter: `32·(warp mod 4)`.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn lane_base<A: IndexArith>(a: &A, warp: A::V) -> Result<A::V, A::E> {
    let quarter = a.and(warp, 3)?;
    a.shl(quarter, 5)
}

/// The TMEM address of `column` (relative to the allocation base `base`, already offset to the
/// buffer) in lane `lane`: `base + column + (lane << 16)`.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn address<A: IndexArith>(a: &A, base: A::V, column: A::V, lane: A::V) -> Result<A::V, A::E> {
    let lanes = a.shl(lane, 16)?;
    let at = a.add(base, column)?;
    a.add(at, lanes)
}

/// The row of a `rows`-row tile that thread `tid` (warp `warp = tid >> 5`, in warps 0..3) holds,
/// and for 64-row tiles the lane within the warp, which holds a row only when below 16.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn row_of_thread<A: IndexArith>(a: &A, rows: u32, tid: A::V, warp: A::V) -> Result<(A::V, Option<A::V>), A::E> {
    if rows == 128 {
        return Ok((tid, None)); // 32w + l = tid
    }
    let lane = a.and(tid, 31)?;
    let first = a.shl(warp, 4)?;
    Ok((a.add(first, lane)?, Some(lane)))
}

/// The TMEM lane holding row `row` of an accumulator tile of `rows` (64 or 128) rows.
pub fn lane_of_row(rows: u32, row: u32) -> u32 {
    if rows == 128 {
        row
    } else {
        32 * (row / 16) + row % 16
    }
}

/// Checks, for a CTA of `threads` threads and a TMEM tile of `rows` rows, that every thread of
/// warps 0..3 that holds a row reaches that row's lane from its own lane quarter: thread `l` of
/// warp `w` accesses lane `lane_base(w) + l` (32x32b shape), which must be
/// `lane_of_row(rows, row_of_thread(w, l))`. Returns the first violation as (warp, lane, row,
/// lane accessed, lane of the row).
pub fn check_quarters(rows: u32) -> Result<(), (u32, u32, u32, u32, u32)> {
    let e = super::Eval;
    for warp in 0..4 {
        for l in 0..32 {
            let tid = warp * 32 + l;
            let (row, lane) = super::eval(row_of_thread(&e, rows, tid, warp));
            if lane.is_some_and(|x| x >= 16) {
                continue; // holds no row
            }
            let accessed = super::eval(lane_base(&e, warp)) + l;
            let want = lane_of_row(rows, row);
            if accessed != want || accessed >= 128 {
                return Err((warp, l, row, accessed, want));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{eval, Eval};

    #[test]
    fn lane_quarters_follow_the_isa_rule() {
        // PTX ISA: warp w of a warpgroup accesses lanes 32*(w%4) .. 32*(w%4)+31.
        for w in 0..32 {
            assert_eq!(eval(lane_base(&Eval, w)), 32 * (w % 4), "warp {w}");
        }
    }

    #[test]
    fn every_thread_reaches_the_lane_of_its_row() {
        assert_eq!(check_quarters(128), Ok(()));
        assert_eq!(check_quarters(64), Ok(()));
    }

    #[test]
    fn rows_cover_the_tile_once() {
        for rows in [64u32, 128] {
            let mut seen = vec![0; rows as usize];
            for tid in 0..128 {
                let (r, lane) = eval(row_of_thread(&Eval, rows, tid, tid >> 5));
                if lane.is_none_or(|l| l < 16) {
                    seen[r as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{rows} rows: {seen:?}");
        }
    }

    #[test]
    fn addresses_put_the_lane_in_the_high_half() {
        assert_eq!(eval(address(&Eval, 0x20, 5, 96)), (96 << 16) | 0x25);
    }
}
