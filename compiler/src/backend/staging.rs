//! Operand staging for the MMAs that read shared memory through descriptors (`tcgen05.mma` on
//! sm_100a, `wgmma.mma_async` on sm_90a): a copy of a row-major operand tile into the
//! SWIZZLE_NONE K-major canonical layout ([`crate::layout::staging`]).

use crate::ir::MmaOperand;
use crate::layout::staging::kmajor_offset;

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Copies an operand into K-major staging at byte `at`: `rows x kdim` where rows are M (A)
    /// or N (B, `is_b`), element `(r, k)` = A(r, k) or B(k, r).
    pub(crate) fn stage_kmajor(&mut self, op: MmaOperand, src: u32, is_b: bool, at: u32, rows: u32, kdim: u32) -> Result<(), BackendError> {
        self.cta_loop(rows * kdim, &mut |cg, e| {
            let r = cg.b.build_int_unsigned_div(e, cg.i32(kdim as i32), "r")?;
            let k = cg.b.build_int_unsigned_rem(e, cg.i32(kdim as i32), "k")?;
            let bits = if is_b { cg.operand_bits_at(op, src, k, r)? } else { cg.operand_bits_at(op, src, r, k)? };
            let off = kmajor_offset(&*cg, r, k, kdim)?;
            let off = cg.b.build_int_add(off, cg.i32(at as i32), "")?;
            let p = cg.smem_at(off)?;
            cg.b.build_store(p, bits)?;
            Ok(())
        })?;
        Ok(())
    }
}
