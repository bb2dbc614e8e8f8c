//! Where an MMA that reads shared memory through descriptors (wgmma on sm_90a, tcgen05 on
//! sm_100a) finds one operand: a tile read in place — the 8 × 8 core-matrix layout
//! ([`crate::layout::staging`]) or a swizzled layout TMA wrote ([`crate::layout::swizzle`]),
//! K-major or MN-major — or a K-major staging copy. Both targets use the same canonical
//! layouts and the same LBO/SBO/swizzle meanings (blackwell.md §2.4, §6.1); the 64-bit value
//! differs only in sm_100's fixed bit 46, and their swizzle fields coincide bit for bit (sm_90
//! code `c` at bits 62-63 is sm_100 code `2c` at bits 61-63).

use inkwell::values::IntValue;

use crate::ir::MmaOperand;
use crate::layout::staging::LBO;
use crate::layout::swizzle::{OperandSteps, Swizzle};
use crate::layout::IndexArith;

use super::descriptors::{smem_desc_fields, smem_desc_start};
use super::emit::Codegen;
use super::BackendError;

/// Where an MMA reads one operand: its buffer, the descriptor's LBO and SBO, whether it is
/// MN-major (the transpose bit), and its swizzle.
pub(crate) struct OperandDesc<'ctx> {
    /// Absolute byte offset (a run-time value inside a pipelined loop: the ring's stage).
    pub base: IntValue<'ctx>,
    pub lbo: u32,
    pub sbo: u32,
    pub transposed: bool,
    /// The swizzle mode and row count of a swizzled tile.
    pub swizzle: Option<(Swizzle, u32)>,
}

impl OperandDesc<'_> {
    /// Bytes from the operand's start to the unit whose M (A) or N (B) origin is `n0`, a
    /// multiple of 8: 8-row groups SBO apart (so are MN-major core-matrix columns without
    /// swizzle, SBO = 128); a swizzled MN-major tile's panels of `P/2` LBO apart, a unit inside
    /// a panel `2·(n0 mod P/2)` bytes in ([`OperandSteps::origin`]; the TMA pass admits only
    /// pieces that stay inside one panel or cover whole ones).
    ///
    /// # Errors
    /// Only those of the emitting [`IndexArith`].
    pub fn origin<A: IndexArith>(&self, a: &A, n0: A::V) -> Result<A::V, A::E> {
        match self.swizzle {
            Some((sw, _)) => self.steps().origin(a, sw, n0),
            None => a.mul(a.shr(n0, 3)?, a.c(self.sbo)),
        }
    }

    /// Bytes from the operand's start to its K = 16 step `ks` (two K-adjacent core matrices,
    /// 2·LBO, without swizzle).
    pub fn k_step_bytes(&self, ks: u32) -> u32 {
        match self.swizzle {
            Some((sw, rows)) => self.steps().k_step(sw, rows, ks),
            None => ks * 2 * self.lbo,
        }
    }

    fn steps(&self) -> OperandSteps {
        OperandSteps { lbo: self.lbo, sbo: self.sbo, mn_major: self.transposed }
    }

    /// The descriptor's constant bits on sm_90: LBO, SBO and the swizzle mode (bits 62-63).
    /// (sm_100 adds bit 46: `super::sm100::descriptors::SDESC_VERSION`.)
    pub fn fields(&self) -> Result<u64, BackendError> {
        Ok(smem_desc_fields(self.lbo, self.sbo)? | (self.swizzle.map_or(0, |(sw, _)| sw.sm90_desc_code()) << 62))
    }
}

impl<'ctx> Codegen<'ctx, '_> {
    /// The descriptor of operand `op` (`is_b`: the B operand) when its tile is read in place
    /// ([`crate::passes::var_roles::VarRoles::tiled`]), `None` when it must be staged. The
    /// variable's columns are K when A is untransposed or B transposed: K-major (core matrices
    /// adjacent along K LBO = 128 apart, 8-row groups 16·cols apart; swizzled: SBO = 8 rows).
    /// Otherwise MN-major (core-matrix K groups 16·cols apart, M/N blocks 128; swizzled: LBO =
    /// the panel, SBO = 8 K rows).
    pub(crate) fn tiled_operand(&mut self, op: MmaOperand, is_b: bool) -> Result<Option<OperandDesc<'ctx>>, BackendError> {
        if !self.tp.roles.is_tiled(op.var) {
            return Ok(None);
        }
        let (vr, vc) = self.shape_of(self.k.vars[op.var].ty, "MMA operand")?;
        let k_major = op.transposed == is_b;
        let buf = self.var_buf(op.var)?;
        // Static range check over the whole ring (every stage a descriptor may name).
        let (stages, stride) = self.tp.smem.rings.get(op.var).copied().flatten().unwrap_or((1, 0));
        smem_desc_start(buf)?;
        check_range(self, buf + (stages - 1) * stride + vr * vc * 2)?;
        let base = match self.stage_offset(op.var)? {
            Some(off) => self.b.build_int_add(self.i32(buf as i32), off, "op.base")?,
            None => self.i32(buf as i32),
        };
        Ok(Some(match self.tp.tma.swizzle_of(op.var) {
            Some(sw) => {
                let st = sw.operand(vr, k_major);
                OperandDesc { base, lbo: st.lbo, sbo: st.sbo, transposed: st.mn_major, swizzle: Some((sw, vr)) }
            }
            None if k_major => OperandDesc { base, lbo: LBO, sbo: 16 * vc, transposed: false, swizzle: None },
            None => OperandDesc { base, lbo: 16 * vc, sbo: LBO, transposed: true, swizzle: None },
        }))
    }

    /// The start-address field of a descriptor for byte `off` of the dynamic shared memory:
    /// `(addr >> 4) & 0x3fff` (the mask drops the shared window's CTA bits).
    pub(crate) fn desc_start(&self, smem_addr: IntValue<'ctx>, off: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        let addr = self.b.build_int_add(smem_addr, off, "")?;
        let f = self.b.build_right_shift(addr, self.i32(4), false, "")?;
        Ok(self.b.build_and(f, self.i32(0x3fff), "")?)
    }

    /// The descriptor `bytes` (a multiple of 16) past `start` ([`Self::desc_start`]), with the
    /// constant fields `hi`.
    pub(crate) fn descriptor(&self, start: IntValue<'ctx>, bytes: u32, hi: u64) -> Result<IntValue<'ctx>, BackendError> {
        if !bytes.is_multiple_of(16) {
            return Err(BackendError::Invalid(format!("an MMA operand step {bytes} bytes into its operand is not 16-byte aligned")));
        }
        let i64t = self.ctx.i64_type();
        let f = self.b.build_int_nuw_add(start, self.i32((bytes >> 4) as i32), "")?;
        let f = self.b.build_int_z_extend(f, i64t, "")?;
        Ok(self.b.build_or(f, i64t.const_int(hi, false), "desc")?)
    }
}

/// Checks that an operand ending at byte `end` lies inside the range a descriptor's 14-bit
/// start-address field reaches.
pub(crate) fn check_range(cg: &Codegen<'_, '_>, end: u32) -> Result<(), BackendError> {
    let range = cg.target.info().smem_descriptor_range;
    if end > range {
        return Err(BackendError::Invalid(format!("MMA operand ends at byte {end}, beyond the {range}-byte range of a shared-memory descriptor")));
    }
    Ok(())
}
