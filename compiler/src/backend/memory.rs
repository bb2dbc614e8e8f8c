//! Global-memory loads and stores of tiles (masked: out-of-bounds elements read as 0 and are not
//! written; bounds are the tensor's run-time extents) and `ReadVar` / `WriteVar` of variables
//! that live in shared memory.
//!
//! Addressing: tensors are dense row-major; element `(i_0, …, i_{d-1})` is at
//! `Σ i_j · stride_j` with 64-bit strides from the size arguments. The first ranged index runs
//! over the tile's rows, the second over its columns.

use inkwell::values::{BasicValueEnum, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use crate::ir::{columns_are_last, Elem, Index, Inst, Op, Param, Space, Type, Value, Var};

use super::copy::TileLayout;
use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    pub(crate) fn tensor_elem(&self, p: Param) -> Result<Elem, BackendError> {
        self.k.params[p].kind.tensor_elem().ok_or_else(|| BackendError::Invalid(format!("parameter `{}` is not a tensor", self.k.params[p].name)))
    }

    /// The position (i64) along every dimension of tile element `(r, c)` of an access: a point
    /// index as is, the first range's start plus `r`, the second's plus `c`.
    pub(crate) fn index_positions(&self, index: &[Index], r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<Vec<IntValue<'ctx>>, BackendError> {
        let i64t = self.ctx.i64_type();
        let mut nth_range = 0;
        let mut out = Vec::with_capacity(index.len());
        for ix in index {
            let pos = match ix {
                Index::Point(v) => self.scalar(*v)?.into_int_value(),
                Index::Range { start, .. } => {
                    let s = self.scalar(*start)?.into_int_value();
                    let t = if nth_range == 0 { r } else { c };
                    nth_range += 1;
                    self.b.build_int_add(s, t, "")?
                }
            };
            out.push(self.b.build_int_s_extend(pos, i64t, "")?);
        }
        Ok(out)
    }

    /// Whether element `(r, c)` of the access is inside the tensor, and its address.
    pub(crate) fn global_elem(&self, p: Param, index: &[Index], r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<(IntValue<'ctx>, PointerValue<'ctx>), BackendError> {
        let elem = self.tensor_elem(p)?;
        let i64t = self.ctx.i64_type();
        let mut inb = self.ctx.bool_type().const_int(1, false);
        let mut off = i64t.const_zero();
        for (d, pos) in self.index_positions(index, r, c)?.into_iter().enumerate() {
            // Unsigned compare also rejects negative positions.
            let ok = self.b.build_int_compare(IntPredicate::ULT, pos, self.dims[p][d], "")?;
            inb = self.b.build_and(inb, ok, "")?;
            off = self.b.build_int_add(off, self.b.build_int_mul(pos, self.strides[p][d], "")?, "")?;
        }
        let base = self.params[p].ok_or_else(|| BackendError::Invalid("tensor parameter not bound".into()))?.into_pointer_value();
        // SAFETY of the GEP: only dereferenced when `inb` holds.
        let ptr = unsafe { self.b.build_gep(self.storage_type(elem), base, &[off], "g")? };
        debug_assert_eq!(ptr.get_type().get_address_space(), AddressSpace::from(1u16));
        Ok((inb, ptr))
    }

    /// Loads element `(r, c)` (0 when outside the tensor), in compute type of the tensor's elem.
    pub fn load_global(&self, p: Param, index: &[Index], r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let elem = self.tensor_elem(p)?;
        let (inb, ptr) = self.global_elem(p, index, r, c)?;
        let pre = self.cur_block()?;
        let then = self.ctx.append_basic_block(self.func, "ld.in");
        let join = self.ctx.append_basic_block(self.func, "ld.join");
        self.b.build_conditional_branch(inb, then, join)?;
        self.b.position_at_end(then);
        let raw = self.b.build_load(self.storage_type(elem), ptr, "gld")?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        let phi = self.b.build_phi(self.storage_type(elem), "gv")?;
        let zero = self.storage_type(elem).const_zero();
        phi.add_incoming(&[(&raw, then), (&zero, pre)]);
        self.to_compute(phi.as_basic_value(), elem)
    }

    /// Emits `Load`: a masked tile (or scalar) read from a global tensor.
    pub fn load(&mut self, i: Inst, src: Param, index: &[Index]) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("load without a result".into()))?;
        let elem = self.tensor_elem(src)?;
        match self.k.values[res].ty {
            Type::Scalar(out) => {
                let z = self.i32(0);
                let v = self.load_global(src, index, z, z)?;
                let v = self.convert(v, elem, out)?;
                self.scalars[res] = Some(v);
                Ok(())
            }
            Type::Tile { elem: out, rows, cols } => {
                let buf = self.value_buf(res)?;
                let mut elementwise = |cg: &mut Self| {
                    cg.cta_loop(rows * cols, &mut |cg, e| {
                        let (r, c) = cg.tile_coords(e, cols)?;
                        let v = cg.load_global(src, index, r, c)?;
                        let v = cg.convert(v, elem, out)?;
                        cg.store_elem(buf, e, out, v)
                    })
                };
                let dst = self.i32(buf as i32);
                if out == elem && self.copy_tile_async(src, index, (rows, cols), dst, TileLayout::RowMajor, true, &mut elementwise)? {
                    return Ok(());
                }
                elementwise(self)
            }
        }
    }

    /// Writes `v` (of element type `vel`) as tile element `(r, c)` of a store to `dst`, unless
    /// the element is outside the tensor or its `mask` element is false.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store_global_elem(&mut self, dst: Param, index: &[Index], mask: Option<Value>, v: BasicValueEnum<'ctx>, vel: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<(), BackendError> {
        let elem = self.tensor_elem(dst)?;
        let v = self.convert(v, vel, elem)?;
        let v = self.to_storage(v, elem)?;
        let (inb, ptr) = self.global_elem(dst, index, r, c)?;
        let inb = match mask {
            Some(m) => {
                let keep = self.operand(m, r, c)?.into_int_value();
                self.trap_on_kept_outside(dst, &[(inb, keep)])?;
                self.b.build_and(inb, keep, "keep")?
            }
            None => inb,
        };
        self.if_then(inb, &mut |cg| {
            cg.b.build_store(ptr, v)?;
            Ok(())
        })
    }

    /// Writes pairs of horizontally adjacent tile elements `(r, c)` and `(r, c + 1)` of a store to
    /// `dst` (`(r, c, values of element type vel, where-mask)` each), each element only where
    /// it is inside the tensor and its mask holds. When that holds for every element, the
    /// columns run along the tensor's last (unit-stride, row-major) dimension and every pair's
    /// address is aligned to the pair, each pair is one 2-element store; otherwise every
    /// element is written on its own, as [`Codegen::store_global_elem`] does. (One test for the
    /// whole group: the per-element path is the rare one, a tensor's edge or a masked row.)
    #[allow(clippy::type_complexity)]
    pub(crate) fn store_global_pairs(&mut self, dst: Param, index: &[Index], pairs: &[(IntValue<'ctx>, IntValue<'ctx>, [BasicValueEnum<'ctx>; 2], Option<[IntValue<'ctx>; 2]>)], vel: Elem) -> Result<(), BackendError> {
        let elem = self.tensor_elem(dst)?;
        let i64t = self.ctx.i64_type();
        let bytes = 2 * elem.size_bytes();
        // Columns on the last (unit-stride) dimension: only then can a pair be one store.
        let column_is_last = columns_are_last(index);
        let mut all = self.ctx.bool_type().const_int(1, false);
        let mut kept = vec![];
        let mut items = vec![];
        for &(r, c, vals, keep) in pairs {
            let c1 = self.b.build_int_add(c, self.i32(1), "")?;
            let (inb0, p0) = self.global_elem(dst, index, r, c)?;
            let (inb1, p1) = self.global_elem(dst, index, r, c1)?;
            let (mut w0, mut w1) = (inb0, inb1);
            if let Some([k0, k1]) = keep {
                kept.extend([(inb0, k0), (inb1, k1)]);
                w0 = self.b.build_and(w0, k0, "keep")?;
                w1 = self.b.build_and(w1, k1, "keep")?;
            }
            let vs = [self.to_storage(self.convert(vals[0], vel, elem)?, elem)?, self.to_storage(self.convert(vals[1], vel, elem)?, elem)?];
            if column_is_last {
                let addr = self.b.build_ptr_to_int(p0, i64t, "")?;
                let low = self.b.build_and(addr, i64t.const_int(u64::from(bytes - 1), false), "")?;
                let aligned = self.b.build_int_compare(IntPredicate::EQ, low, i64t.const_zero(), "aligned")?;
                all = self.b.build_and(all, self.b.build_and(self.b.build_and(w0, w1, "")?, aligned, "")?, "pairs")?;
            }
            items.push(([w0, w1], [p0, p1], vs));
        }
        self.trap_on_kept_outside(dst, &kept)?;
        let mut each = |cg: &mut Self| -> Result<(), BackendError> {
            for (w, p, vs) in &items {
                for k in 0..2 {
                    cg.if_then(w[k], &mut |cg| cg.b.build_store(p[k], vs[k]).map(|_| ()).map_err(Into::into))?;
                }
            }
            Ok(())
        };
        if !column_is_last {
            return each(self);
        }
        self.if_else(
            all,
            &mut |cg| {
                for (_, p, vs) in &items {
                    let pair = cg.storage_pair(*vs, elem)?;
                    cg.b.build_store(p[0], pair)?.set_alignment(bytes).map_err(|e| BackendError::Invalid(e.to_string()))?;
                }
                Ok(())
            },
            &mut each,
        )
    }

    /// Emits `Store`: writes the tile (or a scalar broadcast over the ranges) into a global
    /// tensor, skipping elements outside it and, with a `where` mask, elements whose mask is
    /// false.
    pub fn store(&mut self, dst: Param, index: &[Index], value: Value, mask: Option<Value>) -> Result<(), BackendError> {
        let lens: Vec<u32> = index.iter().filter_map(|ix| if let Index::Range { len, .. } = ix { Some(*len) } else { None }).collect();
        let (rows, cols) = match lens.as_slice() {
            [] => (1, 1),
            [n] => (*n, 1),
            [m, n, ..] => (*m, *n),
        };
        let vty = self.k.values[value].ty;
        if let Some(shape) = vty.shape() {
            if shape != (rows, cols) {
                return Err(BackendError::Invalid(format!("store of a {vty} tile into a {rows}x{cols} range")));
            }
        }
        let vel = vty.elem();
        let mut body = |cg: &mut Self, e: IntValue<'ctx>| -> Result<(), BackendError> {
            let (r, c) = cg.tile_coords(e, cols)?;
            let v = cg.operand(value, r, c)?;
            cg.store_global_elem(dst, index, mask, v, vel, r, c)
        };
        if rows * cols == 1 {
            // A single element: thread 0 writes it.
            let z = self.i32(0);
            self.on_thread0(&mut |cg| body(cg, z))
        } else {
            self.cta_loop(rows * cols, &mut body)
        }
    }

    /// Emits `ReadVar`: copies the variable into the result tile (`tmem` variables through the
    /// target's lowering).
    pub fn read_var(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        if self.k.vars[v].space == Space::Tmem {
            let l = self.lowering;
            return l.read_tmem_var(self, i, v);
        }
        self.read_smem_var(i, v)
    }

    /// `ReadVar` of a variable held in a shared-memory tile.
    pub fn read_smem_var(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("ReadVar without a result".into()))?;
        let (src, dst) = (self.var_base(v)?, self.value_buf(res)?);
        let (vel, rel) = (self.k.vars[v].ty.elem(), self.res_elem(res));
        let (rows, cols) = self.shape_of(self.k.vars[v].ty, "variable")?;
        let layout = self.var_layout(v);
        self.cta_loop(rows * cols, &mut |cg, e| {
            let x = if layout == TileLayout::RowMajor {
                cg.load_elem_at(src, e, vel)?
            } else {
                let (r, c) = cg.tile_coords(e, cols)?;
                cg.load_elem_in(src, layout, r, c, (rows, cols), vel)?
            };
            let x = cg.convert(x, vel, rel)?;
            cg.store_elem(dst, e, rel, x)
        })
    }

    /// Element `(r, c)` of a `rows x cols` shared-memory tile of `elem` at byte `base`, stored in
    /// `layout` (an operand tile read back by the threads keeps the layout the tensor core reads).
    pub fn load_elem_in(&self, base: IntValue<'ctx>, layout: TileLayout, r: IntValue<'ctx>, c: IntValue<'ctx>, shape: (u32, u32), elem: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let off = layout.offset(self, r, c, shape, elem.size_bytes())?;
        let p = self.smem_at(self.b.build_int_add(base, off, "")?)?;
        let raw = self.b.build_load(self.storage_type(elem), p, "ld")?;
        self.to_compute(raw, elem)
    }

    /// Emits `WriteVar`: copies the tile into the variable, converting to its element type
    /// (`tmem` variables through the target's lowering).
    pub fn write_var(&mut self, v: Var, x: Value) -> Result<(), BackendError> {
        if self.k.vars[v].space == Space::Tmem {
            let l = self.lowering;
            return l.write_tmem_var(self, v, x);
        }
        self.write_smem_var(v, x)
    }

    /// `WriteVar` of a variable held in a shared-memory tile (row-major, or the core-matrix
    /// layout of an operand tile that wgmma reads in place). A global tile loaded into it
    /// (a `Load` fused into this write) is copied with `cp.async` where it can be.
    pub fn write_smem_var(&mut self, v: Var, x: Value) -> Result<(), BackendError> {
        let dst = self.i32(self.var_buf(v)? as i32);
        self.write_var_tile(v, x, dst, true)
    }

    /// Writes tile `x` into the buffer of variable `v` at byte `dst` (a run-time value for a
    /// pipeline's ring stage) in the variable's layout; a fused `Load` goes through `cp.async`
    /// where it can, complete on return with `wait` (see [`Codegen::copy_tile_async`]).
    pub fn write_var_tile(&mut self, v: Var, x: Value, dst: IntValue<'ctx>, wait: bool) -> Result<(), BackendError> {
        if let Some(ins) = self.tp.fusion.in_place_insert(self.k, v, x) {
            return self.write_block_in_place(v, ins, dst);
        }
        let (xel, vel) = (self.res_elem(x), self.k.vars[v].ty.elem());
        let (rows, cols) = self.shape_of(self.k.vars[v].ty, "variable")?;
        let layout = self.var_layout(v);
        // 16-bit tiles whose rows are whole 16-byte chunks: every layout here keeps a chunk's 8
        // elements contiguous (row-major, a core-matrix row, a swizzled chunk), so each thread
        // computes 8 neighbours and stores them with one 16-byte store instead of 8 2-byte ones.
        // (A plain copy of a global tile is the fallback of cp.async and TMA, for misaligned
        // tensors: it stays one element per iteration, small code for a rare path.)
        let copy = matches!(self.k.values[x].def, crate::ir::ValueDef::Result(d) if matches!(self.k.insts[d].op, Op::Load { .. }));
        let per = if vel.size_bytes() == 2 && cols % 8 == 0 && !copy { 8 } else { 1 };
        let mut elementwise = |cg: &mut Self| {
            cg.cta_loop(rows * cols / per, &mut |cg, e| {
                let r = cg.b.build_int_unsigned_div(e, cg.i32((cols / per) as i32), "r")?;
                let c = cg.b.build_int_mul(cg.b.build_int_unsigned_rem(e, cg.i32((cols / per) as i32), "")?, cg.i32(per as i32), "c")?;
                let off = layout.offset(cg, r, c, (rows, cols), vel.size_bytes())?;
                let p = cg.smem_at(cg.b.build_int_add(dst, off, "")?)?;
                if per == 1 {
                    let y = cg.operand(x, r, c)?;
                    let y = cg.convert(y, xel, vel)?;
                    cg.b.build_store(p, cg.to_storage(y, vel)?)?;
                    return Ok(());
                }
                let vty = cg.storage_type(vel).into_float_type().vec_type(per);
                let mut acc = vty.get_undef();
                // The chunk's 8 elements evaluated together (`backend::groups`): c is a
                // multiple of 8.
                let ys = cg.operand_group(x, r, c, true, super::groups::Group { n: per, frag: None })?;
                for (j, y) in ys.into_iter().enumerate() {
                    let y = cg.convert(y, xel, vel)?;
                    let y = cg.to_storage(y, vel)?;
                    acc = cg.b.build_insert_element(acc, y, cg.i32(j as i32), "")?;
                }
                let st = cg.b.build_store(p, acc)?;
                st.set_alignment(16).map_err(|e| BackendError::Invalid(format!("16-byte shared store: {e}")))?;
                Ok(())
            })
        };
        let k = self.k;
        if let crate::ir::ValueDef::Result(d) = k.values[x].def {
            if let Op::Load { src, index } = &k.insts[d].op {
                let same = self.tp.fusion.is_fused(x) && self.tensor_elem(*src)? == vel && k.values[x].ty.shape() == Some((rows, cols));
                if same && self.copy_tile_async(*src, index, (rows, cols), dst, layout, wait, &mut elementwise)? {
                    return Ok(());
                }
            }
        }
        elementwise(self)
    }
}

