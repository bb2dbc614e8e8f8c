//! Tensor memory on `sm_100a`: the allocation lifecycle (one alloc + relinquish by warp 0 at the
//! planner's `TmemAlloc`, one dealloc by warp 0 at `TmemDealloc`; blackwell.md §4.3) and
//! `ReadVar` / `WriteVar` of TMEM variables through `tcgen05.ld/st.32x32b`.
//!
//! Addressing (blackwell.md §1.1, §1.3): a TMEM address is `lane << 16 | column`; variable `v`
//! lives at `base + offset(v)`; warp `w` (< 4) may only touch lanes `tmem_lane_base(w)..+32` and
//! for a 128-row tile its thread `l` holds row `32w + l`. A 64-row tile (an M=64 accumulator) uses
//! the first half of each lane quarter: rows `16w..16w+15` are lanes `32w..32w+15` (blackwell.md
//! §1.1, from CUTLASS's "half sub-partition" atom; not run on hardware), so threads `l ≥ 16` of
//! each warp hold no row (their loads are dropped, their stores write zeros into the unused half,
//! which the planner charges to this buffer). 16-bit tiles are packed two elements per cell.
//! On targets without tensor memory the lifecycle instructions emit nothing and TMEM variables
//! are shared-memory tiles handled by `memory.rs`.

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use crate::ir::{tmem_columns, Elem, Inst, Value, Var};

use super::descriptors::check_alloc_columns;
use super::emit::{Codegen, TMEM_SLOT_OFFSET};
use super::target::require_tcgen05;
use super::BackendError;

/// Largest `tcgen05.ld/st.32x32b` repeat count used per instruction (32 registers per thread).
const MAX_CHUNK: u32 = 32;

impl<'ctx> Codegen<'ctx, '_> {
    /// Entry code of a kernel that uses tensor memory: initialise the MMA mbarrier (when the
    /// kernel has MMAs) and publish it with a CTA barrier.
    pub fn tcgen05_prologue(&mut self) -> Result<(), BackendError> {
        let has_mma = self.k.insts.values().any(|d| matches!(d.op, crate::ir::Op::Mma { .. }));
        if has_mma {
            self.mbar_init()?;
            self.bar_sync()?;
        }
        Ok(())
    }

    fn warp0(&self) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_compare(IntPredicate::EQ, self.warp, self.i32(0), "w0")?)
    }

    /// A TMEM pointer (address space 6) for a 32-bit TMEM address.
    pub fn tmem_ptr(&self, addr: IntValue<'ctx>) -> Result<PointerValue<'ctx>, BackendError> {
        Ok(self.b.build_int_to_ptr(addr, self.ctx.ptr_type(AddressSpace::from(6u16)), "t")?)
    }

    /// The TMEM base address (after the allocation).
    pub fn tmem_base(&self) -> Result<IntValue<'ctx>, BackendError> {
        self.tmem_base.ok_or_else(|| BackendError::Invalid("TMEM accessed before the TmemAlloc instruction".into()))
    }

    /// Warp 0 allocates `columns`; everyone reads the base address after fence/barrier/fence.
    pub fn tmem_alloc(&mut self, columns: u32) -> Result<(), BackendError> {
        if !self.target.has_tcgen05() {
            return Ok(());
        }
        require_tcgen05(self.target, "tcgen05.alloc")?;
        check_alloc_columns(columns)?;
        if columns < self.tmem.peak_columns {
            return Err(BackendError::Invalid(format!("TmemAlloc of {columns} columns is below the plan's peak of {}", self.tmem.peak_columns)));
        }
        let slot = self.smem_at(self.i32(TMEM_SLOT_OFFSET as i32))?;
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.call("llvm.nvvm.tcgen05.alloc.shared.cg1", None, &[slot.into(), cg.i32(columns as i32).into()])?;
            Ok(())
        })?;
        self.tc_fence_before()?;
        self.bar_sync()?;
        self.tc_fence_after()?;
        let base = self.b.build_load(self.ctx.i32_type(), slot, "tmem.base")?.into_int_value();
        self.tmem_base = Some(base);
        Ok(())
    }

    /// Warp 0 gives up the allocation permit (no further allocs by this CTA).
    pub fn tmem_relinquish(&mut self) -> Result<(), BackendError> {
        if !self.target.has_tcgen05() {
            return Ok(());
        }
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.call("llvm.nvvm.tcgen05.relinq.alloc.permit.cg1", None, &[])?;
            Ok(())
        })
    }

    /// All TMEM users done (fence + barrier), then warp 0 frees exactly what it allocated.
    pub fn tmem_dealloc(&mut self, columns: u32) -> Result<(), BackendError> {
        if !self.target.has_tcgen05() {
            return Ok(());
        }
        check_alloc_columns(columns)?;
        let base = self.tmem_base()?;
        self.tc_fence_before()?;
        self.bar_sync()?;
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.tc_fence_after()?;
            let p = cg.tmem_ptr(base)?;
            cg.call("llvm.nvvm.tcgen05.dealloc.cg1", None, &[p.into(), cg.i32(columns as i32).into()])?;
            Ok(())
        })
    }

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

    /// The tile row this thread holds (warps 0..3) and whether it holds one: `32w + l` for 128
    /// rows, `16w + l` with `l < 16` for 64 rows.
    fn tmem_row(&self, rows: u32) -> Result<(IntValue<'ctx>, IntValue<'ctx>), BackendError> {
        if rows == 128 {
            return Ok((self.tid, self.ctx.bool_type().const_int(1, false)));
        }
        let lane = self.b.build_and(self.tid, self.i32(31), "")?;
        let row = self.b.build_int_add(self.b.build_left_shift(self.warp, self.i32(4), "")?, lane, "row")?;
        let has = self.b.build_int_compare(IntPredicate::ULT, lane, self.i32(16), "has.row")?;
        Ok((row, has))
    }

    /// TMEM address of column `col` of variable `v` in this warp's lane quarter.
    fn tmem_addr(&self, v: Var, col: u32) -> Result<IntValue<'ctx>, BackendError> {
        let off = self.tmem.offset(v, &self.k.vars[v].name)?;
        let base = self.tmem_base()?;
        // Lane base = tmem_lane_base(warp) = 32 * (warp % 4), in bits 31..16.
        let quarter = self.b.build_and(self.warp, self.i32(3), "")?;
        let lanes = self.b.build_left_shift(quarter, self.i32(5 + 16), "")?;
        let a = self.b.build_int_add(base, self.i32((off + col) as i32), "")?;
        Ok(self.b.build_int_add(a, lanes, "taddr")?)
    }

    /// Column chunks `(start, width)` covering `cols` with power-of-two widths ≤ [`MAX_CHUNK`].
    fn chunks(cols: u32) -> Vec<(u32, u32)> {
        let mut out = vec![];
        let mut c = 0;
        while c < cols {
            let mut w = MAX_CHUNK;
            while w > cols - c {
                w /= 2;
            }
            out.push((c, w));
            c += w;
        }
        out
    }

    fn ldst_type(&self, w: u32) -> BasicTypeEnum<'ctx> {
        if w == 1 {
            self.ctx.i32_type().into()
        } else {
            self.ctx.i32_type().vec_type(w).into()
        }
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
    /// 16-bit tiles are packed two per 32-bit cell, the even column in the low half (this back
    /// end's own convention, used consistently by [`Codegen::write_tmem`]).
    pub fn tmem_to_smem(&mut self, v: Var, dst: u32, rel: Elem) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.ld")?;
        let (rows, cols, elem) = self.tmem_tile(v)?;
        let per = 4 / elem.size_bytes();
        self.tc_fence_after()?;
        let in_quarters = self.b.build_int_compare(IntPredicate::ULT, self.warp, self.i32(4), "q")?;
        self.if_then(in_quarters, &mut |cg| {
            let (row, has) = cg.tmem_row(rows)?;
            let row_base = cg.b.build_int_mul(row, cg.i32(cols as i32), "row")?;
            for (c0, w) in Self::chunks(tmem_columns(elem, cols)) {
                let addr = cg.tmem_addr(v, c0)?;
                let p = cg.tmem_ptr(addr)?;
                let name = format!("llvm.nvvm.tcgen05.ld.32x32b.x{w}");
                let r = cg.call(&name, Some(cg.ldst_type(w)), &[p.into(), cg.ctx.bool_type().const_zero().into()])?;
                cg.call("llvm.nvvm.tcgen05.wait.ld", None, &[])?;
                // Threads without a row (64-row tiles, lanes 16..31) drop what they loaded.
                cg.if_then(has, &mut |cg| {
                    for j in 0..w {
                        let bits = if w == 1 { r.into_int_value() } else { cg.b.build_extract_element(r.into_vector_value(), cg.i32(j as i32), "")?.into_int_value() };
                        for q in 0..per {
                            let col = (c0 + j) * per + q;
                            if col >= cols {
                                continue;
                            }
                            let val = cg.cell_part(bits, elem, q)?;
                            let val = cg.convert(val, elem, rel)?;
                            let idx = cg.b.build_int_add(row_base, cg.i32(col as i32), "")?;
                            cg.store_elem(dst, idx, rel, val)?;
                        }
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        self.tc_fence_before()
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

    /// `WriteVar` of a TMEM variable: warps 0..3 gather their rows from the value's tile and
    /// store them with `tcgen05.st.32x32b`, then wait for the stores.
    pub fn write_tmem(&mut self, v: Var, x: Value) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.st")?;
        let (rows, cols, elem) = self.tmem_tile(v)?;
        let per = 4 / elem.size_bytes();
        let xel = self.res_elem(x);
        self.tc_fence_after()?;
        let in_quarters = self.b.build_int_compare(IntPredicate::ULT, self.warp, self.i32(4), "q")?;
        self.if_then(in_quarters, &mut |cg| {
            let (row, has) = cg.tmem_row(rows)?;
            // Threads without a row read row 0 (in bounds) and store zeros.
            let row = cg.b.build_select(has, row, cg.i32(0), "")?.into_int_value();
            for (c0, w) in Self::chunks(tmem_columns(elem, cols)) {
                let mut vals = vec![];
                for j in 0..w {
                    let mut cell = cg.i32(0);
                    for q in 0..per {
                        let col = (c0 + j) * per + q;
                        if col >= cols {
                            continue;
                        }
                        let val = cg.operand(x, row, cg.i32(col as i32))?;
                        let val = cg.convert(val, xel, elem)?;
                        let part = match elem {
                            Elem::F32 => cg.b.build_bit_cast(val, cg.ctx.i32_type(), "")?.into_int_value(),
                            Elem::F16 | Elem::Bf16 => {
                                let s = cg.to_storage(val, elem)?;
                                let h = cg.b.build_bit_cast(s, cg.ctx.i16_type(), "")?.into_int_value();
                                let z = cg.b.build_int_z_extend(h, cg.ctx.i32_type(), "")?;
                                cg.b.build_left_shift(z, cg.i32(16 * q as i32), "")?
                            }
                            _ => val.into_int_value(),
                        };
                        cell = cg.b.build_or(cell, part, "")?;
                    }
                    let bits = cg.b.build_select(has, cell, cg.i32(0), "")?.into_int_value();
                    vals.push(bits);
                }
                let data: BasicValueEnum = if w == 1 {
                    vals[0].into()
                } else {
                    let mut vec = cg.ctx.i32_type().vec_type(w).get_undef();
                    for (j, b) in vals.iter().enumerate() {
                        vec = cg.b.build_insert_element(vec, *b, cg.i32(j as i32), "")?;
                    }
                    vec.into()
                };
                let addr = cg.tmem_addr(v, c0)?;
                let p = cg.tmem_ptr(addr)?;
                let name = format!("llvm.nvvm.tcgen05.st.32x32b.x{w}");
                cg.call(&name, None, &[p.into(), data, cg.ctx.bool_type().const_zero().into()])?;
            }
            cg.call("llvm.nvvm.tcgen05.wait.st", None, &[])?;
            Ok(())
        })?;
        self.tc_fence_before()
    }

    /// Element type of a value.
    pub fn res_elem(&self, v: Value) -> Elem {
        self.k.values[v].ty.elem()
    }
}
