//! `Mma` on `sm_100a` with `tcgen05.mma.cta_group::1.kind::f16` into a TMEM accumulator.
//!
//! Sequence (blackwell.md §2, §3.2, §4.3):
//! 1. every thread copies A (`M x K`) and B (as `N x K`) from their row-major shared-memory
//!    buffers into this instruction's scratch in the SWIZZLE_NONE K-major canonical layout
//!    ([`kmajor_offset`]; transposition is a change of indexing);
//! 2. `fence.proxy.async.shared::cta`, `tcgen05.fence::before_thread_sync`, `bar.sync`,
//!    `tcgen05.fence::after_thread_sync`;
//! 3. thread 0 issues one `tcgen05.mma` per K=16 step and per ≤256-column piece of N (pieces at
//!    adjacent TMEM columns), with `enable_input_d` false only on the first step of a
//!    non-accumulating MMA and negation through the negate-A bit of the instruction descriptor,
//!    then `tcgen05.commit` to the mbarrier;
//! 4. everybody waits on the mbarrier (phase-tracked) and fences after the wait.
//!
//! Accumulators outside tensor memory use `mma.sync` ([`super::super::sm90::mma_sync`]), which
//! sm_100a also has (the dispatch is in [`super::Sm100`]). An A operand in tensor memory is copied to shared memory first
//! (`tcgen05.ld`), so every MMA reads both operands through shared-memory descriptors; the
//! `tcgen05.mma` form with A from TMEM is a later optimisation.

use crate::ir::{Inst, MmaOperand, Space, Var};
use crate::layout::staging::{sbo_for, staging, LBO};
use crate::passes::smem_plan::ALIGN;

use super::super::emit::Codegen;
use super::super::BackendError;
use super::super::descriptors::smem_desc_start;
use super::descriptors::{instr_desc, SDESC_VERSION};
use super::super::operand_desc::OperandDesc;
use super::require_tcgen05;

/// Widest N of one `tcgen05.mma` (cta_group::1).
const MAX_N: u32 = crate::passes::tma::TCGEN05_MAX_N;

impl<'ctx> Codegen<'ctx, '_> {
    /// Emits an `Mma` into a TMEM accumulator with `tcgen05.mma` (see the module docs).
    pub fn mma_tcgen05(&mut self, i: Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.mma")?;
        let (m, n, kdim, elem) = self.mma_shape(dst, a, b)?;
        if n % 16 != 0 {
            return Err(BackendError::Invalid(format!("tcgen05 MMA needs N a multiple of 16, found {n}")));
        }
        let pieces: Vec<(u32, u32)> = (0..n).step_by(MAX_N as usize).map(|n0| (n0, (n - n0).min(MAX_N))).collect();
        let d_off = self.tmem.offset(dst, &self.k.vars[dst].name)?;
        if d_off + n > self.tmem.alloc_columns {
            return Err(BackendError::Invalid(format!("accumulator `{}` at columns {d_off}..{} exceeds the allocation of {}", self.k.vars[dst].name, d_off + n, self.tmem.alloc_columns)));
        }
        // 1. Operand tiles are read where they are (core-matrix or swizzled layout); the
        //    others are restaged into this MMA's scratch, K-major.
        let (ta, tb) = (self.tiled_operand(a, false)?, self.tiled_operand(b, true)?);
        let (da, db) = match (ta, tb) {
            (Some(da), Some(db)) => (da, db),
            (ta, tb) => {
                let (sa, sb) = self.stage_tcgen05_operands(i, a, b, (m, n, kdim), elem, (ta.is_none(), tb.is_none()))?;
                (ta.unwrap_or(sa), tb.unwrap_or(sb))
            }
        };
        let idescs: Vec<u32> = pieces.iter().map(|&(_, w)| instr_desc(elem, m, w, negate, da.transposed, db.transposed)).collect::<Result<_, _>>()?;
        let (hi_a, hi_b) = (da.fields()? | SDESC_VERSION, db.fields()? | SDESC_VERSION);
        // 2. Make the generic-proxy writes visible to the tensor core.
        self.fence_proxy_async()?;
        self.tc_fence_before()?;
        self.bar_sync()?;
        self.tc_fence_after()?;
        // 3. One thread issues the MMAs and the commit.
        let base = self.tmem_base()?;
        let smem_addr = self.b.build_ptr_to_int(self.smem, self.ctx.i32_type(), "smem.addr")?;
        let bar = self.mbar()?;
        self.on_thread0(&mut |cg| {
            // Start fields masked once; steps and pieces add constant 16-byte units to them
            // (`Codegen::descriptor`).
            let (a_start, b_start) = (cg.desc_start(smem_addr, da.base)?, cg.desc_start(smem_addr, db.base)?);
            for ks in 0..kdim / 16 {
                for (p, &(n0, _)) in pieces.iter().enumerate() {
                    let adesc = cg.descriptor(a_start, da.k_step_bytes(ks), hi_a)?;
                    let b_off = crate::layout::eval(db.origin(&crate::layout::Eval, n0)) + db.k_step_bytes(ks);
                    let bdesc = cg.descriptor(b_start, b_off, hi_b)?;
                    let daddr = cg.b.build_int_add(base, cg.i32((d_off + n0) as i32), "")?;
                    let dptr = cg.tmem_ptr(daddr)?;
                    let enable = accumulate || ks > 0;
                    let i32t = cg.ctx.i32_type();
                    cg.call(
                        "llvm.nvvm.tcgen05.mma.shared",
                        None,
                        &[
                            dptr.into(),
                            adesc.into(),
                            bdesc.into(),
                            i32t.const_int(u64::from(idescs[p]), false).into(),
                            cg.ctx.bool_type().const_int(u64::from(enable), false).into(),
                            cg.i32(0).into(), // kind::f16
                            cg.i32(1).into(), // cta_group::1
                            cg.i32(0).into(), // collector::a::discard
                        ],
                    )?;
                }
            }
            cg.call("llvm.nvvm.tcgen05.commit.shared.cg1", None, &[bar.into()])?;
            Ok(())
        })?;
        // 4. Everybody waits for completion.
        self.mbar_wait()
    }

    /// Restages the operands `which` says into MMA `i`'s scratch in the K-major SWIZZLE_NONE
    /// layout (an A operand in tensor memory through a row-major copy first) and returns their
    /// descriptors; the other operand's entry is a placeholder its caller replaces.
    fn stage_tcgen05_operands(&mut self, i: Inst, a: MmaOperand, b: MmaOperand, (m, n, kdim): (u32, u32, u32), elem: crate::ir::Elem, (stage_a, stage_b): (bool, bool)) -> Result<(OperandDesc<'ctx>, OperandDesc<'ctx>), BackendError> {
        let a_tmem_shape = if self.k.vars[a.var].space == Space::Tmem { self.k.vars[a.var].ty.shape() } else { None };
        let layout = staging(m, n, kdim, a_tmem_shape, ALIGN);
        let a_stage = self.scratch_buf(i)?;
        let b_stage = a_stage + layout.b;
        // Static range check of every descriptor start address (relative to the smem window's
        // base, which is 1024-B aligned): 16-B aligned and encodable.
        let last = b_stage + n * kdim * 2;
        smem_desc_start(a_stage)?;
        smem_desc_start(b_stage)?;
        let range = self.target.info().smem_descriptor_range;
        if last >= range {
            return Err(BackendError::Invalid(format!("MMA staging ends at byte {last}, beyond the {range}-byte range of a shared-memory descriptor (the shared-memory planner's budget check should have rejected this kernel)")));
        }
        if stage_a {
            // An A operand in tensor memory is first copied to a row-major shared tile (then it
            // takes the same path as a shared-memory operand).
            let a_src = if let Some(tmp) = layout.tmem_a {
                let tmp = a_stage + tmp;
                self.tmem_to_smem(a.var, tmp, elem)?;
                self.bar_sync()?;
                tmp
            } else {
                self.var_buf(a.var)?
            };
            self.stage_kmajor(a, a_src, false, a_stage, m, kdim)?;
        }
        if stage_b {
            let b_src = self.var_buf(b.var)?;
            self.stage_kmajor(b, b_src, true, b_stage, n, kdim)?;
        }
        let staged = |cg: &Self, at: u32| OperandDesc { base: cg.i32(at as i32), lbo: LBO, sbo: sbo_for(kdim), transposed: false, swizzle: None };
        Ok((staged(self, a_stage), staged(self, b_stage)))
    }
}