//! A warp-specialised TMA loop ([`crate::passes::warp_spec`] decides which and states the
//! protocol): the role split, the producer's copy loop, the consumers' wait for each stage and
//! their hand-back of it.

use inkwell::values::{IntValue, PointerValue};
use inkwell::IntPredicate;

use crate::ir::{Block, Inst};
use crate::layout::ring;
use crate::passes::pipeline::Pipeline;
use crate::passes::warp_spec::{WarpSpecialization, PRODUCER_REGISTERS};

use super::emit::Codegen;
use super::pipeline::ActivePipeline;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// Emits pipelined loop `i` (`for iv in lo..hi { body }`) warp-specialised by `ws`: every
    /// thread initialises the mbarriers' phases together (thread 0 writes them, a CTA barrier
    /// publishes them), then the producer warpgroup issues the copies and leaves, and the
    /// consumers run the loop and everything after it.
    pub(crate) fn warp_specialized_loop(&mut self, i: Inst, ws: WarpSpecialization, plan: Pipeline, lo: IntValue<'ctx>, hi: IntValue<'ctx>, body: Block) -> Result<(), BackendError> {
        self.settle_wgmma()?;
        let stages = plan.stages;
        let ok = self.tma_usable(&plan)?;
        self.bar_sync()?;
        self.on_thread0(&mut |cg| {
            for s in 0..stages {
                let (full, empty) = (cg.tma_barrier(i, cg.i32(s as i32))?, cg.empty_barrier(&ws, cg.i32(s as i32))?);
                cg.mbarrier_init(full, 1)?;
                cg.mbarrier_init(empty, ws.consumer_threads / 32)?;
            }
            Ok(())
        })?;
        self.bar_sync()?;
        // The split: one branch per role, as `setmaxnreg` requires.
        let producer = self.b.build_int_compare(IntPredicate::UGE, self.tid, self.i32(ws.consumer_threads as i32), "ws.producer")?;
        let (prod_bb, cons_bb) = (self.ctx.append_basic_block(self.func, "ws.producer"), self.ctx.append_basic_block(self.func, "ws.consumer"));
        self.b.build_conditional_branch(producer, prod_bb, cons_bb)?;
        self.b.position_at_end(prod_bb);
        self.call("llvm.nvvm.setmaxnreg.dec.sync.aligned.u32", None, &[self.i32(PRODUCER_REGISTERS as i32).into()])?;
        let first = self.b.build_int_compare(IntPredicate::EQ, self.tid, self.i32(ws.consumer_threads as i32), "")?;
        let elected = self.b.build_and(first, ok, "ws.elected")?;
        self.if_then(elected, &mut |cg| cg.produce(i, &plan, &ws, lo, hi))?;
        self.b.build_return(None)?;
        self.b.position_at_end(cons_bb);
        self.call("llvm.nvvm.setmaxnreg.inc.sync.aligned.u32", None, &[self.i32(ws.consumer_registers as i32).into()])?;
        // From here on only the consumers run: their CTA barriers leave the producer out.
        self.ws_consumers = Some(ws.consumer_threads);
        self.pipeline_iterations(i, &plan, lo, hi, Some(ok), false, true, body)?;
        // The last iteration's MMA may be in flight; the barrier keeps every consumer out of
        // the ring's bytes (which a later buffer may reuse) until all MMAs have read them.
        self.wgmma_pending = true;
        self.settle_wgmma()?;
        self.bar_sync()
    }

    /// The producer's loop (its elected thread): for execution positions `0 .. hi − lo`, wait
    /// until the stage is empty (from the second round of the ring on), then issue the
    /// iteration's tiles against the stage's full mbarrier.
    fn produce(&mut self, i: Inst, plan: &Pipeline, ws: &WarpSpecialization, lo: IntValue<'ctx>, hi: IntValue<'ctx>) -> Result<(), BackendError> {
        let (stages, s) = (plan.stages, self.i32(plan.stages as i32));
        let zero = self.i32(0);
        let n = self.b.build_int_sub(hi, lo, "ws.trips")?;
        let yes = self.ctx.bool_type().const_int(1, false);
        self.elected_issuer = true;
        let r = self.counted_loop(zero, n, zero, false, &mut |cg, pos| {
            let stage = ring::stage(&*cg, pos, stages)?;
            let reuse = cg.b.build_int_compare(IntPredicate::UGE, pos, s, "")?;
            cg.if_then(reuse, &mut |cg| {
                let parity = ring::empty_parity(&*cg, pos, stages)?;
                let empty = cg.empty_barrier(ws, stage)?;
                cg.mbarrier_wait(empty, parity)
            })?;
            let j = cg.iteration_at(plan, lo, hi, pos)?;
            cg.issue(i, plan, Some(yes), j, stage, None)
        });
        self.elected_issuer = false;
        r
    }

    /// A consumer's wait for the current iteration's stage (at the iteration's first pipelined
    /// write): its full mbarrier's phase, or, where the tensor maps are unusable and the
    /// producer issues nothing, this iteration's tiles copied here and a barrier.
    pub(crate) fn await_stage(&mut self, p: &ActivePipeline<'ctx>) -> Result<(), BackendError> {
        let ok = p.tma_ok.ok_or_else(|| BackendError::Invalid("a warp-specialised loop without TMA".into()))?;
        let bar = self.tma_barrier(p.loop_inst, p.stage)?;
        let no = self.ctx.bool_type().const_zero();
        self.if_else(ok, &mut |cg| cg.mbarrier_wait(bar, p.phase), &mut |cg| {
            cg.issue(p.loop_inst, &p.plan, Some(no), p.iv, p.stage, None)?;
            cg.fence_proxy_async()?;
            cg.bar_sync()
        })
    }

    /// At the end of a consumer's iteration at execution position `rel`: `wgmma.wait_group 1`
    /// (every MMA group but this iteration's has completed, so the previous iteration's stage
    /// is no longer read), then each warp arrives once on that stage's empty mbarrier.
    pub(crate) fn release_stage(&mut self, rel: IntValue<'ctx>) -> Result<(), BackendError> {
        let (Some(p), Some(ws)) = (self.pipes.last().cloned(), self.tp.warp_spec) else { return Err(BackendError::Invalid("a stage released outside a warp-specialised loop".into())) };
        let ok = p.tma_ok.ok_or_else(|| BackendError::Invalid("a warp-specialised loop without TMA".into()))?;
        self.call("llvm.nvvm.wgmma.wait_group.sync.aligned", None, &[self.ctx.i64_type().const_int(1, false).into()])?;
        let later = self.b.build_int_compare(IntPredicate::NE, rel, self.i32(0), "")?;
        let go = self.b.build_and(ok, later, "ws.release")?;
        let prev = ring::handed_back(&*self, rel, p.plan.stages)?;
        self.if_then(go, &mut |cg| {
            cg.warp_sync()?;
            let lane = cg.b.build_and(cg.tid, cg.i32(31), "")?;
            let first = cg.b.build_int_compare(IntPredicate::EQ, lane, cg.i32(0), "")?;
            let empty = cg.empty_barrier(&ws, prev)?;
            cg.if_then(first, &mut |cg| cg.call("llvm.nvvm.mbarrier.arrive.shared", Some(cg.ctx.i64_type().into()), &[empty.into()]).map(|_| ()))
        })
    }

    /// The empty mbarrier of ring stage `stage`.
    fn empty_barrier(&self, ws: &WarpSpecialization, stage: IntValue<'ctx>) -> Result<PointerValue<'ctx>, BackendError> {
        let off = self.b.build_int_add(self.i32(ws.empty_barriers as i32), self.b.build_int_mul(stage, self.i32(8), "")?, "")?;
        self.smem_at(off)
    }
}
