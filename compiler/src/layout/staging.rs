//! The SWIZZLE_NONE K-major canonical layout that tcgen05 (and wgmma) shared-memory descriptors
//! read, and the staging buffers of an sm_100a MMA (PTX ISA 8.8, "Shared Memory Matrix Layout":
//! a core matrix is 8 rows × 16 bytes; blackwell.md §2.4).
//!
//! An `rows × kdim` operand of 16-bit elements is stored with K-adjacent core matrices
//! contiguous (leading-dimension byte offset [`LBO`] = 128) and one 8-row group holding all of K
//! (stride byte offset [`sbo_for`]`(kdim)` = `16·kdim`): element `(r, k)` at
//! `(r/8)·SBO + (k/8)·LBO + (r%8)·16 + (k%8)·2` ([`kmajor_offset`]). A K = 16 step moves a
//! descriptor's start by `2·LBO` bytes.

use super::IndexArith;

/// Byte distance between K-adjacent core matrices (LBO).
pub const LBO: u32 = 128;

/// SBO of the staging layout for a K extent of `kdim` elements, in bytes.
pub fn sbo_for(kdim: u32) -> u32 {
    kdim * 16
}

/// Byte offset of element `(r, k)` of an operand with K extent `kdim` (see the module docs).
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn kmajor_offset<A: IndexArith>(a: &A, r: A::V, k: A::V, kdim: u32) -> Result<A::V, A::E> {
    let o1 = a.mul(a.shr(r, 3)?, a.c(sbo_for(kdim)))?;
    let o2 = a.mul(a.shr(k, 3)?, a.c(LBO))?;
    let o3 = a.mul(a.and(r, 7)?, a.c(16))?;
    let o4 = a.mul(a.and(k, 7)?, a.c(2))?;
    a.add(a.add(o1, o2)?, a.add(o3, o4)?)
}

/// Where the staging buffers of one sm_100a MMA sit inside its scratch (byte offsets from the
/// scratch start) and how large the scratch is. `align` is the buffer alignment of the
/// shared-memory plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Staging {
    /// A (`m × kdim`, K-major) at offset 0; B (`n × kdim`, K-major) here.
    pub b: u32,
    /// Row-major copy of an A operand read from tensor memory, when there is one.
    pub tmem_a: Option<u32>,
    /// Total scratch bytes.
    pub bytes: u32,
}

/// The staging of an `m × n × kdim` MMA with 16-bit operands; `tmem_a` gives the A operand's
/// `(rows, cols)` when it lives in tensor memory (copied to shared memory first).
pub fn staging(m: u32, n: u32, kdim: u32, tmem_a: Option<(u32, u32)>, align: u32) -> Staging {
    let b = (m * kdim * 2).next_multiple_of(align);
    let end_b = (b + n * kdim * 2).next_multiple_of(align);
    match tmem_a {
        Some((r, c)) => Staging { b, tmem_a: Some(end_b), bytes: end_b + (r * c * 2).next_multiple_of(align) },
        None => Staging { b, tmem_a: None, bytes: end_b },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{eval, Eval};

    fn off(r: u32, k: u32, kdim: u32) -> u32 {
        eval(kmajor_offset(&Eval, r, k, kdim))
    }

    #[test]
    fn an_even_column_and_the_next_are_adjacent() {
        // The fragment stores write (r, k) and (r, k + 1), k even, as one 4-byte pair.
        for r in 0..16 {
            for k in (0..64).step_by(2) {
                assert_eq!((off(r, k, 64) % 4, off(r, k + 1, 64)), (0, off(r, k, 64) + 2), "({r}, {k})");
            }
        }
    }

    #[test]
    fn kmajor_layout_is_a_bijection_onto_the_buffer() {
        let (rows, kdim) = (16, 32);
        let mut seen = std::collections::HashSet::new();
        for r in 0..rows {
            for k in 0..kdim {
                let o = off(r, k, kdim);
                assert_eq!(o % 2, 0);
                assert!(o < rows * kdim * 2);
                assert!(seen.insert(o));
            }
        }
    }

    #[test]
    fn core_matrices_follow_the_isa() {
        // A core matrix is 8 rows of 16 contiguous bytes; the next core matrix along K is LBO
        // away, the next 8-row group SBO away (tcgen05_gemm_min.ll: LBO 128, SBO 256 at K = 16).
        assert_eq!(off(1, 1, 16), 16 + 2);
        assert_eq!(off(0, 8, 16), 128);
        assert_eq!(off(8, 0, 16), 256);
        assert_eq!(off(9, 10, 64), sbo_for(64) + LBO + 16 + 4);
    }

    #[test]
    fn staging_buffers_are_disjoint_and_aligned() {
        let s = staging(128, 64, 32, Some((128, 32)), 128);
        assert_eq!(s.b, 128 * 32 * 2);
        assert_eq!(s.tmem_a, Some(s.b + 64 * 32 * 2));
        assert_eq!(s.bytes, s.b + 64 * 32 * 2 + 128 * 32 * 2);
        let s = staging(64, 16, 16, None, 128);
        assert_eq!((s.b, s.bytes), (2048, 2048 + 512));
    }
}
