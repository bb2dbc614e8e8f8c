//! A fragment pair's two elements evaluated together. A thread's wgmma fragment elements come
//! in pairs `(r, c)`, `(r, c + 1)` with `c` even ([`crate::layout::wgmma::fragment_coords`]);
//! [`super::frag_eval`] evaluates a fused expression at both. Evaluated one element at a time,
//! every shared-memory read of the expression was a 4-byte (or 2-byte) load with its own address
//! arithmetic, and every gather its own bounds test, although the pair's two elements sit side by
//! side in every layout the back end uses (row-major with an even row length, core matrices,
//! swizzled panels: `layout::staging` and `layout::swizzle` test it) and a row index that does
//! not vary along the row is the same for both. Here a read of such a pair is one 8-byte (4-byte)
//! load, a column vector (`[R, 1]`) is read once for both, and a gather whose row index is a
//! column vector and whose column index is the element's own tests and computes its row once.
//! The key-row loops of dqkwg_channel and k2_keys_channel read four operand rows per step that way
//! (docs/results.md, thirty-fourth session).
//!
//! Each element's arithmetic is emitted by the same [`Codegen::apply`] as before, on the same
//! values, so results are bitwise unchanged; only loads and index arithmetic are shared.
//! Anything else (a transpose, an insert, a global load, a register fragment) is evaluated one
//! element at a time as before.

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValue, BasicValueEnum, IntValue};

use crate::ir::{Axis, Elem, Inst, Op, Type, Value, ValueDef};
use crate::layout::wgmma::Distribution;

use super::super::copy::TileLayout;
use super::super::emit::Codegen;
use super::super::BackendError;

/// Where a pair is evaluated: the accumulators' distribution and the fragment register of its
/// first element (the second is the next one).
#[derive(Copy, Clone)]
pub(crate) struct PairAt {
    pub d: Distribution,
    pub idx: u32,
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Elements `(r, c)` and `(r, c + 1)` of `v`, as [`Codegen::operand`] gives each; `even`
    /// when `c` is known to be even (then the two are adjacent in memory).
    pub(crate) fn operand_pair(&mut self, v: Value, r: IntValue<'ctx>, c: IntValue<'ctx>, even: bool, at: PairAt) -> Result<[BasicValueEnum<'ctx>; 2], BackendError> {
        let Type::Tile { elem, rows, cols } = self.k.values[v].ty else {
            let s = self.scalar(v)?;
            return Ok([s, s]);
        };
        let r = if rows == 1 { self.i32(0) } else { r };
        if cols == 1 {
            // A column vector: both elements are its element r.
            let x = self.one_of_pair(at, 0, |cg| cg.operand(v, r, c))?;
            return Ok([x, x]);
        }
        if self.tp.fusion.is_fused(v) {
            if let ValueDef::Result(d) = self.k.values[v].def {
                return self.element_pair(d, elem, r, c, even, at);
            }
        }
        let buf = self.i32(self.value_buf(v)? as i32);
        self.load_pair(buf, TileLayout::RowMajor, r, c, (rows, cols), elem, even)
    }

    /// [`Codegen::element`] of instruction `i` at `(r, c)` and `(r, c + 1)`.
    fn element_pair(&mut self, i: Inst, out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>, even: bool, at: PairAt) -> Result<[BasicValueEnum<'ctx>; 2], BackendError> {
        let op = self.k.insts[i].op.clone();
        match &op {
            Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) => {
                let (mut first, mut second) = (vec![], vec![]);
                for a in self.k.inst_args(i) {
                    let [x, y] = self.operand_pair(a, r, c, even, at)?;
                    first.push(x);
                    second.push(y);
                }
                Ok([self.apply(&op, out, &first)?, self.apply(&op, out, &second)?])
            }
            Op::Gather { src, row, col } if self.extent2(*row).1 == 1 && self.own_index(*col, Axis::Col, self.extent2(*src).1) => {
                // The row index is the same for both; the column index is the element's own.
                let ri = self.operand(*row, r, c)?.into_int_value();
                self.check_gather(*src, (*row, ri), (*col, c))?;
                let xs = self.operand_pair(*src, ri, c, even, at)?;
                self.convert_pair(xs, self.k.values[*src].ty.elem(), out)
            }
            Op::Slice { src, row, col } => {
                let rr = self.b.build_int_add(self.scalar(*row)?.into_int_value(), r, "vr")?;
                let cc = self.b.build_int_add(self.scalar(*col)?.into_int_value(), c, "vc")?;
                let even = even && crate::passes::pipeline::const_int(self.k, *col).is_some_and(|c0| c0 % 2 == 0);
                let xs = self.operand_pair(*src, rr, cc, even, at)?;
                self.convert_pair(xs, self.k.values[*src].ty.elem(), out)
            }
            Op::ReadVar(var) if self.frag_read_pair(*var, at).is_none() => {
                let shape = self.shape_of(self.k.vars[*var].ty, "variable")?;
                let ve = self.k.vars[*var].ty.elem();
                let xs = self.load_pair(self.var_base(*var)?, self.var_layout(*var), r, c, shape, ve, even)?;
                self.convert_pair(xs, ve, out)
            }
            _ => {
                let c1 = self.b.build_int_add(c, self.i32(1), "")?;
                Ok([self.one_of_pair(at, 0, |cg| cg.element(i, out, r, c))?, self.one_of_pair(at, 1, |cg| cg.element(i, out, r, c1))?])
            }
        }
    }

    /// Evaluates `f` as element `k` (0 or 1) of the pair: a register accumulator read inside
    /// reads fragment register `idx + k`.
    fn one_of_pair(&mut self, at: PairAt, k: u32, f: impl FnOnce(&Self) -> Result<BasicValueEnum<'ctx>, BackendError>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        self.frag_ctx = Some((at.d, at.idx + k));
        let x = f(self);
        self.frag_ctx = None;
        x
    }

    /// Whether a read of `var` at the pair is a read of register fragments (evaluated one
    /// element at a time).
    fn frag_read_pair(&mut self, var: crate::ir::Var, at: PairAt) -> Option<()> {
        self.frag_ctx = Some((at.d, at.idx));
        let is = self.frag_read(var).is_some();
        self.frag_ctx = None;
        is.then_some(())
    }

    /// Elements `(r, c)` and `(r, c + 1)` of a `rows x cols` shared-memory tile of `elem` at byte
    /// `base` in `layout`: one 2-element load when `c` is even and the layout keeps the two
    /// adjacent (a row-major tile with an even row length; every core-matrix or swizzled tile),
    /// else two.
    #[allow(clippy::too_many_arguments)] // one tile access: base, layout, coordinates, shape, type, parity
    fn load_pair(&self, base: IntValue<'ctx>, layout: TileLayout, r: IntValue<'ctx>, c: IntValue<'ctx>, shape: (u32, u32), elem: Elem, even: bool) -> Result<[BasicValueEnum<'ctx>; 2], BackendError> {
        let adjacent = even && (layout != TileLayout::RowMajor || shape.1 % 2 == 0);
        let c1 = self.b.build_int_add(c, self.i32(1), "")?;
        if !adjacent {
            return Ok([self.load_elem_in(base, layout, r, c, shape, elem)?, self.load_elem_in(base, layout, r, c1, shape, elem)?]);
        }
        let off = layout.offset(self, r, c, shape, elem.size_bytes())?;
        let p = self.smem_at(self.b.build_int_add(base, off, "")?)?;
        let ty = match self.storage_type(elem) {
            BasicTypeEnum::IntType(t) => t.vec_type(2),
            BasicTypeEnum::FloatType(t) => t.vec_type(2),
            other => return Err(BackendError::Invalid(format!("no vector of {other:?}"))),
        };
        let ld = self.b.build_load(ty, p, "ld2")?;
        ld.as_instruction_value()
            .ok_or_else(|| BackendError::Invalid("a pair load is no instruction".into()))?
            .set_alignment(2 * elem.size_bytes())
            .map_err(|e| BackendError::Invalid(format!("pair load alignment: {e}")))?;
        let v = ld.into_vector_value();
        let mut xs = [v.into(), v.into()];
        for (k, x) in xs.iter_mut().enumerate() {
            let raw = self.b.build_extract_element(v, self.i32(k as i32), "")?;
            *x = self.to_compute(raw, elem)?;
        }
        Ok(xs)
    }

    /// [`Codegen::convert`] of both elements.
    fn convert_pair(&self, [x, y]: [BasicValueEnum<'ctx>; 2], from: Elem, to: Elem) -> Result<[BasicValueEnum<'ctx>; 2], BackendError> {
        Ok([self.convert(x, from, to)?, self.convert(y, from, to)?])
    }
}
