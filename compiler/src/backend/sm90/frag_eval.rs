//! Elementwise work on a register accumulator where its fragments are (issue 9, item 1): a
//! `Store` or `WriteVar` whose fused expression reads the accumulator
//! ([`crate::passes::fuse::Fusion::frag_root`]) is evaluated by each thread at the coordinates
//! of its own fragment elements ([`crate::layout::wgmma::fragment_coords`]) instead of a CTA
//! loop over a shared-memory copy: `d = d * exp2(g)`, `dvn += dv_tile` and `store dh = d` touch
//! registers and global memory only, and `db = bf16(d)` writes the operand tile straight from
//! registers. A whole-tile write into a register accumulator whose expression reads none is
//! evaluated in that accumulator's order too (`let ea: tmem f32[C, K] = exp2(..)`: no staging
//! copy and reload). Every element is computed by the same operations as before, so results are
//! bit-identical; what goes away is the write-back of the fragments, a copy, a reload and
//! their barriers.

use inkwell::values::{BasicValueEnum, IntValue, PointerValue};

use crate::layout::wgmma::Distribution;

use crate::ir::{Inst, Op, Value, Var};
use crate::layout::wgmma::fragment_coords;

use super::super::groups::Group;

use super::super::copy::TileLayout;
use super::super::emit::Codegen;
use super::super::BackendError;
use crate::ir::columns_are_last;
use crate::layout::quad_transpose::{row_segments_apply, BLOCK_PAIRS};

/// Most pairs evaluated before they are written (and tested together for the 2-element stores):
/// a wgmma unit 32 columns wide (K#1's) is one group; a wider one (gemm's 256 columns: 64
/// pairs) is split, because one straight-line block of 64 pairs' addresses and values tripled
/// gemm's build time in LLVM's NVPTX instruction selection (0.17 → 0.54 s). Eight pairs are
/// also one 32-column block, the unit of the 16-byte vector stores ([`BLOCK_PAIRS`]).
const GROUP_PAIRS: usize = BLOCK_PAIRS;

impl<'ctx> Codegen<'ctx, '_> {
    /// The fragment register a fused `ReadVar` of accumulator `v` reads at the element being
    /// evaluated, inside [`Codegen::fragment_root`]: accumulators of one distribution keep
    /// element `(r, c)` in the same thread at the same register index.
    pub fn frag_read(&self, v: Var) -> Option<PointerValue<'ctx>> {
        let (d, idx) = self.frag_ctx?;
        let (arr, dv) = self.fragment(v).ok()?;
        (dv == d).then(|| self.frag_slot(arr, d.floats_per_thread(), idx).ok()).flatten()
    }

    /// Emits root `i` (a `Store` or `WriteVar`) in the fragment order of accumulator `v`.
    ///
    /// A thread's fragment elements come in pairs, `d[2j]` and `d[2j + 1]` at columns `c` and
    /// `c + 1` of one row with `c` even ([`fragment_coords`]). A store of a whole 32-column
    /// block goes out as 16-byte row segments after the quad trades its pairs
    /// ([`super::frag_store`]); otherwise each pair is written by one 2-element store where
    /// memory keeps the pair contiguous. Up to [`GROUP_PAIRS`] pairs of a
    /// unit are evaluated before any is written, so the reads of a row's broadcast operands (a
    /// gate, a mask: 2 distinct rows per thread and unit) are common subexpressions of the group
    /// instead of being repeated after each store, which may alias them.
    pub fn fragment_root(&mut self, i: Inst, v: Var) -> Result<(), BackendError> {
        self.settle_wgmma()?;
        self.expect_settled(v)?;
        let (_, d) = self.fragment(v)?;
        let per_slot = d.piece_n / 2;
        let op = self.k.insts[i].op.clone();
        self.for_each_unit(d, &mut |cg, s, r0, c0, t| {
            for group in (0..per_slot).step_by(2).collect::<Vec<_>>().chunks(GROUP_PAIRS) {
                let mut pairs = vec![];
                for &e in group {
                    let (r, c) = fragment_coords(&*cg, t, e)?;
                    let (r, c) = (cg.b.build_int_add(r0, r, "")?, cg.b.build_int_add(c0, c, "")?);
                    let idx = s * per_slot + e;
                    let (vals, keep) = cg.fragment_pair(&op, d, idx, r, c)?;
                    pairs.push(FragPair { idx, r, c, vals, keep });
                }
                cg.write_fragment_pairs(&op, d, &pairs, t)?;
            }
            Ok(())
        })
    }

    /// The values of root `op` at elements `(r, c)` and `(r, c + 1)` (and its `where` mask
    /// there), whose registers are `idx` and `idx + 1` of accumulators of distribution `d`.
    fn fragment_pair(&mut self, op: &Op, d: Distribution, idx: u32, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<([BasicValueEnum<'ctx>; 2], Option<[IntValue<'ctx>; 2]>), BackendError> {
        // Both elements at once (`backend::groups`): c is even.
        let g = Group { n: 2, frag: Some((d, idx)) };
        let pair = |cg: &mut Self, x: Value| -> Result<[BasicValueEnum<'ctx>; 2], BackendError> {
            let v = cg.operand_group(x, r, c, true, g)?;
            Ok([v[0], v[1]])
        };
        match op {
            Op::Store { value, mask, .. } => {
                let vals = pair(self, *value)?;
                let keep = match mask {
                    Some(m) => {
                        let [x, y] = pair(self, *m)?;
                        Some([x.into_int_value(), y.into_int_value()])
                    }
                    None => None,
                };
                Ok((vals, keep))
            }
            Op::WriteVar(w, x) => {
                let we = self.k.vars[*w].ty.elem();
                let ys = pair(self, *x)?;
                Ok(([self.convert(ys[0], self.res_elem(*x), we)?, self.convert(ys[1], self.res_elem(*x), we)?], None))
            }
            other => Err(BackendError::Invalid(format!("{other:?} is not a fragment-order root"))),
        }
    }

    /// Writes the evaluated pairs of root `op` (evaluated in the order of distribution `d` by
    /// thread `t` of its warpgroup).
    fn write_fragment_pairs(&mut self, op: &Op, d: Distribution, pairs: &[FragPair<'ctx>], t: IntValue<'ctx>) -> Result<(), BackendError> {
        match op {
            // A whole 32-column block of a unit whose stores go out as 16-byte row segments.
            Op::Store { dst, index, value, .. }
                if pairs.len() == BLOCK_PAIRS && row_segments_apply(d.piece_n, columns_are_last(index), self.tensor_elem(*dst)?.size_bytes(), self.k.residency(self.target).is_some()) =>
            {
                self.store_fragment_block(*dst, index, pairs, self.res_elem(*value), t)
            }
            Op::Store { dst, index, value, .. } => {
                let elems: Vec<_> = pairs.iter().map(|p| (p.r, p.c, p.vals, p.keep)).collect();
                self.store_global_pairs(*dst, index, &elems, self.res_elem(*value))
            }
            // An accumulator of the same distribution (the one whose order it is, or another).
            Op::WriteVar(w, _) if self.accumulator(*w) == Some(d) => {
                let (arr, _) = self.fragment(*w)?;
                for p in pairs {
                    self.b.build_store(self.frag_slot(arr, d.floats_per_thread(), p.idx)?, p.vals[0])?;
                    self.b.build_store(self.frag_slot(arr, d.floats_per_thread(), p.idx + 1)?, p.vals[1])?;
                }
                Ok(())
            }
            Op::WriteVar(w, _) => {
                // Every shared-memory tile layout keeps (r, c) and (r, c + 1), c even, side by
                // side and pair-aligned (row-major; the swizzled and core-matrix layouts, which
                // hold 16-bit tiles only: `an_even_column_and_the_next_are_adjacent` in
                // `layout::swizzle` and `layout::staging`).
                let we = self.k.vars[*w].ty.elem();
                let shape = self.shape_of(self.k.vars[*w].ty, "variable")?;
                let buf = self.i32(self.var_buf(*w)? as i32);
                let layout = self.var_layout(*w);
                for p in pairs {
                    let off = layout.offset(self, p.r, p.c, shape, we.size_bytes())?;
                    let ptr = self.smem_at(self.b.build_int_add(buf, off, "")?)?;
                    let vs = [self.to_storage(p.vals[0], we)?, self.to_storage(p.vals[1], we)?];
                    if layout == TileLayout::RowMajor && shape.1 % 2 == 1 {
                        // An odd row length leaves every other row's pairs misaligned.
                        let c1 = self.b.build_int_add(p.c, self.i32(1), "")?;
                        let off1 = layout.offset(self, p.r, c1, shape, we.size_bytes())?;
                        self.b.build_store(ptr, vs[0])?;
                        self.b.build_store(self.smem_at(self.b.build_int_add(buf, off1, "")?)?, vs[1])?;
                        continue;
                    }
                    let pair = self.storage_pair(vs, we)?;
                    self.b.build_store(ptr, pair)?.set_alignment(2 * we.size_bytes()).map_err(|e| BackendError::Invalid(e.to_string()))?;
                }
                Ok(())
            }
            other => Err(BackendError::Invalid(format!("{other:?} is not a fragment-order root"))),
        }
    }

    /// The shared-memory layout of variable `v`'s buffer.
    pub fn var_layout(&self, v: Var) -> TileLayout {
        match self.tp.tma.swizzle_of(v) {
            Some(sw) => TileLayout::Swizzled(sw),
            None if self.tp.roles.is_tiled(v) => TileLayout::CoreMatrices,
            None => self.tp.pitch_of(v).map_or(TileLayout::RowMajor, TileLayout::Pitched),
        }
    }
}

/// One evaluated pair of fragment elements, `(r, c)` and `(r, c + 1)`.
pub(crate) struct FragPair<'ctx> {
    /// The fragment register index of the first element (the second's is the next).
    pub(crate) idx: u32,
    pub(crate) r: IntValue<'ctx>,
    pub(crate) c: IntValue<'ctx>,
    /// The root's values there (the written variable's element type for a `WriteVar`).
    pub(crate) vals: [BasicValueEnum<'ctx>; 2],
    /// A `Store`'s `where` mask there.
    pub(crate) keep: Option<[IntValue<'ctx>; 2]>,
}
