//! tcgen05 descriptors, built and validated bit-exactly here because nothing downstream checks
//! them: ptxas passes the 32-bit instruction descriptor and the 64-bit shared-memory descriptors
//! through in registers, and an illegal value assembles cleanly (blackwell.md §0).
//!
//! Layouts: instruction descriptor for `kind::f16` = blackwell.md §2.3 (PTX ISA "instruction
//! descriptor" table; CUTLASS `UMMA::InstrDescriptor`); shared-memory descriptor = §2.4 (PTX ISA
//! "matrix descriptor" table; CUTLASS `UMMA::SmemDescriptor`); the SWIZZLE_NONE K-major canonical
//! layout = §2.4 ("core matrix" = 8 rows x 16 bytes), whose offsets are in [`crate::layout::staging`].

use crate::ir::Elem;

use super::super::descriptors::smem_desc_fields;
use super::super::BackendError;

/// Bit 46 of an sm_100 shared-memory descriptor: the fixed "version" field (bits 46-48 = 0b001).
const SDESC_VERSION: u64 = 1 << 46;

/// The instruction descriptor of a dense `kind::f16` MMA with f32 accumulation and K-major A/B.
///
/// `ab`: operand type (bf16 or f16); `m` ∈ {64, 128}; `n` a multiple of 16 in 16..=256 (the
/// subset valid in every tcgen05 variant, blackwell.md §2.2); `negate_a` sets bit 13.
///
/// # Errors
/// [`BackendError::Invalid`] for an operand type or shape outside that set.
pub fn instr_desc(ab: Elem, m: u32, n: u32, negate_a: bool) -> Result<u32, BackendError> {
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
    Ok(d_f32 | (ty << 7) | (ty << 10) | (u32::from(negate_a) << 13) | ((n >> 3) << 17) | ((m >> 4) << 24))
}

/// The constant (address-independent) part of an sm_100 SWIZZLE_NONE shared-memory descriptor:
/// the fields of [`smem_desc_fields`] plus bit 46 (the fixed "version" of sm_100 descriptors).
/// The start address (bits 0-13, `addr >> 4`) is or-ed in at run time.
///
/// # Errors
/// As [`smem_desc_fields`].
pub fn smem_desc_hi(lbo: u32, sbo: u32) -> Result<u64, BackendError> {
    Ok(smem_desc_fields(lbo, sbo)? | SDESC_VERSION)
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
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, false).unwrap(), 0x0810_0490);
        assert_eq!(instr_desc(Elem::Bf16, 128, 128, false).unwrap(), 0x0820_0490);
        assert_eq!(instr_desc(Elem::Bf16, 128, 256, false).unwrap(), 0x0840_0490);
        assert_eq!(instr_desc(Elem::Bf16, 128, 64, true).unwrap(), 0x0810_0490 | 1 << 13);
        assert_eq!(instr_desc(Elem::F16, 64, 16, false).unwrap(), (1 << 4) | (2 << 17) | (4 << 24));
    }

    #[test]
    fn idesc_rejects_bad_shapes() {
        assert!(instr_desc(Elem::Bf16, 256, 64, false).is_err());
        assert!(instr_desc(Elem::Bf16, 128, 24, false).is_err());
        assert!(instr_desc(Elem::Bf16, 128, 272, false).is_err());
        assert!(instr_desc(Elem::F32, 128, 64, false).is_err());
    }

    #[test]
    fn sdesc_matches_example() {
        // tcgen05_gemm_min.ll: LBO 128, SBO 256, bit 46.
        let hi = smem_desc_hi(128, 256).unwrap();
        assert_eq!(hi, (8 << 16) | (16u64 << 32) | (1 << 46));
        assert!(smem_desc_hi(120, 256).is_err());
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
