//! tcgen05 descriptors, built and validated bit-exactly here because nothing downstream checks
//! them: ptxas passes the 32-bit instruction descriptor and the 64-bit shared-memory descriptors
//! through in registers, and an illegal value assembles cleanly (blackwell.md §0).
//!
//! Layouts: instruction descriptor for `kind::f16` = blackwell.md §2.3 (PTX ISA "instruction
//! descriptor" table; CUTLASS `UMMA::InstrDescriptor`); shared-memory descriptor = §2.4 (PTX ISA
//! "matrix descriptor" table; CUTLASS `UMMA::SmemDescriptor`); the SWIZZLE_NONE K-major canonical
//! layout = §2.4 ("core matrix" = 8 rows x 16 bytes), whose offsets are in [`crate::layout::staging`].

use crate::ir::Elem;

use super::super::BackendError;

/// Bit 46 of an sm_100 shared-memory descriptor: the fixed "version" field (bits 46-48 = 0b001).
pub const SDESC_VERSION: u64 = 1 << 46;

/// The instruction descriptor of a dense `kind::f16` MMA with f32 accumulation.
///
/// `ab`: operand type (bf16 or f16); `m` ∈ {64, 128}; `n` a multiple of 16 in 16..=256 (the
/// subset valid in every tcgen05 variant, blackwell.md §2.2); `negate_a` sets bit 13; `a_mn` /
/// `b_mn` set bits 15 / 16 ("transpose A/B": the tile is M-major / N-major, §2.3; K-major
/// otherwise).
///
/// # Errors
/// [`BackendError::Invalid`] for an operand type or shape outside that set.
pub fn instr_desc(ab: Elem, m: u32, n: u32, negate_a: bool, a_mn: bool, b_mn: bool) -> Result<u32, BackendError> {
    let ty = match ab {
        Elem::F16 => 0u32,
        Elem::Bf16 => 1,
        other => return Err(BackendError::Invalid(format!("tcgen05.mma kind::f16 needs bf16 or f16 operands, found {other}"))),
    };
    if m != 64 && m != 128 {
        return Err(BackendError::Invalid(format!("tcgen05.mma (cta_group::1) needs M of 64 or 128, found {m}")));
    }
    if n == 0 || n > 256 || n % 16 != 0 {
        return Err(BackendError::Invalid(format!("tcgen05.mma needs N a multiple of 16 in 16..=256, found {n}")));
    }
    let d_f32 = 1u32 << 4;
    Ok(d_f32 | (ty << 7) | (ty << 10) | (u32::from(negate_a) << 13) | (u32::from(a_mn) << 15) | (u32::from(b_mn) << 16) | ((n >> 3) << 17) | ((m >> 4) << 24))
}

/// Columns of one `tcgen05.alloc`: a power of two in 32..=512 (blackwell.md §1.2).
///
/// # Errors
/// [`BackendError::Invalid`] for any other value.
pub fn check_alloc_columns(cols: u32) -> Result<u32, BackendError> {
    if (32..=512).contains(&cols) && cols.is_power_of_two() {
        Ok(cols)
    } else {
        Err(BackendError::Invalid(format!("tcgen05.alloc of {cols} columns: must be a power of two in 32..=512")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idesc_matches_worked_values() {
        // blackwell.md §2.3 worked values (bf16 x bf16 -> f32, K-major).
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, false, false, false).unwrap(), 0x0810_0490);
        // Major-ness: bit 15 for A (M-major), bit 16 for B (N-major), nothing else moves.
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, false, true, false).unwrap(), 0x0810_0490 | 1 << 15);
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, false, false, true).unwrap(), 0x0810_0490 | 1 << 16);
        assert_eq!(instr_desc(Elem::Bf16, 128, 128, false, false, false).unwrap(), 0x0820_0490);
        assert_eq!(instr_desc(Elem::Bf16, 128, 256, false, false, false).unwrap(), 0x0840_0490);
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, true, false, false).unwrap(), 0x0810_0490 | 1 << 13);
        assert_eq!(instr_desc(Elem::F16, 64, 16, false, false, false).unwrap(), (1 << 4) | (2 << 17) | (4 << 24));
    }

    #[test]
    fn idesc_rejects_bad_shapes() {
        assert!(instr_desc(Elem::Bf16, 256, 64, false, false, false).is_err());
        assert!(instr_desc(Elem::Bf16, 128, 24, false, false, false).is_err());
        assert!(instr_desc(Elem::Bf16, 128, 272, false, false, false).is_err());
        assert!(instr_desc(Elem::F32, 128, 64, false, false, false).is_err());
    }

    #[test]
    fn sdesc_matches_examples() {
        use super::super::super::descriptors::smem_desc_fields;
        use crate::layout::swizzle::Swizzle;
        // tcgen05_gemm_min.ll: LBO 128, SBO 256, bit 46.
        assert_eq!(smem_desc_fields(128, 256).unwrap() | SDESC_VERSION, (8 << 16) | (16u64 << 32) | (1 << 46));
        // The sm_90 swizzle code at bits 62-63 is the sm_100 code at bits 61-63 (blackwell.md
        // §2.4: 128B = 2, 64B = 4, 32B = 6): tcgen05_tma_gemm.ll's 128B K-major descriptor.
        for (sw, sm100) in [(Swizzle::B128, 2u64), (Swizzle::B64, 4), (Swizzle::B32, 6)] {
            assert_eq!(sw.sm90_desc_code() << 62, sm100 << 61);
        }
    }

    #[test]
    fn alloc_columns() {
        for c in [32, 64, 128, 256, 512] {
            assert_eq!(check_alloc_columns(c).unwrap(), c);
        }
        for c in [0, 16, 48, 96, 1024] {
            assert!(check_alloc_columns(c).is_err());
        }
    }
}
