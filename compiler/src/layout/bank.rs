//! Shared-memory bank conflicts of a warp's access, and the row pitch of a row-major tile that
//! the threads read in a wgmma fragment's order.
//!
//! The model (CUDA C++ Programming Guide, "Shared Memory" of compute capability 5.x and later;
//! Nsight Compute's "shared wavefronts"): shared memory is 32 banks of 4-byte words, word `w` in
//! bank `w mod 32`. A warp's access of `b`-byte elements is served in phases of
//! `32 / max(1, b/4)` threads (all 32 for 4 bytes or less, half-warps for 8, quarter-warps for
//! 16); within a phase each bank delivers one distinct word per wavefront, and threads reading
//! the same word share it. So a phase takes as many wavefronts as the most distinct words any
//! one bank holds.
//!
//! A fragment-order read ([`super::wgmma::fragment_coords`]) of a row-major tile with rows
//! `pitch` bytes apart puts the 8 rows of a warp's fragment (`lane / 4`) at `pitch` strides:
//! with `pitch` a multiple of 128 bytes they all start in the same bank, so a `[*, 32]` f32 tile
//! read a pair per thread takes 8 wavefronts where 2 would do, a `[*, 32]` bf16 tile (64-byte
//! rows) 4 where 1 would do. Padding the rows ([`fragment_pitch`]) spreads them over the banks.

use super::wgmma::fragment_coords;
use super::{eval, Eval, IndexArith};

/// Banks of shared memory.
pub const BANKS: u32 = 32;
/// Bytes per bank word.
pub const WORD: u32 = 4;

/// Wavefronts of one warp instruction whose lane `l` accesses `width` bytes at byte address
/// `addrs[l]` (`addrs` holds 32 lanes; `width` ∈ {1, 2, 4, 8, 16}, each access aligned to it).
pub fn wavefronts(addrs: &[u32], width: u32) -> u32 {
    let phase = (BANKS / (width / WORD).max(1)) as usize;
    addrs
        .chunks(phase)
        .map(|lanes| {
            let mut words: Vec<u32> = lanes.iter().flat_map(|&a| (a / WORD)..(a + width).div_ceil(WORD)).collect();
            words.sort_unstable();
            words.dedup();
            let mut per_bank = [0u32; BANKS as usize];
            for w in words {
                per_bank[(w % BANKS) as usize] += 1;
            }
            per_bank.into_iter().max().unwrap_or(0).max(1)
        })
        .sum()
}

/// Byte offset of element `(r, c)` of a row-major tile of `size`-byte elements whose rows are
/// `pitch` elements apart (`pitch` = the column count unpadded): `(r·pitch + c)·size`. The back
/// end emits it for a padded tile (`backend::copy::TileLayout::Pitched`), and
/// [`fragment_read_wavefronts`] models the same addresses.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn pitched_offset<A: IndexArith>(a: &A, r: A::V, c: A::V, pitch: u32, size: u32) -> Result<A::V, A::E> {
    a.mul(a.add(a.mul(r, a.c(pitch))?, c)?, a.c(size))
}

/// How the threads of a fragment read a tile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FragRead {
    /// Each thread reads its fragment pair `(r, c)`, `(r, c + 1)` with one load of two elements.
    Pairs,
    /// Each thread reads one element of its row in one column (a column view, `t[:, j]`).
    Column,
}

/// Wavefronts of one warp's fragment-order read of a row-major tile of `size`-byte elements
/// whose rows are `pitch` elements apart ([`pitched_offset`]; the first instruction of warp 0,
/// the others differ by a whole number of rows and columns of pairs for every lane alike).
pub fn fragment_read_wavefronts(read: FragRead, pitch: u32, size: u32) -> u32 {
    let lane = |t: u32| eval(fragment_coords(&Eval, t, 0));
    let at = |r: u32, c: u32| eval(pitched_offset(&Eval, r, c, pitch, size));
    let (addrs, width): (Vec<u32>, u32) = match read {
        FragRead::Pairs => ((0..32).map(|t| lane(t)).map(|(r, c)| at(r, c)).collect(), 2 * size),
        FragRead::Column => ((0..32).map(|t| at(lane(t).0, 0)).collect(), size),
    };
    wavefronts(&addrs, width)
}

/// The most bytes a row is padded by: a pitch's bank pattern repeats every 128 bytes.
pub const MAX_PAD: u32 = BANKS * WORD - 16;

/// The row pitch in elements for a row-major `[_, cols]` tile of `size`-byte elements that the
/// threads read as `reads` (each counted once), or `None` to keep `cols`: the pitch of the
/// fewest wavefronts among `cols` elements plus 0, 16, …, [`MAX_PAD`] bytes, the least padding
/// among equals. Rows stay whole 16-byte chunks, so vector stores and 16-byte `cp.async`
/// copies into the tile keep their alignment; a row that is not a whole number of chunks is
/// not padded.
pub fn fragment_pitch(cols: u32, size: u32, reads: &[FragRead]) -> Option<u32> {
    if reads.is_empty() || (cols * size) % 16 != 0 {
        return None;
    }
    let cost = |pitch: u32| reads.iter().map(|&r| fragment_read_wavefronts(r, pitch, size)).sum::<u32>();
    let best = (0..=MAX_PAD / 16).map(|j| cols + 16 * j / size).min_by_key(|&p| (cost(p), p))?;
    (best != cols).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_textbook_cases() {
        // 32 consecutive words: one wavefront; all lanes on one word: a broadcast.
        assert_eq!(wavefronts(&(0..32).map(|l| 4 * l).collect::<Vec<_>>(), 4), 1);
        assert_eq!(wavefronts(&[64; 32], 4), 1);
        // A stride of 32 words: every lane in bank 0, 32 distinct words.
        assert_eq!(wavefronts(&(0..32).map(|l| 128 * l).collect::<Vec<_>>(), 4), 32);
        // 8-byte loads of 256 consecutive bytes: two half-warp phases of one wavefront.
        assert_eq!(wavefronts(&(0..32).map(|l| 8 * l).collect::<Vec<_>>(), 8), 2);
        // 16-byte loads of 512 consecutive bytes: four quarter-warp phases.
        assert_eq!(wavefronts(&(0..32).map(|l| 16 * l).collect::<Vec<_>>(), 16), 4);
        // A stride of 2 words with 4-byte loads: a 2-way conflict.
        assert_eq!(wavefronts(&(0..32).map(|l| 8 * l).collect::<Vec<_>>(), 4), 2);
    }

    #[test]
    fn a_padded_row_starts_pitch_elements_after_the_last() {
        let at = |r, c, pitch, size| eval(pitched_offset(&Eval, r, c, pitch, size));
        assert_eq!([at(0, 3, 40, 4), at(1, 0, 40, 4), at(2, 31, 40, 4)], [12, 160, 444]);
        // Unpadded (pitch = columns) it is the dense row-major offset.
        assert_eq!(at(5, 7, 32, 2), (5 * 32 + 7) * 2);
    }

    #[test]
    fn unpadded_fragment_reads_conflict_as_measured() {
        // f32 [*, 32] pairs (rows 128 B apart): the 4 rows of a half-warp share 8 banks — 4
        // wavefronts a phase, 8 for the warp (Nsight: 6 excess per instruction, thirty-fourth
        // session). bf16 [*, 32] pairs (64-byte rows): 8 rows over 2 bank groups, 4-way.
        assert_eq!(fragment_read_wavefronts(FragRead::Pairs, 32, 4), 8);
        assert_eq!(fragment_read_wavefronts(FragRead::Pairs, 32, 2), 4);
        // An f32 [*, 16] column read (64-byte rows): rows 0, 2, 4, 6 in one bank.
        assert_eq!(fragment_read_wavefronts(FragRead::Column, 16, 4), 4);
    }

    #[test]
    fn the_chosen_pitch_is_conflict_free() {
        // f32 pairs: rows 160 B apart put a half-warp's 4 rows in 4 different 32-byte bank groups.
        assert_eq!(fragment_pitch(32, 4, &[FragRead::Pairs]), Some(40));
        assert_eq!(fragment_read_wavefronts(FragRead::Pairs, 40, 4), 2);
        // bf16 pairs: 80-byte rows put 8 rows in 8 different 16-byte bank groups.
        assert_eq!(fragment_pitch(32, 2, &[FragRead::Pairs]), Some(40));
        assert_eq!(fragment_read_wavefronts(FragRead::Pairs, 40, 2), 1);
        // An f32 column read: 80-byte rows, 8 rows in 8 different banks.
        assert_eq!(fragment_pitch(16, 4, &[FragRead::Column]), Some(20));
        assert_eq!(fragment_read_wavefronts(FragRead::Column, 20, 4), 1);
    }

    #[test]
    fn no_pad_where_none_helps_or_fits() {
        // Already conflict-free rows keep their pitch (f32 [*, 8] pairs: 32-byte rows).
        assert_eq!(fragment_pitch(8, 4, &[FragRead::Pairs]), None);
        // A row that is not whole 16-byte chunks, and a tile nobody reads in fragment order.
        assert_eq!(fragment_pitch(3, 4, &[FragRead::Column]), None);
        assert_eq!(fragment_pitch(32, 4, &[]), None);
    }

    #[test]
    fn every_pitch_is_whole_chunks_and_no_worse() {
        for size in [2, 4] {
            for cols in (8..=256).step_by(8) {
                for reads in [&[FragRead::Pairs][..], &[FragRead::Column], &[FragRead::Pairs, FragRead::Column]] {
                    let p = fragment_pitch(cols, size, reads).unwrap_or(cols);
                    assert_eq!((p * size) % 16, 0);
                    assert!(p >= cols && (p - cols) * size <= MAX_PAD);
                    let cost = |p| reads.iter().map(|&r| fragment_read_wavefronts(r, p, size)).sum::<u32>();
                    assert!(cost(p) <= cost(cols), "cols {cols} size {size}");
                }
            }
        }
    }
}
