//! 16-byte vector stores of a fragment-order `Store` (issue 9, item 3: epilogues "round to bf16
//! in registers and store with vector stores").
//!
//! In the wgmma fragment a thread holds 2-element pairs, one per 8-column group of its two rows,
//! so a 2-element store of a warp writes 8 rows × 8 columns: 16 bytes of each row at 2-byte
//! elements, half a 32-byte sector. Over a 32-column block (four groups), the four lanes of a quad
//! trade pairs ([`crate::layout::quad_transpose`]) until lane `q` holds group `q`'s eight columns;
//! each lane then writes its row segment with one 16-byte store — a quarter of the store
//! instructions, each row segment a full sector. Only 2-byte elements take this path
//! ([`crate::layout::quad_transpose::row_segments_apply`] says why).
//!
//! Each pair's write flags (inside the tensor; the `where` mask true) travel with it, so a
//! lane knows which of its segment's eight elements to write: all of them and a 16-byte aligned
//! segment take the vector stores; otherwise (a tensor's edge, a masked row of a partial chunk)
//! the lane writes the flagged elements one by one. The values stored are the same either way.
//! (Columns run along the tensor's last, unit-stride dimension, so element `i` of a segment is
//! `i` elements after its first.)

use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

use crate::ir::{Elem, Index, Param};
use crate::layout::quad_transpose::{block_pair, quad_transpose, segment_anchor, segment_column, segment_element, QuadOps};

use super::super::emit::Codegen;
use super::super::BackendError;
use super::frag_eval::FragPair;

impl<'ctx> Codegen<'ctx, '_> {
    /// Stores one 32-column block of fragment pairs (`pairs`: [`BLOCK_PAIRS`](crate::layout::quad_transpose::BLOCK_PAIRS) of them, values
    /// of element type `vel`) of thread `t` of its warpgroup into `dst`, a tensor of 2-byte
    /// elements (anything else is an internal error): the quad trades the
    /// pairs' bits and their write flags (inside the tensor, `where` mask true), then each lane
    /// writes its two row segments, each with 16-byte stores where all eight flags hold and the
    /// segment is 16-byte aligned, element by element where they do not.
    pub(crate) fn store_fragment_block(&mut self, dst: Param, index: &[Index], pairs: &[FragPair<'ctx>], vel: Elem, t: IntValue<'ctx>) -> Result<(), BackendError> {
        let elem = self.tensor_elem(dst)?;
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        if elem.size_bytes() != 2 {
            return Err(BackendError::Invalid(format!("16-byte row segments of {elem:?} elements: the quad trade is for 2-byte ones")));
        }
        // words[h][j]: group j's pair in row half h, one 32-bit word; flags[h][j]: bit k set
        // when the pair's element k is written.
        let zero = i32t.const_zero();
        let mut words = [[zero; 4]; 2];
        let mut flags = [[zero; 4]; 2];
        let mut kept = vec![];
        for (k, p) in pairs.iter().enumerate() {
            let (h, j) = block_pair(k);
            let c1 = self.b.build_int_add(p.c, self.i32(1), "")?;
            let mut ok = [self.global_elem(dst, index, p.r, p.c)?.0, self.global_elem(dst, index, p.r, c1)?.0];
            if let Some(keep) = p.keep {
                for (o, k) in ok.iter_mut().zip(keep) {
                    kept.push((*o, k));
                    *o = self.b.build_and(*o, k, "keep")?;
                }
            }
            let hi = self.b.build_left_shift(self.b.build_int_z_extend(ok[1], i32t, "")?, self.i32(1), "")?;
            flags[h][j] = self.b.build_or(self.b.build_int_z_extend(ok[0], i32t, "")?, hi, "flags")?;
            let vs = [self.to_storage(self.convert(p.vals[0], vel, elem)?, elem)?, self.to_storage(self.convert(p.vals[1], vel, elem)?, elem)?];
            let pair = self.storage_pair(vs, elem)?;
            words[h][j] = self.b.build_bit_cast(pair, i32t, "w")?.into_int_value();
        }
        self.trap_on_kept_outside(dst, &kept)?;
        // Lane q's segment in row half h: the row of its pairs, columns 8q .. 8q + 7 of the
        // block (its first pair's column is the block's start + 2q).
        let q = self.b.build_and(t, self.i32(3), "q")?;
        let ity = self.ctx.i16_type();
        for h in 0..2 {
            // One row half at a time, its words traded just before they are stored: fewer
            // values live at once (`shfl.sync` waits for the whole warp, so the half before
            // may have branched).
            for w in [&mut words[h], &mut flags[h]] {
                quad_transpose(&mut LaneOps { cg: self, t }, w)?;
            }
            let p = &pairs[segment_anchor(h)];
            let c = segment_column(&*self, p.c, q)?;
            let (_, seg) = self.global_elem(dst, index, p.r, c)?;
            // The segment's 8 flags (element 2j + k: bit k of word j) and its alignment.
            let mut all = zero;
            for (j, f) in flags[h].iter().enumerate() {
                all = self.b.build_or(all, self.b.build_left_shift(*f, self.i32(2 * j as i32), "")?, "")?;
            }
            let addr = self.b.build_ptr_to_int(seg, i64t, "")?;
            let aligned = self.b.build_int_compare(IntPredicate::EQ, self.b.build_and(addr, i64t.const_int(15, false), "")?, i64t.const_zero(), "")?;
            let full = self.b.build_and(self.b.build_int_compare(IntPredicate::EQ, all, self.i32(0xff), "")?, aligned, "full")?;
            let flat = words[h];
            // Element i of the segment as its storage bits (half a word).
            let bits = |cg: &Self, i: usize| -> Result<IntValue<'ctx>, BackendError> {
                let (w, shift) = segment_element(i);
                let w = cg.b.build_right_shift(flat[w], cg.i32(shift as i32), false, "")?;
                Ok(cg.b.build_int_truncate(w, ity, "")?)
            };
            self.if_else(
                full,
                &mut |cg| {
                    let mut v = i32t.vec_type(4).get_undef();
                    for (k, x) in flat.iter().enumerate() {
                        v = cg.b.build_insert_element(v, *x, cg.i32(k as i32), "")?;
                    }
                    cg.b.build_store(seg, v)?.set_alignment(16).map_err(|e| BackendError::Invalid(e.to_string()))?;
                    Ok(())
                },
                &mut |cg| {
                    for i in 0..8 {
                        let bit = cg.b.build_and(all, cg.i32(1 << i), "")?;
                        let on = cg.b.build_int_compare(IntPredicate::NE, bit, cg.i32(0), "")?;
                        let x = bits(cg, i)?;
                        // SAFETY of the GEP: element i of the row segment, dereferenced only
                        // where its flag says it is inside the tensor.
                        let at = unsafe { cg.b.build_gep(ity, seg, &[i64t.const_int(i as u64, false)], "el")? };
                        cg.if_then(on, &mut |cg| cg.b.build_store(at, x).map(|_| ()).map_err(Into::into))?;
                    }
                    Ok(())
                },
            )?;
        }
        Ok(())
    }
}

/// [`QuadOps`] on one lane's LLVM values: `t` is the thread's index in its warpgroup.
struct LaneOps<'a, 'ctx, 'm> {
    cg: &'a Codegen<'ctx, 'm>,
    t: IntValue<'ctx>,
}

impl<'ctx> QuadOps for LaneOps<'_, 'ctx, '_> {
    type V = IntValue<'ctx>;
    type B = IntValue<'ctx>;
    type E = BackendError;
    fn lane_bit(&mut self, m: u32) -> Result<IntValue<'ctx>, BackendError> {
        let bit = self.cg.b.build_and(self.t, self.cg.i32(m as i32), "")?;
        Ok(self.cg.b.build_int_compare(IntPredicate::NE, bit, self.cg.i32(0), "lanebit")?)
    }
    fn select(&mut self, b: IntValue<'ctx>, x: IntValue<'ctx>, y: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.cg.b.build_select(b, x, y, "")?.into_int_value())
    }
    fn shfl_xor(&mut self, x: IntValue<'ctx>, m: u32) -> Result<IntValue<'ctx>, BackendError> {
        let args: [BasicValueEnum<'ctx>; 4] = [self.cg.i32(-1).into(), x.into(), self.cg.i32(m as i32).into(), self.cg.i32(0x1f).into()];
        Ok(self.cg.call("llvm.nvvm.shfl.sync.bfly.i32", Some(self.cg.ctx.i32_type().into()), &args)?.into_int_value())
    }
}
