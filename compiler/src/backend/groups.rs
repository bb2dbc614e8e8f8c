//! Groups of elements of one row evaluated together: a wgmma fragment pair `(r, c)`,
//! `(r, c + 1)` with `c` even ([`crate::layout::wgmma::fragment_coords`], evaluated by
//! `sm90::frag_eval`), and the 8 elements of a 16-byte chunk that a thread computes for a store
//! into a tile of 2-byte elements (`Codegen::write_var_tile`). Evaluated one element at a time,
//! every shared-memory read of the expression was a 4-byte (or 2-byte) load with its own
//! address arithmetic, and every gather its own bounds test, although a group's elements sit
//! side by side in every layout the back end uses when the group starts on a multiple of its
//! size (row-major with a row length that is a multiple of it; core matrices and swizzled
//! panels, whose 16-byte chunks stay whole: `layout::staging` and `layout::swizzle` test it),
//! and a row index that does not vary along the row is the same for all of them. Here such a
//! read is one vector load (8 or 16 bytes; 32 bytes are two), a column vector (`[R, 1]`) is
//! read once for the group, and a gather whose row index is a column vector and whose column
//! index is the element's own tests and computes its row once. The key-row loops of
//! dqkwg_channel and k2_keys_channel read four operand rows per step that way, and the
//! sub-chunk loops build their bf16 hi/lo operand tiles from 16-byte reads (docs/results.md,
//! thirty-fourth session).
//!
//! Each element's arithmetic is emitted by the same [`Codegen::apply`] as before, on the same
//! values, so results are bitwise unchanged; only loads and index arithmetic are shared.
//! Anything else (a transpose, an insert, a global load, a register fragment) is evaluated one
//! element at a time as before.

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue};

use crate::ir::{Axis, Elem, Inst, Op, Type, Value, ValueDef};
use crate::layout::wgmma::Distribution;

use super::copy::TileLayout;
use super::emit::Codegen;
use super::BackendError;

/// A group of `n` elements `(r, c) .. (r, c + n − 1)` of one row evaluated together.
#[derive(Copy, Clone)]
pub(crate) struct Group {
    /// Elements in the group: 2 (a fragment pair) or 8 (a 16-byte chunk of 2-byte elements).
    pub n: u32,
    /// For a fragment pair: the accumulators' distribution and the fragment register of the
    /// first element (element `k` is register `idx + k`).
    pub frag: Option<(Distribution, u32)>,
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Elements `(r, c) .. (r, c + n − 1)` of `v`, as [`Codegen::operand`] gives each;
    /// `aligned` when `c` is known to be a multiple of `n` (then, in every layout here, the
    /// group is contiguous in memory and aligned to its size).
    pub(crate) fn operand_group(&mut self, v: Value, r: IntValue<'ctx>, c: IntValue<'ctx>, aligned: bool, g: Group) -> Result<Vec<BasicValueEnum<'ctx>>, BackendError> {
        let Type::Tile { elem, rows, cols } = self.k.values[v].ty else {
            let s = self.scalar(v)?;
            return Ok(vec![s; g.n as usize]);
        };
        let r = if rows == 1 { self.i32(0) } else { r };
        if cols == 1 {
            // A column vector: every element of the group is its element r.
            let x = self.one_of_group(g, 0, |cg| cg.operand(v, r, c))?;
            return Ok(vec![x; g.n as usize]);
        }
        if self.tp.fusion.is_fused(v) {
            if let ValueDef::Result(d) = self.k.values[v].def {
                return self.element_group(d, elem, r, c, aligned, g);
            }
        }
        let buf = self.i32(self.value_buf(v)? as i32);
        self.load_group(buf, TileLayout::RowMajor, r, c, (rows, cols), elem, aligned, g.n)
    }

    /// [`Codegen::element`] of instruction `i` at the group's elements.
    fn element_group(&mut self, i: Inst, out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>, aligned: bool, g: Group) -> Result<Vec<BasicValueEnum<'ctx>>, BackendError> {
        let op = self.k.insts[i].op.clone();
        match &op {
            Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) => {
                let args = self.k.inst_args(i).into_iter().map(|a| self.operand_group(a, r, c, aligned, g)).collect::<Result<Vec<_>, _>>()?;
                (0..g.n as usize).map(|k| self.apply(&op, out, &args.iter().map(|a| a[k]).collect::<Vec<_>>())).collect()
            }
            Op::Gather { src, row, col } if self.extent2(*row).1 == 1 && self.own_index(*col, Axis::Col, self.extent2(*src).1) => {
                // The row index is the same for the whole group; the column index is each
                // element's own.
                let ri = self.operand(*row, r, c)?.into_int_value();
                self.check_gather(*src, (*row, ri), (*col, c))?;
                let xs = self.operand_group(*src, ri, c, aligned, g)?;
                self.convert_group(xs, self.k.values[*src].ty.elem(), out)
            }
            Op::Slice { src, row, col } => {
                let (rr, cc) = self.slice_coords(*row, *col, r, c)?;
                let aligned = aligned && crate::passes::pipeline::const_int(self.k, *col).is_some_and(|c0| c0 % i64::from(g.n) == 0);
                let xs = self.operand_group(*src, rr, cc, aligned, g)?;
                self.convert_group(xs, self.k.values[*src].ty.elem(), out)
            }
            Op::ReadVar(var) if !self.frag_read_at(*var, g) => {
                let shape = self.shape_of(self.k.vars[*var].ty, "variable")?;
                let ve = self.k.vars[*var].ty.elem();
                let xs = self.load_group(self.var_base(*var)?, self.var_layout(*var), r, c, shape, ve, aligned, g.n)?;
                self.convert_group(xs, ve, out)
            }
            _ => (0..g.n)
                .map(|k| {
                    let ck = self.column_k(c, k)?;
                    self.one_of_group(g, k, |cg| cg.element(i, out, r, ck))
                })
                .collect(),
        }
    }

    /// Evaluates `f` as element `k` of the group: a register accumulator read inside reads
    /// fragment register `idx + k`.
    fn one_of_group(&mut self, g: Group, k: u32, f: impl FnOnce(&Self) -> Result<BasicValueEnum<'ctx>, BackendError>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        self.frag_ctx = g.frag.map(|(d, idx)| (d, idx + k));
        let x = f(self);
        self.frag_ctx = None;
        x
    }

    /// Whether a read of `var` in the group reads register fragments (evaluated one element at
    /// a time).
    fn frag_read_at(&mut self, var: crate::ir::Var, g: Group) -> bool {
        self.frag_ctx = g.frag;
        let is = self.frag_read(var).is_some();
        self.frag_ctx = None;
        is
    }

    /// Elements `(r, c) .. (r, c + n − 1)` of a `rows x cols` shared-memory tile of `elem` at
    /// byte `base` in `layout`: one `n`-element load when `c` is a multiple of `n` and the layout
    /// keeps the group contiguous (a row-major tile whose rows are a multiple of `n`; a
    /// core-matrix or swizzled tile, whose 16-byte chunks of 8 elements stay whole), else one
    /// load per element.
    #[allow(clippy::too_many_arguments)] // one tile access: base, layout, coordinates, shape, type, alignment, width
    fn load_group(&self, base: IntValue<'ctx>, layout: TileLayout, r: IntValue<'ctx>, c: IntValue<'ctx>, shape: (u32, u32), elem: Elem, aligned: bool, n: u32) -> Result<Vec<BasicValueEnum<'ctx>>, BackendError> {
        let contiguous = match layout {
            TileLayout::RowMajor => shape.1 % n == 0,
            TileLayout::Pitched(pitch) => pitch % n == 0 && shape.1 % n == 0,
            TileLayout::CoreMatrices | TileLayout::Swizzled(_) => 8 % n == 0,
        };
        if !(aligned && contiguous) {
            return (0..n).map(|k| self.load_elem_in(base, layout, r, self.column_k(c, k)?, shape, elem)).collect();
        }
        let off = layout.offset(self, r, c, shape, elem.size_bytes())?;
        let p = self.smem_at(self.b.build_int_add(base, off, "")?)?;
        let ty = match self.storage_type(elem) {
            BasicTypeEnum::IntType(t) => t.vec_type(n),
            BasicTypeEnum::FloatType(t) => t.vec_type(n),
            other => return Err(BackendError::Invalid(format!("no vector of {other:?}"))),
        };
        let ld = self.b.build_load(ty, p, "ldv")?;
        // Every buffer starts on 16 bytes (the header is 0, 16 or whole swizzle periods; the plan
        // aligns to 128), and a group starts on a multiple of its size inside a row whose length
        // is one: aligned to the group's size up to 16 bytes (the widest shared access; a
        // 32-byte group is two).
        ld.as_instruction_value()
            .ok_or_else(|| BackendError::Invalid("a group load is no instruction".into()))?
            .set_alignment((n * elem.size_bytes()).min(16))
            .map_err(|e| BackendError::Invalid(format!("group load alignment: {e}")))?;
        let v = ld.into_vector_value();
        (0..n)
            .map(|k| {
                let raw = self.b.build_extract_element(v, self.i32(k as i32), "")?;
                self.to_compute(raw, elem)
            })
            .collect()
    }

    /// Column `c + k` of a group starting at column `c`.
    fn column_k(&self, c: IntValue<'ctx>, k: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(if k == 0 { c } else { self.b.build_int_add(c, self.i32(k as i32), "")? })
    }

    /// [`Codegen::convert`] of every element.
    fn convert_group(&self, xs: Vec<BasicValueEnum<'ctx>>, from: Elem, to: Elem) -> Result<Vec<BasicValueEnum<'ctx>>, BackendError> {
        xs.into_iter().map(|x| self.convert(x, from, to)).collect()
    }
}
