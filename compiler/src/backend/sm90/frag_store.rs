//! 16-byte vector stores of a fragment-order `Store` (issue 9, item 3: epilogues "round to bf16
//! in registers and store with vector stores").
//!
//! In the wgmma fragment a thread holds 2-element pairs, one per 8-column group of its two rows,
//! so a 2-element store of a warp writes 8 rows × 8 columns: 16 bytes of each row at bf16 (half a
//! 32-byte sector), 32 at f32. Over a 32-column block (four groups), the four lanes of a quad
//! trade pairs ([`crate::layout::quad_transpose`]) until lane `q` holds group `q`'s eight columns;
//! each lane then writes its row segment with one 16-byte store at 2-byte elements, two at
//! 4-byte ones — a quarter (a half) of the store instructions, each row segment a full sector.
//!
//! The vector path is taken when every element the warp holds in the block is inside the
//! tensor and unmasked and every lane's segment is 16-byte aligned (`vote.sync.all`);
//! otherwise the warp writes its own pairs as before ([`Codegen::store_global_pairs`]: a
//! tensor's edge, a masked row of a partial chunk). The values stored are the same either way.

use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

use crate::ir::{Elem, Index, Param};
use crate::layout::quad_transpose::{quad_transpose, QuadOps};

use super::super::emit::Codegen;
use super::super::memory::columns_are_last;
use super::super::BackendError;
use super::frag_eval::FragPair;

/// Fragment pairs of one 32-column block: two rows × four 8-column groups, in register order
/// (pair `2j + h` is group `j` of row half `h`, as [`crate::layout::wgmma::fragment_coords`]
/// numbers registers `4j + 2h`).
pub(crate) const BLOCK_PAIRS: usize = 8;

/// Whether a store of element type `elem` through `index` can take the vector path: 2- or
/// 4-byte elements along the tensor's last (unit-stride) dimension.
pub(crate) fn vector_store_applies(index: &[Index], elem: Elem) -> bool {
    columns_are_last(index) && matches!(elem.size_bytes(), 2 | 4)
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Stores one 32-column block of fragment pairs (`pairs`: [`BLOCK_PAIRS`] of them, values
    /// of element type `vel`) of thread `t` of its warpgroup into `dst`, with a 16-byte store per
    /// row segment where the whole warp's block allows it (module docs).
    pub(crate) fn store_fragment_block(&mut self, dst: Param, index: &[Index], pairs: &[FragPair<'ctx>], vel: Elem, t: IntValue<'ctx>) -> Result<(), BackendError> {
        let elem = self.tensor_elem(dst)?;
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let mut ok = self.ctx.bool_type().const_int(1, false);
        // words[h][part][j]: the 32-bit parts of group j's pair in row half h.
        let parts = (elem.size_bytes() / 2) as usize;
        let mut words: Vec<Vec<[IntValue<'ctx>; 4]>> = vec![vec![[i32t.const_zero(); 4]; parts]; 2];
        for (k, p) in pairs.iter().enumerate() {
            let c1 = self.b.build_int_add(p.c, self.i32(1), "")?;
            let (inb0, _) = self.global_elem(dst, index, p.r, p.c)?;
            let (inb1, _) = self.global_elem(dst, index, p.r, c1)?;
            ok = self.b.build_and(ok, self.b.build_and(inb0, inb1, "")?, "")?;
            if let Some([k0, k1]) = p.keep {
                ok = self.b.build_and(ok, self.b.build_and(k0, k1, "")?, "")?;
            }
            let vs = [self.to_storage(self.convert(p.vals[0], vel, elem)?, elem)?, self.to_storage(self.convert(p.vals[1], vel, elem)?, elem)?];
            let (h, j) = (k % 2, k / 2);
            if parts == 1 {
                let pair = self.storage_pair(vs, elem)?;
                words[h][0][j] = self.b.build_bit_cast(pair, i32t, "w")?.into_int_value();
            } else {
                for (part, v) in vs.into_iter().enumerate() {
                    words[h][part][j] = self.b.build_bit_cast(v, i32t, "w")?.into_int_value();
                }
            }
        }
        // Lane q's segment: its row, columns 8q .. 8q + 7 of the block (its first pair's column
        // is the block's start + 2q).
        let q = self.b.build_and(t, self.i32(3), "q")?;
        let mut segments = vec![];
        for p in &pairs[..2] {
            let c = self.b.build_int_add(p.c, self.b.build_int_mul(q, self.i32(6), "")?, "")?;
            let (_, ptr) = self.global_elem(dst, index, p.r, c)?;
            let addr = self.b.build_ptr_to_int(ptr, i64t, "")?;
            let low = self.b.build_and(addr, i64t.const_int(15, false), "")?;
            ok = self.b.build_and(ok, self.b.build_int_compare(IntPredicate::EQ, low, i64t.const_zero(), "")?, "aligned")?;
            segments.push(ptr);
        }
        let all = self.call("llvm.nvvm.vote.all.sync", Some(self.ctx.bool_type().into()), &[self.i32(-1).into(), ok.into()])?.into_int_value();
        for row in &mut words {
            for w in row.iter_mut() {
                quad_transpose(&mut LaneOps { cg: self, t }, w)?;
            }
        }
        let elems: Vec<_> = pairs.iter().map(|p| (p.r, p.c, p.vals, p.keep)).collect();
        self.if_else(
            all,
            &mut |cg| {
                for (h, &ptr) in segments.iter().enumerate() {
                    // Column order: group q's pairs j = 0..3, each pair's parts in turn.
                    let flat: Vec<IntValue<'ctx>> = (0..4).flat_map(|j| (0..parts).map(move |part| (part, j))).map(|(part, j)| words[h][part][j]).collect();
                    for (s, chunk) in flat.chunks(4).enumerate() {
                        let mut v = i32t.vec_type(4).get_undef();
                        for (k, x) in chunk.iter().enumerate() {
                            v = cg.b.build_insert_element(v, *x, cg.i32(k as i32), "")?;
                        }
                        // SAFETY of the GEP: 16 bytes on, inside the 32-byte segment of a 4-byte tile.
                        let at = unsafe { cg.b.build_gep(cg.ctx.i8_type(), ptr, &[i64t.const_int(16 * s as u64, false)], "seg")? };
                        cg.b.build_store(at, v)?.set_alignment(16).map_err(|e| BackendError::Invalid(e.to_string()))?;
                    }
                }
                Ok(())
            },
            &mut |cg| cg.store_global_pairs(dst, index, &elems, vel),
        )
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
