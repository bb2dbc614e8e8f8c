//! `ReadVar` / `WriteVar` of tensor-memory variables on `sm_100a` through `tcgen05.ld/st.32x32b`.
//!
//! Addressing ([`crate::layout::tmem`], blackwell.md §1.1, §1.3): a TMEM address is
//! `lane << 16 | column`; variable `v` lives at `base + offset(v)`; warp `w` (< 4) may only touch
//! lanes `lane_base(w)..+32` and
//! for a 128-row tile its thread `l` holds row `32w + l`. A 64-row tile (an M=64 accumulator) uses
//! the first half of each lane quarter: rows `16w..16w+15` are lanes `32w..32w+15` (blackwell.md
//! §1.1, from CUTLASS's "half sub-partition" atom; not run on hardware), so threads `l ≥ 16` of
//! each warp hold no row (their loads are dropped, their stores write zeros into the unused half,
//! which the planner charges to this buffer). 16-bit tiles are packed two elements per 32-bit
//! cell, the even column in the low half (this back end's own convention, used by both
//! directions).
//!
//! Code size (the compile-time budget of issue 3): every access is a *run-time* loop over column
//! chunks, never unrolled per column.
//! * Reads: one `tcgen05.ld.32x32b.xW` per chunk of `W` ≤ 32 cells; a float tile goes to the
//!   row-major shared tile as one vector store per chunk (bit-identical to element-wise stores,
//!   converted with vector `fpext`/`fptrunc` when the result type differs).
//! * Writes of a plain shared tile of the same shape: one vector load + one `tcgen05.st.xW` per
//!   chunk. Writes of anything else (a fused element expression, a broadcast, integers): a loop
//!   over cells with one `tcgen05.st.32x32b.x1` per cell, so the expression is emitted once.

use inkwell::types::BasicType;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, VectorValue};
use inkwell::IntPredicate;

use crate::ir::{tmem_columns, Elem, Inst, Type, Value, Var};
use crate::layout::tmem::{address, lane_base, row_of_thread};

use super::super::emit::Codegen;
use super::super::BackendError;
use super::require_tcgen05;

/// Largest `tcgen05.ld/st.32x32b` repeat count used per instruction (32 registers per thread).
const MAX_CHUNK: u32 = 32;

/// How the cells of one row are covered: `count` run-time iterations of `width` cells, then
/// statically emitted `tail` chunks `(first cell, width)`.
struct ChunkPlan {
    width: u32,
    count: u32,
    tail: Vec<(u32, u32)>,
}

/// Column chunks `(start, width)` covering `n` cells from `start` with power-of-two widths.
fn chunks(start: u32, n: u32) -> Vec<(u32, u32)> {
    let mut out = vec![];
    let mut c = 0;
    while c < n {
        let mut w = MAX_CHUNK;
        while w > n - c {
            w /= 2;
        }
        out.push((start + c, w));
        c += w;
    }
    out
}

/// The chunk plan of `cells ≥ 1` cells. With `partial` (a 16-bit tile of odd width: the last cell
/// holds one element) the chunk holding the last cell is left to the static tail, where its
/// column check is a constant.
fn chunk_plan(cells: u32, partial: bool) -> ChunkPlan {
    let mut width = MAX_CHUNK;
    while width > cells {
        width /= 2;
    }
    let mut count = cells / width;
    if partial && count * width == cells {
        count -= 1;
    }
    ChunkPlan { width, count, tail: chunks(count * width, cells - count * width) }
}

/// Largest power of two (≤ 16) dividing every byte offset in `parts`: the alignment of a vector
/// access whose address is a sum of multiples of them (the shared window is 1024-B aligned).
fn align_of(parts: &[u32]) -> u32 {
    let g = parts.iter().fold(0u32, |a, &b| gcd(a, b));
    if g == 0 {
        16
    } else {
        (g & g.wrapping_neg()).min(16)
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn is_float(e: Elem) -> bool {
    matches!(e, Elem::F32 | Elem::F16 | Elem::Bf16)
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Checks a TMEM variable is a 64- or 128-row tile of a 32-bit type; returns `(rows, cols, elem)`.
    fn tmem_tile(&self, v: Var) -> Result<(u32, u32, Elem), BackendError> {
        let d = &self.k.vars[v];
        let (rows, cols) = self.shape_of(d.ty, "TMEM variable")?;
        if rows != 128 && rows != 64 {
            return Err(self.unsupported(format!("TMEM variable `{}` has {rows} rows; TMEM tiles have 64 or 128 rows", d.name)));
        }
        if d.ty.elem() == Elem::Bool {
            return Err(self.unsupported(format!("TMEM variable `{}` of bool", d.name)));
        }
        Ok((rows, cols, d.ty.elem()))
    }

    /// The tile row this thread holds (warps 0..3) and whether it holds one
    /// ([`row_of_thread`]: `32w + l` for 128 rows, `16w + l` with `l < 16` for 64 rows).
    fn tmem_row(&self, rows: u32) -> Result<(IntValue<'ctx>, IntValue<'ctx>), BackendError> {
        match row_of_thread(self, rows, self.tid, self.warp)? {
            (row, None) => Ok((row, self.ctx.bool_type().const_int(1, false))),
            (row, Some(lane)) => Ok((row, self.b.build_int_compare(IntPredicate::ULT, lane, self.i32(16), "has.row")?)),
        }
    }

    /// TMEM address of cell column `col` of variable `v` in this warp's lane quarter
    /// ([`lane_base`], [`address`]).
    fn tmem_addr(&self, v: Var, col: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        let off = self.tmem.offset(v, &self.k.vars[v].name)?;
        let base = self.b.build_int_add(self.tmem_base()?, self.i32(off as i32), "")?;
        let lane = lane_base(self, self.warp)?;
        address(self, base, col, lane)
    }

    /// Converts a vector of `n` elements from the storage form of `from` to that of `to` (floats
    /// only), exactly as the scalar path does: widen to f32, then round to nearest even.
    fn convert_vec(&self, x: VectorValue<'ctx>, from: Elem, to: Elem, n: u32) -> Result<VectorValue<'ctx>, BackendError> {
        if from == to {
            return Ok(x);
        }
        let f32v = self.ctx.f32_type().vec_type(n);
        let wide = if from == Elem::F32 { x } else { self.b.build_float_ext(x, f32v, "")? };
        if to == Elem::F32 {
            return Ok(wide);
        }
        let narrow = self.storage_type(to).into_float_type().vec_type(n);
        Ok(self.b.build_float_trunc(wide, narrow, "")?)
    }

    /// `ReadVar` of a TMEM variable: warps 0..3 load their rows with `tcgen05.ld.32x32b` and
    /// store them into the result tile.
    pub fn read_tmem(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("ReadVar without a result".into()))?;
        let dst = self.value_buf(res)?;
        let rel = self.res_elem(res);
        self.tmem_to_smem(v, dst, rel)
    }

    /// Copies TMEM variable `v` into the row-major shared-memory tile at byte `dst` of `rel`.
    pub fn tmem_to_smem(&mut self, v: Var, dst: u32, rel: Elem) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.ld")?;
        let (rows, cols, elem) = self.tmem_tile(v)?;
        let per = 4 / elem.size_bytes();
        let cells = tmem_columns(elem, cols);
        let partial = cells * per != cols;
        let vector = is_float(elem) && is_float(rel);
        let plan = chunk_plan(cells, partial);
        self.tc_fence_after()?;
        let in_quarters = self.b.build_int_compare(IntPredicate::ULT, self.warp, self.i32(4), "q")?;
        self.if_then(in_quarters, &mut |cg| {
            let (row, has) = cg.tmem_row(rows)?;
            let row_base = cg.b.build_int_mul(row, cg.i32(cols as i32), "row")?;
            let acc = ReadAccess { v, dst, rel, elem, cols, row_base, has };
            if plan.count > 0 {
                let w = plan.width;
                let (lo, hi) = (cg.i32(0), cg.i32(plan.count as i32));
                cg.counted_loop(lo, hi, lo, false, &mut |cg, ci| {
                    let c0 = cg.b.build_int_mul(ci, cg.i32(w as i32), "c0")?;
                    cg.read_chunk(&acc, c0, w, w, vector && w >= 2)
                })?;
            }
            for &(c0, w) in &plan.tail {
                let holds_partial = partial && c0 + w == cells;
                cg.read_chunk(&acc, cg.i32(c0 as i32), c0, w, vector && w >= 2 && !holds_partial)?;
            }
            Ok(())
        })?;
        self.tc_fence_before()
    }

    /// One `tcgen05.ld.32x32b.x{w}` of cells `c0..c0+w` into the shared tile. `c0_align` is a
    /// multiple-of divisor of `c0` (`c0` itself when constant; for the vector store's alignment).
    fn read_chunk(&mut self, a: &ReadAccess<'ctx>, c0: IntValue<'ctx>, c0_align: u32, w: u32, vector: bool) -> Result<(), BackendError> {
        let per = 4 / a.elem.size_bytes();
        let addr = self.tmem_addr(a.v, c0)?;
        let p = self.tmem_ptr(addr)?;
        let ty = if w == 1 { self.ctx.i32_type().as_basic_type_enum() } else { self.ctx.i32_type().vec_type(w).as_basic_type_enum() };
        let r = self.call(&format!("llvm.nvvm.tcgen05.ld.32x32b.x{w}"), Some(ty), &[p.into(), self.ctx.bool_type().const_zero().into()])?;
        self.call("llvm.nvvm.tcgen05.wait.ld", None, &[])?;
        // First element of the chunk in the row-major tile.
        let first = self.b.build_int_add(a.row_base, self.b.build_int_mul(c0, self.i32(per as i32), "")?, "")?;
        // Threads without a row (64-row tiles, lanes 16..31) drop what they loaded.
        self.if_then(a.has, &mut |cg| {
            if vector {
                let n = w * per;
                let src_ty = cg.storage_type(a.elem).into_float_type().vec_type(n);
                let x = cg.b.build_bit_cast(r, src_ty, "")?.into_vector_value();
                let y = cg.convert_vec(x, a.elem, a.rel, n)?;
                let rs = a.rel.size_bytes();
                let off = cg.b.build_int_add(cg.i32(a.dst as i32), cg.b.build_int_mul(first, cg.i32(rs as i32), "")?, "")?;
                let st = cg.b.build_store(cg.smem_at(off)?, y)?;
                let align = align_of(&[a.dst, a.cols * rs, c0_align * per * rs]);
                st.set_alignment(align).map_err(|e| BackendError::Invalid(format!("vector store alignment: {e}")))?;
                return Ok(());
            }
            for j in 0..w {
                let bits = if w == 1 { r.into_int_value() } else { cg.b.build_extract_element(r.into_vector_value(), cg.i32(j as i32), "")?.into_int_value() };
                for q in 0..per {
                    let k = j * per + q;
                    // Only the static tail can hold the half-filled last cell: its c0 is constant.
                    if let Some(c) = c0.get_zero_extended_constant() {
                        if (c as u32) * per + k >= a.cols {
                            continue;
                        }
                    }
                    let val = cg.cell_part(bits, a.elem, q)?;
                    let val = cg.convert(val, a.elem, a.rel)?;
                    let idx = cg.b.build_int_add(first, cg.i32(k as i32), "")?;
                    cg.store_elem(a.dst, idx, a.rel, val)?;
                }
            }
            Ok(())
        })
    }

    /// Element `q` of a 32-bit TMEM cell holding `elem`, in compute type.
    fn cell_part(&self, bits: IntValue<'ctx>, elem: Elem, q: u32) -> Result<BasicValueEnum<'ctx>, BackendError> {
        if elem.size_bytes() == 4 {
            let v: BasicValueEnum = if elem == Elem::F32 { self.b.build_bit_cast(bits, self.ctx.f32_type(), "")? } else { bits.into() };
            return Ok(v);
        }
        let sh = self.b.build_right_shift(bits, self.i32(16 * q as i32), false, "")?;
        let h = self.b.build_int_truncate(sh, self.ctx.i16_type(), "")?;
        let raw = self.b.build_bit_cast(h, self.storage_type(elem), "")?;
        self.to_compute(raw, elem)
    }

    /// `WriteVar` of a TMEM variable: warps 0..3 gather their rows from the value and store them
    /// with `tcgen05.st.32x32b`, then wait for the stores.
    pub fn write_tmem(&mut self, v: Var, x: Value) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.st")?;
        let (rows, cols, elem) = self.tmem_tile(v)?;
        let per = 4 / elem.size_bytes();
        let cells = tmem_columns(elem, cols);
        let partial = cells * per != cols;
        let xel = self.res_elem(x);
        // A materialised tile of the same shape can be moved in whole chunks.
        let xbuf = match self.k.values[x].ty {
            Type::Tile { rows: r, cols: c, .. } if (r, c) == (rows, cols) && !self.tp.fusion.is_fused(x) && is_float(xel) && is_float(elem) => self.tp.smem.values[x].map(|o| o + self.header),
            _ => None,
        };
        self.tc_fence_after()?;
        let in_quarters = self.b.build_int_compare(IntPredicate::ULT, self.warp, self.i32(4), "q")?;
        self.if_then(in_quarters, &mut |cg| {
            let (row, has) = cg.tmem_row(rows)?;
            // Threads without a row read row 0 (in bounds) and store zeros.
            let row = cg.b.build_select(has, row, cg.i32(0), "")?.into_int_value();
            let acc = WriteAccess { v, x, xel, elem, cols, row, has, partial };
            let lo = cg.i32(0);
            match xbuf {
                Some(buf) => {
                    let plan = chunk_plan(cells, partial);
                    if plan.count > 0 {
                        let w = plan.width;
                        cg.counted_loop(lo, cg.i32(plan.count as i32), lo, false, &mut |cg, ci| {
                            let c0 = cg.b.build_int_mul(ci, cg.i32(w as i32), "c0")?;
                            if w >= 2 {
                                cg.write_chunk(&acc, buf, c0, w, w)
                            } else {
                                cg.write_cell(&acc, c0)
                            }
                        })?;
                    }
                    for &(c0, w) in &plan.tail {
                        if w >= 2 && !(partial && c0 + w == cells) {
                            cg.write_chunk(&acc, buf, cg.i32(c0 as i32), c0, w)?;
                        } else {
                            let n = cg.i32(c0 as i32);
                            cg.counted_loop(n, cg.i32((c0 + w) as i32), n, false, &mut |cg, j| cg.write_cell(&acc, j))?;
                        }
                    }
                }
                None => {
                    cg.counted_loop(lo, cg.i32(cells as i32), lo, false, &mut |cg, j| cg.write_cell(&acc, j))?;
                }
            }
            cg.call("llvm.nvvm.tcgen05.wait.st", None, &[])?;
            Ok(())
        })?;
        self.tc_fence_before()
    }

    /// Cells `c0..c0+w` from the shared tile at byte `buf`: one vector load, one
    /// `tcgen05.st.32x32b.x{w}`. `c0_align` divides `c0` (`c0` itself when constant).
    fn write_chunk(&mut self, a: &WriteAccess<'ctx>, buf: u32, c0: IntValue<'ctx>, c0_align: u32, w: u32) -> Result<(), BackendError> {
        let per = 4 / a.elem.size_bytes();
        let n = w * per;
        let xs = a.xel.size_bytes();
        let first = self.b.build_int_add(self.b.build_int_mul(a.row, self.i32(a.cols as i32), "")?, self.b.build_int_mul(c0, self.i32(per as i32), "")?, "")?;
        let off = self.b.build_int_add(self.i32(buf as i32), self.b.build_int_mul(first, self.i32(xs as i32), "")?, "")?;
        let src_ty = self.storage_type(a.xel).into_float_type().vec_type(n);
        let ld = self.b.build_load(src_ty, self.smem_at(off)?, "row")?;
        let align = align_of(&[buf, a.cols * xs, c0_align * per * xs]);
        ld.as_instruction_value()
            .ok_or_else(|| BackendError::Invalid("vector load is not an instruction".into()))?
            .set_alignment(align)
            .map_err(|e| BackendError::Invalid(format!("vector load alignment: {e}")))?;
        let y = self.convert_vec(ld.into_vector_value(), a.xel, a.elem, n)?;
        let i32v = self.ctx.i32_type().vec_type(w);
        let bits = self.b.build_bit_cast(y, i32v, "")?.into_vector_value();
        let data = self.b.build_select(a.has, bits, i32v.const_zero(), "")?;
        let p = self.tmem_ptr(self.tmem_addr(a.v, c0)?)?;
        self.call(&format!("llvm.nvvm.tcgen05.st.32x32b.x{w}"), None, &[p.into(), data, self.ctx.bool_type().const_zero().into()])?;
        Ok(())
    }

    /// Cell `j` (a run-time index): its `per` elements computed from the value (fused
    /// expressions are evaluated here, once per element) and stored with `tcgen05.st.32x32b.x1`.
    fn write_cell(&mut self, a: &WriteAccess<'ctx>, j: IntValue<'ctx>) -> Result<(), BackendError> {
        let per = 4 / a.elem.size_bytes();
        let mut cell = self.i32(0);
        for q in 0..per {
            let col = self.b.build_int_add(self.b.build_int_mul(j, self.i32(per as i32), "")?, self.i32(q as i32), "col")?;
            // Only the second half of the last cell of an odd-width 16-bit tile is outside the
            // tile: read an in-bounds column instead and store zero bits there.
            let inb = if a.partial && q > 0 { Some(self.b.build_int_compare(IntPredicate::ULT, col, self.i32(a.cols as i32), "")?) } else { None };
            let col = match inb {
                Some(ok) => self.b.build_select(ok, col, self.i32(a.cols as i32 - 1), "")?.into_int_value(),
                None => col,
            };
            let val = self.operand(a.x, a.row, col)?;
            let val = self.convert(val, a.xel, a.elem)?;
            let part = match a.elem {
                Elem::F32 => self.b.build_bit_cast(val, self.ctx.i32_type(), "")?.into_int_value(),
                Elem::F16 | Elem::Bf16 => {
                    let s = self.to_storage(val, a.elem)?;
                    let h = self.b.build_bit_cast(s, self.ctx.i16_type(), "")?.into_int_value();
                    let z = self.b.build_int_z_extend(h, self.ctx.i32_type(), "")?;
                    self.b.build_left_shift(z, self.i32(16 * q as i32), "")?
                }
                _ => val.into_int_value(),
            };
            let part = match inb {
                Some(ok) => self.b.build_select(ok, part, self.i32(0), "")?.into_int_value(),
                None => part,
            };
            cell = self.b.build_or(cell, part, "")?;
        }
        let bits = self.b.build_select(a.has, cell, self.i32(0), "")?;
        let p = self.tmem_ptr(self.tmem_addr(a.v, j)?)?;
        self.call("llvm.nvvm.tcgen05.st.32x32b.x1", None, &[p.into(), bits, self.ctx.bool_type().const_zero().into()])?;
        Ok(())
    }
}

/// What a TMEM read chunk needs (per thread).
struct ReadAccess<'ctx> {
    v: Var,
    dst: u32,
    rel: Elem,
    elem: Elem,
    cols: u32,
    row_base: IntValue<'ctx>,
    has: IntValue<'ctx>,
}

/// What a TMEM write chunk or cell needs (per thread).
struct WriteAccess<'ctx> {
    v: Var,
    x: Value,
    xel: Elem,
    elem: Elem,
    cols: u32,
    row: IntValue<'ctx>,
    has: IntValue<'ctx>,
    partial: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_plan_covers_every_cell_once() {
        for cells in 1..=200u32 {
            for partial in [false, true] {
                let p = chunk_plan(cells, partial);
                let mut covered = vec![0u32; cells as usize];
                for c in 0..p.count * p.width {
                    covered[c as usize] += 1;
                }
                for &(c0, w) in &p.tail {
                    assert!(w.is_power_of_two() && w <= MAX_CHUNK);
                    for c in c0..c0 + w {
                        covered[c as usize] += 1;
                    }
                }
                assert!(covered.iter().all(|&n| n == 1), "cells {cells} partial {partial}");
                if partial {
                    // The last cell is in the static tail.
                    assert!(p.tail.iter().any(|&(c0, w)| c0 + w == cells), "cells {cells}");
                }
            }
        }
        let p = chunk_plan(64, false);
        assert_eq!((p.width, p.count, p.tail.len()), (32, 2, 0));
    }

    #[test]
    fn vector_alignment_is_the_common_power_of_two() {
        assert_eq!(align_of(&[256, 256, 128]), 16);
        assert_eq!(align_of(&[128 + 64, 12, 16]), 4);
        assert_eq!(align_of(&[0, 8, 16]), 8);
    }
}
