//! `Mma` with `mma.sync.aligned.m16n8k16` (sm_80+; the sm_90a path, and the sm_100a path for
//! accumulators that are not in tensor memory).
//!
//! The warps split the `M x N` output into 16x8 fragments (warp `w` takes fragments
//! `w, w+warps, …`). Per fragment, K advances in steps of 16; the A and B fragments are built
//! from the row-major shared-memory operand buffers (transposition is a change of indexing),
//! the accumulator stays in four f32 registers, and at the end D is written (adding the old D
//! when accumulating, subtracting when negating). Fragment layouts come from
//! [`crate::layout::mma_sync`] (table-tested against the PTX ISA; H200-verified in blackwell.md
//! §6.2): every element sits at a constant offset from `(groupID, 2·threadID_in_group)`.

use inkwell::values::{BasicValueEnum, IntValue};

use crate::ir::{Elem, MmaOperand, Var};
use crate::layout::mma_sync::{lane_coords, offset, A_REGS, B_REGS, C_REGS};

use super::super::emit::Codegen;
use super::super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Raw 16-bit element `(i, j)` of an MMA operand in its *logical* orientation
    /// (`A` as `M x K`, `B` as `K x N`), read from the variable's row-major buffer.
    pub fn operand_bits(&self, op: MmaOperand, i: IntValue<'ctx>, j: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        self.operand_bits_at(op, self.var_buf(op.var)?, i, j)
    }

    /// As [`Codegen::operand_bits`], reading the variable's tile from byte `buf`.
    pub fn operand_bits_at(&self, op: MmaOperand, buf: u32, i: IntValue<'ctx>, j: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        let (_, cols) = self.shape_of(self.k.vars[op.var].ty, "MMA operand")?;
        let (r, c) = if op.transposed { (j, i) } else { (i, j) };
        let idx = self.b.build_int_add(self.b.build_int_mul(r, self.i32(cols as i32), "")?, c, "")?;
        let off = self.b.build_int_add(self.i32(buf as i32), self.b.build_int_mul(idx, self.i32(2), "")?, "")?;
        let p = self.smem_at(off)?;
        Ok(self.b.build_load(self.ctx.i16_type(), p, "op")?.into_int_value())
    }

    /// Two 16-bit elements packed low-first into an i32.
    fn pack2(&self, lo: IntValue<'ctx>, hi: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        let i32t = self.ctx.i32_type();
        let lo = self.b.build_int_z_extend(lo, i32t, "")?;
        let hi = self.b.build_int_z_extend(hi, i32t, "")?;
        let hi = self.b.build_left_shift(hi, self.i32(16), "")?;
        Ok(self.b.build_or(lo, hi, "pk")?)
    }

    /// Checks the operand types of an MMA and returns `(M, N, K, operand elem)`.
    pub fn mma_shape(&self, dst: Var, a: MmaOperand, b: MmaOperand) -> Result<(u32, u32, u32, Elem), BackendError> {
        let (m, n) = self.shape_of(self.k.vars[dst].ty, "MMA accumulator")?;
        let (ar, ac) = self.shape_of(self.k.vars[a.var].ty, "MMA A")?;
        let kk = if a.transposed { ar } else { ac };
        let (ae, be) = (self.k.vars[a.var].ty.elem(), self.k.vars[b.var].ty.elem());
        if ae != be || !matches!(ae, Elem::Bf16 | Elem::F16) {
            return Err(self.unsupported(format!("MMA operands of {ae} and {be} (need both bf16 or both f16)")));
        }
        if self.k.vars[dst].ty.elem() != Elem::F32 {
            return Err(self.unsupported(format!("MMA accumulator of {} (need f32)", self.k.vars[dst].ty.elem())));
        }
        if m % 16 != 0 || n % 8 != 0 || kk % 16 != 0 {
            return Err(BackendError::Invalid(format!("MMA shape {m}x{n}x{kk}: need M % 16 == 0, N % 8 == 0, K % 16 == 0")));
        }
        Ok((m, n, kk, ae))
    }

    /// Emits an `Mma` through `mma.sync.m16n8k16`; D lives in a shared-memory f32 tile.
    pub fn mma_sync(&mut self, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        let (m, n, kdim, elem) = self.mma_shape(dst, a, b)?;
        let dbuf = self.var_buf(dst)?;
        let nwarps = self.k.threads / 32;
        if nwarps == 0 {
            return Err(BackendError::Invalid("MMA needs at least one warp".into()));
        }
        let lane = self.b.build_and(self.tid, self.i32(31), "lane")?;
        let (g, t2) = lane_coords(&*self, lane)?;
        let f32t = self.ctx.f32_type();
        let accs: Vec<_> = (0..4).map(|j| self.entry_alloca(f32t.into(), &format!("acc{j}"))).collect::<Result<_, _>>()?;
        let nfrag_n = n / 8;
        let warp = self.warp;
        self.strided_loop(warp, nwarps, (m / 16) * nfrag_n, &mut |cg, f| {
            let m0 = cg.b.build_int_mul(cg.b.build_int_unsigned_div(f, cg.i32(nfrag_n as i32), "")?, cg.i32(16), "m0")?;
            let n0 = cg.b.build_int_mul(cg.b.build_int_unsigned_rem(f, cg.i32(nfrag_n as i32), "")?, cg.i32(8), "n0")?;
            for acc in &accs {
                cg.b.build_store(*acc, f32t.const_zero())?;
            }
            let row0 = cg.b.build_int_add(m0, g, "")?;
            let coln = cg.b.build_int_add(n0, g, "")?;
            let zero = cg.i32(0);
            let steps = cg.i32((kdim / 16) as i32);
            cg.counted_loop(zero, steps, zero, false, &mut |cg, ks| {
                let k0 = cg.b.build_int_mul(ks, cg.i32(16), "k0")?;
                let ka = cg.b.build_int_add(k0, t2, "")?;
                // A register r holds (row0 + A_REGS[r].0, ka + A_REGS[r].1 + h) for halves h = 0, 1.
                let mut regs = vec![];
                for &(ro, ko) in &A_REGS {
                    let r = offset(&*cg, row0, ro)?;
                    let (k1, k2) = (offset(&*cg, ka, ko)?, offset(&*cg, ka, ko + 1)?);
                    regs.push(cg.pack2(cg.operand_bits(a, r, k1)?, cg.operand_bits(a, r, k2)?)?);
                }
                // B register r holds (ka + B_REGS[r] + h, coln).
                for &ko in &B_REGS {
                    let (k1, k2) = (offset(&*cg, ka, ko)?, offset(&*cg, ka, ko + 1)?);
                    regs.push(cg.pack2(cg.operand_bits(b, k1, coln)?, cg.operand_bits(b, k2, coln)?)?);
                }
                let cur: Vec<BasicValueEnum> = accs.iter().map(|p| cg.b.build_load(f32t, *p, "c")).collect::<Result<_, _>>()?;
                let sty = cg.ctx.struct_type(&[f32t.into(); 4], false);
                let frag: Vec<BasicValueEnum> = if elem == Elem::Bf16 {
                    regs.iter().map(|x| (*x).into()).collect()
                } else {
                    let h2 = cg.ctx.f16_type().vec_type(2);
                    regs.iter().map(|x| cg.b.build_bit_cast(*x, h2, "")).collect::<Result<_, _>>()?
                };
                let name = if elem == Elem::Bf16 { "llvm.nvvm.mma.m16n8k16.row.col.bf16" } else { "llvm.nvvm.mma.m16n8k16.row.col.f32.f32" };
                let args: Vec<BasicValueEnum> = frag.into_iter().chain(cur).collect();
                let d = cg.call(name, Some(sty.into()), &args)?.into_struct_value();
                for (j, acc) in accs.iter().enumerate() {
                    let v = cg.b.build_extract_value(d, j as u32, "d")?;
                    cg.b.build_store(*acc, v)?;
                }
                Ok(())
            })?;
            // D register j is element (row0 + C_REGS[j].0, n0 + t2 + C_REGS[j].1).
            let c0 = cg.b.build_int_add(n0, t2, "")?;
            for (j, &(ro, co)) in C_REGS.iter().enumerate() {
                let (r, c) = (offset(&*cg, row0, ro)?, offset(&*cg, c0, co)?);
                let mut v = cg.b.build_load(f32t, accs[j], "acc")?.into_float_value();
                let idx = cg.b.build_int_add(cg.b.build_int_mul(r, cg.i32(n as i32), "")?, c, "")?;
                if accumulate {
                    let old = cg.load_elem(dbuf, idx, Elem::F32)?.into_float_value();
                    v = if negate { cg.b.build_float_sub(old, v, "")? } else { cg.b.build_float_add(old, v, "")? };
                } else if negate {
                    v = cg.b.build_float_neg(v, "")?;
                }
                cg.store_elem(dbuf, idx, Elem::F32, v.into())?;
            }
            Ok(())
        })
    }
}
