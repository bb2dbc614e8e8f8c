//! TMA tile copies of a pipelined loop ([`crate::passes::tma`] decides which): the tensor-map
//! kernel parameters, the run-time test that the runtime could encode them, the ring's full
//! mbarriers, and `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes`
//! (PTX ISA 9.7.9.27; LLVM `llvm.nvvm.cp.async.bulk.tensor.g2s.tile.Nd`, as in
//! `hopper_tma_wgmma.ll`, H200-verified).
//!
//! Protocol per ring stage (one mbarrier each, arrival count 1): thread 0 arrives with
//! `expect_tx(bytes of the stage's tiles)` and issues one copy per panel of each tile; every
//! thread waits for the phase of the stage's use (`(i − lo) / S` mod 2). The copies write
//! through the async proxy and wgmma reads through it, so no proxy fence or CTA barrier sits
//! between them. A stage is overwritten only after the MMAs that read it completed
//! (`wgmma.wait_group` and the barrier ending each MMA, [`crate::passes::pipeline`]).

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use tilec_abi::meta::{TENSOR_MAP_ALIGN, TENSOR_MAP_MAX_EXTENT, TENSOR_MAP_STRIDE_LIMIT};

use crate::ir::{Index, Inst};
use crate::passes::pipeline::Pipeline;

use super::emit::Codegen;
use super::BackendError;

/// Bytes of a `CUtensorMap`.
pub const TENSOR_MAP_BYTES: u32 = 128;

/// Marks kernel parameters `first ..` as tensor maps: `byval([128 x i8]) align 64` and
/// `"nvvm.grid_constant"`, so PTX declares them `.param .align 64 .b8 [128]` and the TMA
/// instruction addresses them in the parameter space.
pub fn mark_tensor_map_params<'ctx>(ctx: &'ctx inkwell::context::Context, func: FunctionValue<'ctx>, first: u32, count: usize) {
    let ty = ctx.i8_type().array_type(TENSOR_MAP_BYTES);
    for j in 0..count as u32 {
        let loc = AttributeLoc::Param(first + j);
        func.add_attribute(loc, ctx.create_type_attribute(Attribute::get_named_enum_kind_id("byval"), ty.into()));
        func.add_attribute(loc, ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("align"), 64));
        func.add_attribute(loc, ctx.create_string_attribute("nvvm.grid_constant", ""));
    }
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Whether the runtime encoded the tensor maps of `plan`'s writes (i1, uniform): each
    /// tensor's base is 16-byte aligned, every stride but the innermost is a multiple of 16
    /// bytes below 2^40, and every extent is in 1..=2^32 — exactly the conditions
    /// `docs/metadata.md` states for the launcher (`runtime/src/tensor_map.rs`).
    pub fn tma_usable(&mut self, plan: &Pipeline) -> Result<IntValue<'ctx>, BackendError> {
        let i64t = self.ctx.i64_type();
        let mut bad = i64t.const_zero();
        let mut ok = self.ctx.bool_type().const_int(1, false);
        for load in plan.writes.iter().filter_map(|&w| self.tp.tma.load(w)).cloned().collect::<Vec<_>>() {
            let p = self.tp.tma.maps[load.map].param;
            let base = self.params[p].ok_or_else(|| BackendError::Invalid("tensor parameter not bound".into()))?.into_pointer_value();
            bad = self.b.build_or(bad, self.b.build_ptr_to_int(base, i64t, "")?, "")?;
            let size = i64t.const_int(self.tensor_elem(p)?.size_bytes() as u64, false);
            let rank = self.dims[p].len();
            for d in 0..rank {
                if d + 1 < rank {
                    let stride = self.b.build_int_mul(self.strides[p][d], size, "")?;
                    bad = self.b.build_or(bad, stride, "")?;
                    let below = self.b.build_int_compare(IntPredicate::ULT, stride, i64t.const_int(TENSOR_MAP_STRIDE_LIMIT, false), "")?;
                    ok = self.b.build_and(ok, below, "")?;
                }
                // An extent in 1..=2^32 (unsigned: a negative one fails too).
                let dim = self.dims[p][d];
                let nonzero = self.b.build_int_compare(IntPredicate::NE, dim, i64t.const_zero(), "")?;
                let small = self.b.build_int_compare(IntPredicate::ULE, dim, i64t.const_int(TENSOR_MAP_MAX_EXTENT, false), "")?;
                ok = self.b.build_and(ok, self.b.build_and(nonzero, small, "")?, "")?;
            }
        }
        let aligned = self.b.build_int_compare(IntPredicate::EQ, self.b.build_and(bad, i64t.const_int(TENSOR_MAP_ALIGN - 1, false), "")?, i64t.const_zero(), "")?;
        Ok(self.b.build_and(ok, aligned, "tma.ok")?)
    }

    /// The full mbarrier of ring stage `stage` of TMA loop `l`.
    pub fn tma_barrier(&self, l: Inst, stage: IntValue<'ctx>) -> Result<PointerValue<'ctx>, BackendError> {
        let at = self.tp.tma.loop_barriers(l).ok_or_else(|| BackendError::Invalid(format!("{l} is not a TMA loop")))?;
        let off = self.b.build_int_add(self.i32(at as i32), self.b.build_int_mul(stage, self.i32(8), "")?, "")?;
        self.smem_at(off)
    }

    /// (Re)initialises loop `l`'s `stages` mbarriers: a barrier first (no thread still waits
    /// on a previous run's phases), thread 0 initialises, a barrier publishes.
    pub fn tma_init(&mut self, l: Inst, stages: u32) -> Result<(), BackendError> {
        self.bar_sync()?;
        self.on_thread0(&mut |cg| {
            for s in 0..stages {
                let bar = cg.tma_barrier(l, cg.i32(s as i32))?;
                cg.mbarrier_init(bar, 1)?;
            }
            Ok(())
        })?;
        self.bar_sync()
    }

    /// Thread 0 (or the producer's elected thread, [`super::warp_spec`]) issues the TMA copies of pipelined writes `writes` (byte offsets `dsts`) against
    /// mbarrier `bar`, after announcing their bytes. With `after_reads`, the buffers were just
    /// read through the generic proxy (an early refill): thread 0 orders those reads, which the
    /// caller's CTA barrier made complete, before the async-proxy writes.
    pub fn tma_issue(&mut self, writes: &[Inst], dsts: &[IntValue<'ctx>], bar: PointerValue<'ctx>, after_reads: bool) -> Result<(), BackendError> {
        let bytes: u32 = writes.iter().filter_map(|&w| self.tp.tma.load(w)).map(|l| l.bytes).sum();
        let elected = self.elected_issuer;
        let mut body = |cg: &mut Self| -> Result<(), BackendError> {
            if after_reads {
                cg.fence_proxy_async()?;
            }
            cg.mbarrier_arrive_expect_tx(bar, bytes)?;
            for (&w, &dst) in writes.iter().zip(dsts) {
                cg.tma_copy(w, dst, bar)?;
            }
            Ok(())
        };
        // A warp-specialised loop's producer is already one elected thread.
        if elected {
            body(self)
        } else {
            self.on_thread0(&mut body)
        }
    }

    /// The copies of one write: one box (a panel) each, coordinates innermost first.
    fn tma_copy(&mut self, w: Inst, dst: IntValue<'ctx>, bar: PointerValue<'ctx>) -> Result<(), BackendError> {
        let k = self.k;
        let load = self.tp.tma.load(w).cloned().ok_or_else(|| BackendError::Invalid(format!("{w} is not a TMA copy")))?;
        let map = &self.tp.tma.maps[load.map];
        let (v, _, index) = k.written_load(w).ok_or_else(|| BackendError::Invalid(format!("TMA {w} does not write a load")))?;
        let rows = k.vars[v].ty.shape().map_or(0, |s| s.0);
        // Panels of a swizzled tile are `rows × P` bytes apart; a plain tile is one box.
        let (panel_elems, panel_bytes) = match map.swizzle {
            Some(sw) => (sw.elems(), rows * sw.bytes()),
            None => (0, 0),
        };
        let rank = index.len();
        let tmap = self.tmaps.get(load.map).copied().ok_or_else(|| BackendError::Invalid("tensor map parameter missing".into()))?;
        let mut coords: Vec<IntValue<'ctx>> = vec![];
        for ix in index.iter().rev() {
            let (Index::Point(s) | Index::Range { start: s, .. }) = ix;
            coords.push(self.scalar(*s)?.into_int_value());
        }
        let name = format!("llvm.nvvm.cp.async.bulk.tensor.g2s.tile.{rank}d");
        let cluster = self.ctx.ptr_type(AddressSpace::from(7u16));
        for panel in 0..load.panels {
            let at = self.b.build_int_add(dst, self.i32((panel * panel_bytes) as i32), "")?;
            let d = self.b.build_address_space_cast(self.smem_at(at)?, cluster, "tma.dst")?;
            let mut args: Vec<BasicValueEnum<'ctx>> = vec![d.into(), bar.into(), tmap.into()];
            for (j, c) in coords.iter().enumerate() {
                let c = if j == 0 { self.b.build_int_add(*c, self.i32((panel * panel_elems) as i32), "")? } else { *c };
                args.push(c.into());
            }
            // No multicast mask, no cache hint, cta_group 0 (the plain sm_90 form).
            let tail: [BasicValueEnum<'ctx>; 5] = [
                self.ctx.i16_type().const_zero().into(),
                self.ctx.i64_type().const_zero().into(),
                self.ctx.bool_type().const_zero().into(),
                self.ctx.bool_type().const_zero().into(),
                self.i32(0).into(),
            ];
            args.extend(tail);
            self.call(&name, None, &args)?;
        }
        Ok(())
    }
}
