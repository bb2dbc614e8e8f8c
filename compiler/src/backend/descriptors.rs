//! Shared-memory matrix descriptors as tcgen05 (sm_100a) and wgmma (sm_90a) read them, built and
//! validated bit-exactly because nothing downstream checks them (ptxas takes the 64-bit value in
//! a register). Fields (PTX ISA "Matrix Descriptor"; blackwell.md §2.4, §6.1): start address
//! `>> 4` at bits 0-13, LBO `>> 4` at bits 16-29, SBO `>> 4` at bits 32-45, swizzle mode 0
//! (none). sm_100 adds a fixed bit 46 ([`super::sm100::descriptors::smem_desc_hi`]); sm_90 has
//! none ([`smem_desc_fields`] is its whole constant part).

use super::BackendError;

/// LBO and SBO of a SWIZZLE_NONE descriptor in their fields (bits 16-29 and 32-45), base offset
/// 0, swizzle 0: the constant part of an sm_90 descriptor.
///
/// # Errors
/// [`BackendError::Invalid`] unless both offsets are multiples of 16 below 2^18.
pub fn smem_desc_fields(lbo: u32, sbo: u32) -> Result<u64, BackendError> {
    for (name, v) in [("LBO", lbo), ("SBO", sbo)] {
        if v % 16 != 0 || v >= 1 << 18 {
            return Err(BackendError::Invalid(format!("shared-memory descriptor {name} {v} is not a multiple of 16 below 262144")));
        }
    }
    Ok((u64::from(lbo >> 4) << 16) | (u64::from(sbo >> 4) << 32))
}

/// The start-address field of a shared-memory descriptor for byte address `addr`.
///
/// # Errors
/// [`BackendError::Invalid`] unless `addr` is 16-byte aligned and below 2^18.
pub fn smem_desc_start(addr: u32) -> Result<u64, BackendError> {
    if addr % 16 != 0 {
        return Err(BackendError::Invalid(format!("shared-memory operand address {addr:#x} is not 16-byte aligned (a descriptor holds addr >> 4)")));
    }
    if addr >= 1 << 18 {
        return Err(BackendError::Invalid(format!("shared-memory operand address {addr:#x} is beyond 0x40000, the range of a descriptor's 14-bit start-address field")));
    }
    Ok(u64::from(addr >> 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_start() {
        // hopper_wgmma_noswz.ll (H200-verified): LBO 128, SBO 512, no bit 46.
        assert_eq!(smem_desc_fields(128, 512).unwrap(), (8 << 16) | (32u64 << 32));
        assert_eq!(smem_desc_start(0x400).unwrap(), 0x40);
        let e = smem_desc_start(0x408).unwrap_err().to_string();
        assert!(e.contains("not 16-byte aligned"), "{e}");
        // 0x40080 is aligned, merely out of range: the message must say so.
        let e = smem_desc_start(0x40080).unwrap_err().to_string();
        assert!(e.contains("beyond 0x40000") && !e.contains("aligned"), "{e}");
        assert!(smem_desc_fields(120, 256).is_err());
    }
}
