//! Global → shared tile copies with `cp.async` (sm_80+): 16-byte asynchronous copies that do not
//! pass through registers, all of a thread's copies in flight at once, completed with
//! `cp.async.wait_all` (PTX ISA 9.7.9.25 "cp.async"). This replaces an element-at-a-time loop
//! whose every iteration waited for its own global load.
//!
//! A tile qualifies when its column range is on the tensor's last (contiguous) dimension, its
//! other indices name one more range (the rows) and points, its element type is the tensor's,
//! and a row of the tile is a whole number of 16-byte chunks
//! ([`crate::passes::pipeline::async_copyable`], which the pipelining pass asks too). Whether the chunks are aligned is
//! known only at run time (the base pointer, the start column, every outer stride), so the copy
//! is guarded by that test and falls back to the element loop. Out-of-bounds parts keep the
//! masked-load meaning (zeros): `cp.async`'s source size is the number of valid bytes of the
//! chunk (0 for a row outside the tensor) and the rest of the 16 bytes is zero-filled; an
//! invalid chunk reads from the tensor's base, which is a valid address.
//!
//! The destination is row-major (rows padded or not), the 8 × 8 core-matrix layout of an operand tile that wgmma
//! reads in place ([`crate::layout::staging::kmajor_offset`], whose 16-byte core-matrix rows are
//! exactly these chunks), or a swizzled layout ([`crate::layout::swizzle`], which permutes whole
//! 16-byte chunks).

use inkwell::values::IntValue;
use inkwell::IntPredicate;

use crate::ir::{Index, Param};
use crate::passes::pipeline::{chunk_copyable, element_copyable};
use crate::layout::bank::pitched_offset;
use crate::layout::staging::kmajor_offset;
use crate::layout::swizzle::{swizzled_offset, Swizzle};

use super::emit::Codegen;
use super::BackendError;

/// Bytes of one `cp.async.cg` copy.
const CHUNK: u32 = 16;

/// Where a copied tile goes in shared memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TileLayout {
    /// Row-major: element `(r, c)` at `(r·cols + c)·size`.
    RowMajor,
    /// The 8 × 8 core-matrix layout ([`kmajor_offset`] with the tile's column count as K).
    CoreMatrices,
    /// Column panels in a swizzle mode ([`swizzled_offset`]; its 16-byte chunks stay whole).
    Swizzled(Swizzle),
    /// Row-major with rows this many elements apart (more than the columns, a whole number of
    /// 16-byte chunks): padded so a fragment-order read spreads over the banks
    /// ([`crate::layout::bank::fragment_pitch`], chosen by [`crate::passes::bank_pad`]).
    Pitched(u32),
}

impl TileLayout {
    /// Byte offset of element `(r, c)` of a `rows x cols` tile of `size`-byte elements.
    pub fn offset<'ctx>(self, cg: &Codegen<'ctx, '_>, r: IntValue<'ctx>, c: IntValue<'ctx>, (rows, cols): (u32, u32), size: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(match self {
            TileLayout::RowMajor => cg.b.build_int_mul(cg.b.build_int_add(cg.b.build_int_mul(r, cg.i32(cols as i32), "")?, c, "")?, cg.i32(size as i32), "")?,
            TileLayout::CoreMatrices => kmajor_offset(cg, r, c, cols)?,
            TileLayout::Swizzled(sw) => swizzled_offset(cg, r, c, rows, sw)?,
            TileLayout::Pitched(pitch) => pitched_offset(cg, r, c, pitch, size)?,
        })
    }
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Copies the `rows x cols` tile `src[index]` into shared memory at byte `dst` in `layout`,
    /// with `cp.async` when the run-time alignment allows and `fallback` (the element loop)
    /// otherwise. Returns `false`, emitting nothing, when the access cannot take `cp.async` at
    /// all (see the module docs); the caller then emits its element loop alone.
    ///
    /// `dst` is the absolute byte offset in dynamic shared memory (a run-time value for a
    /// pipeline's ring stage). With `wait`, the copies are complete (`cp.async.wait_all`) when
    /// this returns; without, the caller commits and waits for them as a group.
    #[allow(clippy::too_many_arguments)] // one tile access: tensor, indices, shape, destination, layout, completion, fallback
    pub fn copy_tile_async(
        &mut self,
        src: Param,
        index: &[Index],
        (rows, cols): (u32, u32),
        dst: IntValue<'ctx>,
        layout: TileLayout,
        wait: bool,
        fallback: &mut dyn FnMut(&mut Self) -> Result<(), BackendError>,
    ) -> Result<bool, BackendError> {
        let Some(elem) = self.k.params[src].kind.tensor_elem() else { return Ok(false) };
        let size = elem.size_bytes();
        let last = index.len().saturating_sub(1);
        if !chunk_copyable(self.k, src, index, (rows, cols), elem) {
            if matches!(layout, TileLayout::RowMajor | TileLayout::Pitched(_)) && element_copyable(self.k, src, index, elem) {
                return self.copy_elements_async(src, index, (rows, cols), dst, layout, wait).map(|()| true);
            }
            return Ok(false);
        }
        // The other layouts keep 16-byte chunks whole: core matrices and swizzled panels of
        // 16-bit tiles, and padded rows (whole chunks by construction).
        let chunked = match layout {
            TileLayout::RowMajor | TileLayout::Pitched(_) => true,
            TileLayout::CoreMatrices | TileLayout::Swizzled(_) => size == 2 && rows % 8 == 0 && cols % 8 == 0,
        };
        if !chunked {
            return Ok(false);
        }
        // Run-time alignment: base, start column and every outer stride in 16-byte units.
        let i64t = self.ctx.i64_type();
        let base = self.params[src].ok_or_else(|| BackendError::Invalid("tensor parameter not bound".into()))?.into_pointer_value();
        let base_i = self.b.build_ptr_to_int(base, i64t, "base")?;
        let mut misaligned = self.b.build_and(base_i, i64t.const_int(u64::from(CHUNK - 1), false), "")?;
        let Index::Range { start: col_start, .. } = &index[last] else { return Ok(false) };
        let c0 = self.b.build_int_s_extend(self.scalar(*col_start)?.into_int_value(), i64t, "")?;
        let c0_bytes = self.b.build_int_mul(c0, i64t.const_int(u64::from(size), false), "")?;
        misaligned = self.b.build_or(misaligned, self.b.build_and(c0_bytes, i64t.const_int(u64::from(CHUNK - 1), false), "")?, "")?;
        for d in 0..last {
            let sb = self.b.build_int_mul(self.strides[src][d], i64t.const_int(u64::from(size), false), "")?;
            misaligned = self.b.build_or(misaligned, self.b.build_and(sb, i64t.const_int(u64::from(CHUNK - 1), false), "")?, "")?;
        }
        let aligned = self.b.build_int_compare(IntPredicate::EQ, misaligned, i64t.const_zero(), "aligned")?;
        let per_chunk = CHUNK / size;
        let per_row = cols / per_chunk;
        let mut copies = |cg: &mut Self| -> Result<(), BackendError> {
            cg.cta_loop(rows * per_row, &mut |cg, e| {
                let r = cg.b.build_int_unsigned_div(e, cg.i32(per_row as i32), "r")?;
                let c = cg.b.build_int_mul(cg.b.build_int_unsigned_rem(e, cg.i32(per_row as i32), "")?, cg.i32(per_chunk as i32), "c")?;
                let (src_ptr, valid) = cg.chunk_source(src, index, r, c, per_chunk, size)?;
                let off = layout.offset(cg, r, c, (rows, cols), size)?;
                let off = cg.b.build_int_add(off, dst, "")?;
                let dptr = cg.smem_at(off)?;
                cg.call("llvm.nvvm.cp.async.cg.shared.global.16.s", None, &[dptr.into(), src_ptr.into(), valid.into()])?;
                Ok(())
            })?;
            if wait {
                cg.call("llvm.nvvm.cp.async.wait.all", None, &[])?;
            }
            Ok(())
        };
        self.if_else(aligned, &mut copies, fallback)?;
        Ok(true)
    }

    /// Copies the `rows x cols` tile `src[index]` of 4-byte elements into row-major shared
    /// memory (rows padded or not) at byte `dst`, one `cp.async.ca` of 4 bytes per element (see
    /// [`element_copyable`]); an element outside the tensor is zero-filled (source size 0,
    /// reading from the tensor's base). A 4-byte element of a tensor is 4-byte aligned, so no
    /// run-time test is needed.
    #[allow(clippy::too_many_arguments)] // one tile access: tensor, indices, shape, destination, layout, completion
    fn copy_elements_async(&mut self, src: Param, index: &[Index], (rows, cols): (u32, u32), dst: IntValue<'ctx>, layout: TileLayout, wait: bool) -> Result<(), BackendError> {
        let base = self.params[src].ok_or_else(|| BackendError::Invalid("tensor parameter not bound".into()))?.into_pointer_value();
        self.cta_loop(rows * cols, &mut |cg, e| {
            let (r, c) = cg.tile_coords(e, cols)?;
            let (inb, ptr) = cg.global_elem(src, index, r, c)?;
            let from = cg.b.build_select(inb, ptr, base, "cp.src")?;
            let bytes = cg.b.build_select(inb, cg.i32(4), cg.i32(0), "valid")?;
            let at = match layout {
                TileLayout::RowMajor => cg.b.build_int_mul(e, cg.i32(4), "")?,
                _ => layout.offset(cg, r, c, (rows, cols), 4)?,
            };
            let off = cg.b.build_int_add(at, dst, "")?;
            let dptr = cg.smem_at(off)?;
            cg.call("llvm.nvvm.cp.async.ca.shared.global.4.s", None, &[dptr.into(), from, bytes])?;
            Ok(())
        })?;
        if wait {
            self.call("llvm.nvvm.cp.async.wait.all", None, &[])?;
        }
        Ok(())
    }

    /// The source address of the chunk at tile element `(r, c)` and its valid bytes (i32): 0
    /// when the row is outside the tensor, else the bytes of the `per_chunk` elements that lie
    /// before the end of the last dimension. An empty chunk points at the tensor's base.
    fn chunk_source(&self, p: Param, index: &[Index], r: IntValue<'ctx>, c: IntValue<'ctx>, per_chunk: u32, size: u32) -> Result<(inkwell::values::PointerValue<'ctx>, IntValue<'ctx>), BackendError> {
        let i64t = self.ctx.i64_type();
        let last = index.len() - 1;
        let mut row_ok = self.ctx.bool_type().const_int(1, false);
        let mut off = i64t.const_zero();
        let mut col = i64t.const_zero();
        for (d, pos) in self.index_positions(index, r, c)?.into_iter().enumerate() {
            if d == last {
                col = pos;
            } else {
                // Unsigned compare also rejects negative positions.
                let ok = self.b.build_int_compare(IntPredicate::ULT, pos, self.dims[p][d], "")?;
                row_ok = self.b.build_and(row_ok, ok, "")?;
            }
            off = self.b.build_int_add(off, self.b.build_int_mul(pos, self.strides[p][d], "")?, "")?;
        }
        // Valid elements: clamp(extent − col, 0, per_chunk); a negative column is invalid.
        let left = self.b.build_int_sub(self.dims[p][last], col, "")?;
        let in_range = self.b.build_int_compare(IntPredicate::SGE, col, i64t.const_zero(), "")?;
        let n = self.b.build_select(self.b.build_int_compare(IntPredicate::SLT, left, i64t.const_int(u64::from(per_chunk), false), "")?, left, i64t.const_int(u64::from(per_chunk), false), "")?.into_int_value();
        let n = self.b.build_select(self.b.build_int_compare(IntPredicate::SGT, n, i64t.const_zero(), "")?, n, i64t.const_zero(), "")?.into_int_value();
        let ok = self.b.build_and(row_ok, in_range, "")?;
        let n = self.b.build_select(ok, n, i64t.const_zero(), "")?.into_int_value();
        let bytes = self.b.build_int_truncate(self.b.build_int_mul(n, i64t.const_int(u64::from(size), false), "")?, self.ctx.i32_type(), "valid")?;
        let some = self.b.build_int_compare(IntPredicate::NE, n, i64t.const_zero(), "")?;
        let off = self.b.build_select(some, off, i64t.const_zero(), "")?.into_int_value();
        let base = self.params[p].ok_or_else(|| BackendError::Invalid("tensor parameter not bound".into()))?.into_pointer_value();
        let ty = self.storage_type(self.k.params[p].kind.elem());
        // SAFETY of the GEP: in bounds whenever `valid` > 0, the tensor's base otherwise.
        let ptr = unsafe { self.b.build_gep(ty, base, &[off], "cp.src")? };
        Ok((ptr, bytes))
    }
}
