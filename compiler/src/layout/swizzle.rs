//! The swizzled shared-memory tile layouts that TMA writes (`CU_TENSOR_MAP_SWIZZLE_32B/64B/128B`)
//! and wgmma descriptors read (swizzle modes 3/2/1), for tiles of 16-bit elements.
//!
//! A `rows × cols` tile is cut into column *panels* of `P` bytes (`P` = 32, 64 or 128: the
//! swizzle width, `P/2` elements), one after another: panel `j` holds columns `j·P/2 ..+P/2` of
//! every row, row `r` at `r·P` bytes into the panel — exactly the box one TMA copy of inner
//! extent `P` bytes writes. Within a 16-byte-aligned group of `8·P` bytes the hardware permutes
//! the 16-byte chunks of each `P`-byte row: CUTLASS's `Swizzle<B, 4, 3>` with `B = log2(P/16)`,
//! i.e. address bits `[4, 4+B)` are XORed with bits `[7, 7+B)` (PTX ISA "Shared Memory Matrix
//! Layout", swizzling modes; TMA applies the same function, CUDA driver API
//! `CUtensorMapSwizzle`). The pattern is a function of the absolute shared-memory address, so
//! every panel must start on a multiple of its period (`8·P` bytes; [`PERIOD_ALIGN`] covers all
//! three).
//!
//! As operands ([`Swizzle::operand`]): a tile whose columns are the product's K is K-major (a
//! K = 16 step moves the descriptor start by 32 bytes inside a panel, by the panel size across
//! panels; SBO = `8·P`, the stride of 8-row groups; LBO unused); a tile whose columns are M or N
//! is MN-major (LBO = the panel size, the stride between `P/2`-wide M/N atoms; SBO = `8·P`, the
//! stride of 8-row K groups; a K = 16 step is `16·P` bytes) — CUTLASS `make_gmma_desc`'s canonical
//! forms `((8,m),(T,2k)):((8T,SBO),(1,T))` and `((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))`.

use super::IndexArith;

/// Alignment of a swizzled tile's buffer and of every ring stage: the largest period (128B mode).
pub const PERIOD_ALIGN: u32 = 1024;

/// A swizzle mode: the width `P` of a panel row in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Swizzle {
    /// 32-byte rows (16 bf16), period 256 B.
    B32,
    /// 64-byte rows (32 bf16), period 512 B.
    B64,
    /// 128-byte rows (64 bf16), period 1024 B.
    B128,
}

/// Where an operand reads a swizzled tile: the byte steps a descriptor's start address takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OperandSteps {
    /// LBO field value in bytes (1 when the hardware ignores it).
    pub lbo: u32,
    /// SBO field value in bytes.
    pub sbo: u32,
    /// Whether the tile is MN-major (the wgmma transpose immediate).
    pub mn_major: bool,
}

impl OperandSteps {
    /// Bytes from the tile start to the operand unit whose M (A) or N (B) origin is `n0`, a
    /// multiple of 8: K-major, `n0/8` 8-row groups SBO apart; MN-major, panel `n0 / (P/2)` (LBO
    /// apart) and `2·(n0 mod P/2)` bytes into it. A unit may start inside a panel (a wgmma N
    /// piece narrower than the panel) as long as it ends in it: the hardware adds its offsets
    /// to the start address and then swizzles the absolute address, as it does for the 32-byte
    /// K steps inside a K-major panel row.
    ///
    /// # Errors
    /// Only those of the emitting [`IndexArith`].
    pub fn origin<A: IndexArith>(&self, a: &A, sw: Swizzle, n0: A::V) -> Result<A::V, A::E> {
        if self.mn_major {
            let per = sw.elems();
            let panel = a.mul(a.shr(n0, per.trailing_zeros())?, a.c(self.lbo))?;
            a.add(panel, a.shl(a.and(n0, per - 1)?, 1)?)
        } else {
            a.mul(a.shr(n0, 3)?, a.c(self.sbo))
        }
    }

    /// Bytes from the tile start to the K = 16 step `ks` of a tile of `rows` rows: inside and
    /// across panels K-major ([`Swizzle::k_step_kmajor`]), 16 rows of `P` bytes MN-major.
    pub fn k_step(&self, sw: Swizzle, rows: u32, ks: u32) -> u32 {
        if self.mn_major {
            ks * 2 * self.sbo
        } else {
            sw.k_step_kmajor(rows, ks)
        }
    }
}

impl Swizzle {
    /// The widest mode whose panel divides a row of `cols` 16-bit elements (`None` below 16).
    pub fn for_cols(cols: u32) -> Option<Swizzle> {
        [Swizzle::B128, Swizzle::B64, Swizzle::B32].into_iter().find(|s| cols % s.elems() == 0)
    }

    /// Panel row width in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Swizzle::B32 => 32,
            Swizzle::B64 => 64,
            Swizzle::B128 => 128,
        }
    }

    /// Panel row width in 16-bit elements (the TMA box's inner extent).
    pub fn elems(self) -> u32 {
        self.bytes() / 2
    }

    /// The name in metadata and reports: `32B`, `64B`, `128B`.
    pub fn name(self) -> &'static str {
        match self {
            Swizzle::B32 => "32B",
            Swizzle::B64 => "64B",
            Swizzle::B128 => "128B",
        }
    }

    /// The sm_90 descriptor's swizzle field (bits 62-63): 128B = 1, 64B = 2, 32B = 3.
    pub fn sm90_desc_code(self) -> u64 {
        match self {
            Swizzle::B128 => 1,
            Swizzle::B64 => 2,
            Swizzle::B32 => 3,
        }
    }

    /// The descriptor steps of an operand tile of `rows` rows; `k_major` when its columns are
    /// the product's K.
    pub fn operand(self, rows: u32, k_major: bool) -> OperandSteps {
        let group = 8 * self.bytes();
        if k_major {
            OperandSteps { lbo: 16, sbo: group, mn_major: false }
        } else {
            OperandSteps { lbo: rows * self.bytes(), sbo: group, mn_major: true }
        }
    }

    /// Byte offset from the tile start of the K = 16 step `ks` of a K-major operand with
    /// `rows` rows (steps inside a panel are 32 bytes apart; panels `rows·P` bytes).
    pub fn k_step_kmajor(self, rows: u32, ks: u32) -> u32 {
        let per_panel = self.elems() / 16;
        (ks / per_panel) * rows * self.bytes() + (ks % per_panel) * 32
    }
}

/// Byte offset of element `(r, c)` of a `rows`-row tile of 16-bit elements in swizzle mode `sw`
/// (see the module docs): panel `c / (P/2)`, then `o = r·P + 2·(c mod P/2)` with bits `[4, 4+B)`
/// XORed with bits `[7, 7+B)`.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn swizzled_offset<A: IndexArith>(a: &A, r: A::V, c: A::V, rows: u32, sw: Swizzle) -> Result<A::V, A::E> {
    let p = sw.bytes();
    let per = sw.elems();
    let panel = a.mul(a.shr(c, per.trailing_zeros())?, a.c(rows * p))?;
    let o = a.add(a.mul(r, a.c(p))?, a.shl(a.and(c, per - 1)?, 1)?)?;
    let mask = p / 16 - 1;
    let rowbits = a.shl(a.and(a.shr(o, 7)?, mask)?, 4)?;
    a.add(panel, a.xor(o, rowbits)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{eval, Eval};

    /// The hardware's function on an absolute address (CUTLASS `Swizzle<B,4,3>`).
    fn hw(addr: u32, sw: Swizzle) -> u32 {
        let mask = sw.bytes() / 16 - 1;
        addr ^ (((addr >> 7) & mask) << 4)
    }

    #[test]
    fn offsets_are_the_hardware_swizzle_of_the_panel_layout() {
        for sw in [Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let (rows, cols) = (24, 3 * sw.elems());
            let mut seen = std::collections::HashSet::new();
            for r in 0..rows {
                for c in 0..cols {
                    let o = eval(swizzled_offset(&Eval, r, c, rows, sw));
                    // Unswizzled panel layout, then the address function.
                    let lin = (c / sw.elems()) * rows * sw.bytes() + r * sw.bytes() + 2 * (c % sw.elems());
                    assert_eq!(o, hw(lin, sw), "{sw:?} ({r}, {c})");
                    assert!(o < rows * cols * 2 && seen.insert(o));
                }
            }
        }
    }

    #[test]
    fn an_even_column_and_the_next_are_adjacent() {
        // The fragment stores write (r, c) and (r, c + 1), c even, as one 4-byte pair.
        for sw in [Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let rows = 16;
            for r in 0..rows {
                for c in (0..2 * sw.elems()).step_by(2) {
                    let o = eval(swizzled_offset(&Eval, r, c, rows, sw));
                    assert_eq!((o % 4, eval(swizzled_offset(&Eval, r, c + 1, rows, sw))), (0, o + 2), "{sw:?} ({r}, {c})");
                }
            }
        }
    }

    #[test]
    fn a_row_of_16_byte_chunks_spreads_over_all_banks_in_128b_mode() {
        // 8 rows, chunk 0: the 8 chunks land in 8 distinct 16-byte bank groups.
        let groups: std::collections::HashSet<u32> = (0..8).map(|r| (eval(swizzled_offset(&Eval, r, 0, 8, Swizzle::B128)) % 128) / 16).collect();
        assert_eq!(groups.len(), 8);
    }

    #[test]
    fn row_order_16_byte_stores_of_a_32_column_tile_are_conflict_free_in_64b_mode() {
        // The threads write a [rows, 32] bf16 tile a 16-byte chunk each in row order (4 per
        // row); a store instruction's 8-thread phase covers rows 2m and 2m + 1. 64B swizzle: 8
        // distinct 16-byte bank groups. The core-matrix layout (`staging::kmajor_offset`, the
        // fallback when no swizzle fits) puts a row's 4 chunks 128 bytes apart: 2 groups, a
        // 4-way conflict.
        let groups = |off: &dyn Fn(u32, u32) -> u32, m: u32| -> usize {
            (0..8).map(|t| (off(2 * m + t / 4, 8 * (t % 4)) % 128) / 16).collect::<std::collections::HashSet<u32>>().len()
        };
        for m in 0..8 {
            assert_eq!(groups(&|r, c| eval(swizzled_offset(&Eval, r, c, 16, Swizzle::B64)), m), 8, "64B, rows {}", 2 * m);
            assert_eq!(groups(&|r, c| eval(crate::layout::staging::kmajor_offset(&Eval, r, c, 32)), m), 2, "core matrices, rows {}", 2 * m);
        }
    }

    #[test]
    fn descriptor_steps_land_where_the_layout_puts_the_elements() {
        // Start addresses a descriptor is advanced to must be the byte offsets the writers
        // (TMA, threads: `swizzled_offset`) give the first element of that step or unit. Rows
        // that are multiples of 8 are unswizzled at chunk 0, so the offsets compare directly.
        for sw in [Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let (rows, cols) = (64, 4 * sw.elems());
            // K-major (columns are K): step ks starts at column 16·ks of row 0; the unit at M/N
            // row 8·g starts at row 8·g.
            let km = sw.operand(rows, true);
            for ks in 0..cols / 16 {
                assert_eq!(km.k_step(sw, rows, ks), eval(swizzled_offset(&Eval, 0, 16 * ks, rows, sw)), "{sw:?} K-major step {ks}");
            }
            for g in 0..rows / 8 {
                assert_eq!(eval(km.origin(&Eval, sw, 8 * g)), eval(swizzled_offset(&Eval, 8 * g, 0, rows, sw)), "{sw:?} K-major row group {g}");
            }
            // MN-major (rows are K, columns M/N): step ks starts at row 16·ks; a unit at a
            // panel-aligned column c starts at column c.
            let mn = sw.operand(rows, false);
            for ks in 0..rows / 16 {
                assert_eq!(mn.k_step(sw, rows, ks), eval(swizzled_offset(&Eval, 16 * ks, 0, rows, sw)), "{sw:?} MN-major step {ks}");
            }
            // A unit at any column c that is a multiple of 8 (inside a panel too: a wgmma N
            // piece narrower than the panel) starts at column c.
            for c in (0..cols).step_by(8) {
                assert_eq!(eval(mn.origin(&Eval, sw, c)), eval(swizzled_offset(&Eval, 0, c, rows, sw)), "{sw:?} MN-major column {c}");
            }
        }
    }

    #[test]
    fn a_unit_inside_a_panel_reads_its_own_columns() {
        // The hardware's reading of an MN-major operand unit of `n` columns at origin `c0`
        // (PTX ISA canonical MN-major layout): element (k, j) at start + (k/8)·SBO + (k%8)·P +
        // 2j, swizzled as an absolute address. Pieces of 8 or 16 columns inside a wider panel
        // must find the elements the writers put at (k, c0 + j).
        for sw in [Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let (rows, cols) = (32, 2 * sw.elems());
            let mn = sw.operand(rows, false);
            for n in [8, 16].into_iter().filter(|n| sw.elems() % n == 0) {
                for c0 in (0..cols).step_by(n as usize) {
                    let start = eval(mn.origin(&Eval, sw, c0));
                    for k in 0..rows {
                        for j in 0..n {
                            let lin = start + (k / 8) * mn.sbo + (k % 8) * sw.bytes() + 2 * j;
                            let panel_start = (lin / (rows * sw.bytes())) * rows * sw.bytes();
                            assert_eq!(hw(lin, sw), eval(swizzled_offset(&Eval, k, c0 + j, rows, sw)), "{sw:?} n {n} c0 {c0} ({k}, {j}) panel at {panel_start}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn modes_and_steps() {
        assert_eq!(Swizzle::for_cols(256), Some(Swizzle::B128));
        assert_eq!(Swizzle::for_cols(32), Some(Swizzle::B64));
        assert_eq!(Swizzle::for_cols(48), Some(Swizzle::B32));
        assert_eq!(Swizzle::for_cols(8), None);
        // PTX ISA matrix-descriptor swizzle field (sm_90): 1 = 128B, 2 = 64B, 3 = 32B.
        assert_eq!([Swizzle::B128, Swizzle::B64, Swizzle::B32].map(Swizzle::sm90_desc_code), [1, 2, 3]);
        // hopper_tma_wgmma.ll (H200-verified): K-major 128B, SBO 1024, LBO encoded as 16 B.
        assert_eq!(Swizzle::B128.operand(128, true), OperandSteps { lbo: 16, sbo: 1024, mn_major: false });
        // MN-major: LBO is the panel (64 rows of 128 B), SBO the 8-row K group.
        assert_eq!(Swizzle::B128.operand(64, false), OperandSteps { lbo: 8192, sbo: 1024, mn_major: true });
        // K = 128 in two 128B panels of 64 rows: steps 0..3 at 32 B, step 4 at the next panel.
        assert_eq!((0..6).map(|s| Swizzle::B128.k_step_kmajor(64, s)).collect::<Vec<_>>(), vec![0, 32, 64, 96, 8192, 8224]);
        assert_eq!(Swizzle::B64.k_step_kmajor(64, 2), 4096);
    }
}
