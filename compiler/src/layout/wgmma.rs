//! The `wgmma.mma_async` m64nNk16 f32 accumulator fragment (PTX ISA 9.7.15.5.1, "Matrix
//! fragments for wgmma.mma_async": the D matrix; H200-verified in blackwell.md §6.1) and how the
//! register-resident accumulator of an `M x N` tile is spread over a CTA's warpgroups.
//!
//! Fragment: in a warpgroup, thread `t` (warp `w = t/32 % 4`, lane `l`, `g = l/4`, `q = l%4`)
//! holds `N/2` floats; register `d[4j + h]` (`j < N/8`, `h < 4`) is element
//! `(16w + g + 8·(h/2), 8j + 2q + h%2)` of the 64-row block ([`fragment_coords`]).
//!
//! Distribution ([`Distribution`]): the tile is cut into 64-row blocks and, where there are more
//! warpgroups than row blocks (or N exceeds one instruction's 256), into column pieces; these
//! *units* go round-robin to the warpgroups, unit `u` to warpgroup `u % W` as its slot `u / W`.
//! Every thread keeps `slots · piece/2` floats, at constant register indices.

use super::IndexArith;

/// Rows of one wgmma instruction (M of m64nNk16).
pub const ROWS: u32 = 64;
/// Threads of a warpgroup.
pub const WARPGROUP: u32 = 128;
/// The widest N of one instruction.
pub const MAX_N: u32 = 256;

/// How an `m x n` f32 accumulator is spread over `warpgroups` warpgroups.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Distribution {
    /// Accumulator rows (a multiple of 64).
    pub m: u32,
    /// Accumulator columns.
    pub n: u32,
    /// Warpgroups of the CTA.
    pub warpgroups: u32,
    /// Column pieces per 64-row block.
    pub pieces: u32,
    /// Columns of a piece (N of each wgmma: a multiple of 8, at most 256).
    pub piece_n: u32,
    /// Units: row blocks × pieces.
    pub units: u32,
    /// Units per warpgroup, rounded up (register slots per thread).
    pub slots: u32,
}

impl Distribution {
    /// The distribution of an `m x n` accumulator over `warpgroups`, or `None` when wgmma cannot
    /// hold it (M not a multiple of 64, N not a multiple of 8, no warpgroup).
    pub fn new(m: u32, n: u32, warpgroups: u32) -> Option<Distribution> {
        if m == 0 || m % ROWS != 0 || n == 0 || n % 8 != 0 || warpgroups == 0 {
            return None;
        }
        let blocks = m / ROWS;
        let needed = n.div_ceil(MAX_N);
        // Idle warpgroups take column pieces when they divide the work evenly (a power of two of
        // pieces, so that a unit's block and piece are a shift and a mask).
        let spread = if warpgroups > blocks && warpgroups % blocks == 0 && (warpgroups / blocks).is_power_of_two() { warpgroups / blocks } else { 1 };
        let pieces = [spread.max(needed), needed].into_iter().find(|&p| n % (8 * p) == 0 && n / p <= MAX_N)?;
        let units = blocks * pieces;
        Some(Distribution { m, n, warpgroups, pieces, piece_n: n / pieces, units, slots: units.div_ceil(warpgroups) })
    }

    /// Floats each thread keeps.
    pub fn floats_per_thread(&self) -> u32 {
        self.slots * self.piece_n / 2
    }

    /// Whether every warpgroup has a unit in every slot (otherwise the last slot is guarded).
    pub fn even(&self) -> bool {
        self.units % self.warpgroups == 0
    }

    /// Whether a row reduction can run in this distribution's fragments
    /// (`backend/sm90/frag_reduce.rs`): a unit of whole rows, or column pieces that each hold
    /// every partial class of the row-reduction order ([`super::reduction::row_lanes`] divides
    /// `piece_n`), so that a thread's partials are the same classes in every piece and the
    /// pieces can be folded one after another, in column order.
    pub fn row_reducible(&self) -> bool {
        self.pieces == 1 || self.piece_n.is_multiple_of(super::reduction::row_lanes(self.n))
    }

    /// Shared-memory bytes a row reduction in this distribution's fragments passes its partials
    /// through from one column piece to the next: `m` rows of `row_lanes(n)` 4-byte partials
    /// (f32 or i32), or 0 for units of whole rows.
    pub fn row_reduce_scratch_bytes(&self) -> u32 {
        if self.pieces == 1 { 0 } else { self.m * super::reduction::row_lanes(self.n) * 4 }
    }

    /// `(first row, first column)` of unit `u` in the accumulator.
    pub fn unit_origin<A: IndexArith>(&self, a: &A, u: A::V) -> Result<(A::V, A::V), A::E> {
        // `pieces` is a power of two (see `new`): u / pieces and u % pieces are a shift and a mask.
        let (blk, piece) = if self.pieces == 1 {
            (u, a.c(0))
        } else {
            let s = self.pieces.trailing_zeros();
            (a.shr(u, s)?, a.and(u, self.pieces - 1)?)
        };
        Ok((a.mul(blk, a.c(ROWS))?, a.mul(piece, a.c(self.piece_n))?))
    }
}

/// `(row, column)` inside its 64 × N unit of register `d[i]` of warpgroup thread `t` (0..128).
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn fragment_coords<A: IndexArith>(a: &A, t: A::V, i: u32) -> Result<(A::V, A::V), A::E> {
    let w = a.and(a.shr(t, 5)?, 3)?;
    let g = a.shr(a.and(t, 31)?, 2)?;
    let q = a.and(t, 3)?;
    let row = a.add(a.add(a.shl(w, 4)?, g)?, a.c(8 * ((i >> 1) & 1)))?;
    let col = a.add(a.shl(q, 1)?, a.c(8 * (i >> 2) + (i & 1)))?;
    Ok((row, col))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Eval;

    fn at(t: u32, i: u32) -> (u32, u32) {
        let (r, c) = fragment_coords(&Eval, t, i).unwrap_or_else(|e| match e {});
        (r, c)
    }

    #[test]
    fn fragment_matches_the_isa_table() {
        // PTX ISA "wgmma .m64nNk16 D fragment": thread 0 holds (0,0) (0,1) (8,0) (8,1) then (0,8)...
        assert_eq!([at(0, 0), at(0, 1), at(0, 2), at(0, 3), at(0, 4)], [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8)]);
        // Lane 5 of warp 2: g = 1, q = 1 -> rows 33 and 41, columns 2, 3 (+8j).
        assert_eq!([at(69, 0), at(69, 3), at(69, 6)], [(33, 2), (41, 3), (41, 10)]);
    }

    #[test]
    fn odd_registers_are_the_next_column_of_the_even_ones() {
        // The fragment stores write d[2j], d[2j + 1] as one pair at (r, c), (r, c + 1), c even.
        for t in 0..128 {
            for i in (0..64).step_by(2) {
                let (r, c) = at(t, i);
                assert_eq!((c % 2, at(t, i + 1)), (0, (r, c + 1)), "thread {t} register {i}");
            }
        }
    }

    #[test]
    fn fragment_is_a_bijection_onto_the_block() {
        for n in [8, 64, 128, 256] {
            let mut seen = vec![false; (64 * n) as usize];
            for t in 0..WARPGROUP {
                for i in 0..n / 2 {
                    let (r, c) = at(t, i);
                    assert!(r < 64 && c < n, "n={n} t={t} i={i}: ({r}, {c})");
                    let k = (r * n + c) as usize;
                    assert!(!seen[k], "n={n}: ({r}, {c}) twice");
                    seen[k] = true;
                }
            }
            assert!(seen.iter().all(|s| *s));
        }
    }

    #[test]
    fn distributions() {
        // gemm.tile: 128 x 128 over one warpgroup: two row blocks, 128 floats per thread.
        let d = Distribution::new(128, 128, 1).unwrap();
        assert_eq!((d.pieces, d.units, d.slots, d.floats_per_thread(), d.even()), (1, 2, 2, 128, true));
        // 64 rows over two warpgroups: the columns are split so neither idles.
        let d = Distribution::new(64, 128, 2).unwrap();
        assert_eq!((d.pieces, d.piece_n, d.slots, d.floats_per_thread()), (2, 64, 1, 32));
        // N = 512 needs two instructions per row block.
        let d = Distribution::new(128, 512, 1).unwrap();
        assert_eq!((d.pieces, d.piece_n, d.units, d.slots), (2, 256, 4, 4));
        // Three warpgroups for two row blocks: not even, the last slot is guarded.
        let d = Distribution::new(128, 64, 3).unwrap();
        assert_eq!((d.pieces, d.units, d.slots, d.even()), (1, 2, 1, false));
        // Unit origins: unit 3 of 128x512 is row block 1, piece 1.
        let d = Distribution::new(128, 512, 1).unwrap();
        assert_eq!(d.unit_origin(&Eval, 3).unwrap_or_else(|e| match e {}), (64, 256));
        // Three warpgroups for one row block: not a power of two, so no column split.
        assert_eq!(Distribution::new(64, 96, 3).unwrap().pieces, 1);
        assert!(Distribution::new(96, 64, 1).is_none());
        assert!(Distribution::new(64, 12, 1).is_none());
    }

    #[test]
    fn units_cover_the_accumulator_once() {
        for (m, n, w) in [(128, 128, 1), (64, 128, 2), (128, 512, 1), (128, 64, 3), (128, 256, 4)] {
            let d = Distribution::new(m, n, w).unwrap();
            let mut seen = vec![false; (m * n) as usize];
            for u in 0..d.units {
                let (r0, c0) = d.unit_origin(&Eval, u).unwrap_or_else(|e| match e {});
                for t in 0..WARPGROUP {
                    for i in 0..d.piece_n / 2 {
                        let (r, c) = at(t, i);
                        let k = ((r0 + r) * n + c0 + c) as usize;
                        assert!(!seen[k]);
                        seen[k] = true;
                    }
                }
            }
            assert!(seen.iter().all(|s| *s), "{m}x{n} over {w}");
        }
    }
}
