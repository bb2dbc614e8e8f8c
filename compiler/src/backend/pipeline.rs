//! Code for a software-pipelined loop ([`crate::passes::pipeline`] says which loops and why the
//! order below is safe): the first `D` iterations' tiles are issued before the loop, each
//! iteration issues the tiles of iteration `i + D` at its first pipelined write and waits
//! for its own, and the readers of a pipelined variable (the MMAs) address the current stage
//! of its ring ([`Codegen::stage_offset`]).
//!
//! Issuing another iteration's tiles needs their addresses at that iteration: the pipeline's
//! index slice (pure scalar instructions of the body) is emitted again with the induction
//! variable bound to the other iteration, and the body's own values are put back afterwards.

use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::IntPredicate;

use crate::ir::{Block, Inst, Op, Var};
use crate::layout::ring;
use crate::passes::pipeline::Pipeline;

use super::emit::Codegen;
use super::BackendError;

/// The pipelined loop being emitted.
#[derive(Clone, Debug)]
pub(crate) struct ActivePipeline<'ctx> {
    /// Its `For` instruction.
    pub loop_inst: Inst,
    /// The plan.
    pub plan: Pipeline,
    /// The current iteration.
    pub iv: IntValue<'ctx>,
    /// The loop's lower bound.
    pub lo: IntValue<'ctx>,
    /// The loop's (exclusive) upper bound.
    pub hi: IntValue<'ctx>,
    /// The current stage, `(iv − lo) mod S`.
    pub stage: IntValue<'ctx>,
    /// The parity of the current stage's use, `((iv − lo) / S) mod 2` (its mbarrier phase).
    pub phase: IntValue<'ctx>,
    /// In a TMA loop ([`crate::passes::tma`]): whether the tensor maps are usable (i1, uniform;
    /// otherwise the tiles are copied element by element, synchronously).
    pub tma_ok: Option<IntValue<'ctx>>,
    /// Whether each variable is refilled for the next iteration right after its last read
    /// ([`crate::passes::tma::early_refill`]; one stage, one mbarrier per write).
    pub early: bool,
    /// Whether a producer warpgroup issues the copies ([`super::warp_spec`]): the consumers
    /// only wait for each stage and hand it back.
    pub ws: bool,
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Emits pipelined loop `i` (`for iv in lo..hi { body }`, counting up, or down when the
    /// plan says `reverse`: iteration positions `0, 1, …` are then `hi − 1, hi − 2, …`).
    pub fn pipelined_loop(&mut self, i: Inst, lo: IntValue<'ctx>, hi: IntValue<'ctx>, body: Block) -> Result<(), BackendError> {
        let plan = self.tp.pipelines.get(i).cloned().flatten().ok_or_else(|| BackendError::Invalid(format!("{i} is not a pipelined loop")))?;
        if let Some(ws) = self.tp.warp_spec.filter(|w| w.loop_inst == i) {
            return self.warp_specialized_loop(i, ws, plan, lo, hi, body);
        }
        self.settle_wgmma()?;
        let tma_ok = match self.tp.tma.loop_barriers(i) {
            Some(_) => {
                let ok = self.tma_usable(&plan)?;
                self.tma_init(i, crate::passes::tma::barriers_of(&plan))?;
                Some(ok)
            }
            None => None,
        };
        let early = tma_ok.is_some() && crate::passes::tma::early_refill(&plan);
        if early {
            // The first iteration's tiles, each on its own mbarrier; later ones are refilled
            // after their last read ([`Codegen::refill_after`]).
            let (j, zero) = (self.iteration_at(&plan, lo, hi, self.i32(0))?, self.i32(0));
            let live = self.live_iteration(&plan, lo, hi, j)?;
            let all: Vec<usize> = (0..plan.writes.len()).collect();
            self.if_then(live, &mut |cg| cg.issue(i, &plan, tma_ok, j, zero, Some(&all)))?;
        }
        // Prologue: iterations lo .. lo + D, one cp.async group each (empty past the end) or
        // one TMA stage each (and a group of its thread copies).
        let groups = tma_ok.is_none() || self.has_thread_copies(i, &plan);
        for st in 0..if early { 0 } else { plan.distance() } {
            let j = self.iteration_at(&plan, lo, hi, self.i32(st as i32))?;
            let live = self.live_iteration(&plan, lo, hi, j)?;
            let stage = self.i32(st as i32);
            self.if_then(live, &mut |cg| cg.issue(i, &plan, tma_ok, j, stage, None))?;
            if groups {
                self.call("llvm.nvvm.cp.async.commit.group", None, &[])?;
            }
        }
        self.pipeline_iterations(i, &plan, lo, hi, tma_ok, early, false, body)?;
        // ... and so may the last iteration. `wgmma.wait_group` waits for this warpgroup's MMAs
        // only: the barrier keeps every warpgroup out of the ring's bytes (which the shared-memory
        // plan may give to a later buffer once the loop ends) until all MMAs have read them.
        if plan.overlap_mma {
            self.wgmma_pending = true;
            self.settle_wgmma()?;
            self.bar_sync()?;
        }
        Ok(())
    }

    /// The loop itself: each iteration at its ring stage and mbarrier phase, the body emitted
    /// with the pipeline active; with `ws`, each warp then hands the previous iteration's
    /// stage back to the producer ([`Codegen::release_stage`]).
    #[allow(clippy::too_many_arguments)] // the loop's plan and bounds, and how it is issued
    pub(crate) fn pipeline_iterations(&mut self, i: Inst, plan: &Pipeline, lo: IntValue<'ctx>, hi: IntValue<'ctx>, tma_ok: Option<IntValue<'ctx>>, early: bool, ws: bool, body: Block) -> Result<(), BackendError> {
        let s = plan.stages;
        let iv = self.k.insts[i].result;
        let init = if plan.reverse { self.b.build_int_sub(hi, self.i32(1), "init")? } else { lo };
        self.counted_loop(lo, hi, init, plan.reverse, &mut |cg, x| {
            if let Some(iv) = iv {
                cg.scalars[iv] = Some(x.into());
            }
            // The iteration's position in execution order.
            let rel = if plan.reverse { cg.b.build_int_sub(cg.b.build_int_sub(hi, cg.i32(1), "")?, x, "")? } else { cg.b.build_int_sub(x, lo, "")? };
            let stage = ring::stage(&*cg, rel, s)?;
            let phase = ring::fill_parity(&*cg, rel, s)?;
            cg.pipes.push(ActivePipeline { loop_inst: i, plan: plan.clone(), iv: x, lo, hi, stage, phase, tma_ok, early, ws });
            // The previous iteration may have left its MMA in flight.
            cg.wgmma_pending = plan.overlap_mma;
            let r = cg.block(body);
            let r = r.and_then(|()| if ws { cg.release_stage(rel) } else { Ok(()) });
            cg.pipes.pop();
            r
        })
    }

    /// Whether the MMA `dst <- a @ b` inside the innermost pipelined loop may stay in flight
    /// into the next iteration ([`Pipeline::overlap_mma`]).
    pub fn mma_may_overlap(&self, a: Var, b: Var) -> bool {
        self.pipes.last().is_some_and(|p| p.plan.overlap_mma && p.plan.vars.contains(&a) && p.plan.vars.contains(&b))
    }

    /// Waits for every wgmma in flight (`wgmma.wait_group 0`) if one may be: before anything
    /// else touches the accumulator registers or restages operands, and before a nested loop.
    pub fn settle_wgmma(&mut self) -> Result<(), BackendError> {
        if self.wgmma_pending {
            self.call("llvm.nvvm.wgmma.wait_group.sync.aligned", None, &[self.ctx.i64_type().const_int(0, false).into()])?;
            self.wgmma_pending = false;
        }
        Ok(())
    }

    /// Emits pipelined write `i` if it is one: the first of the iteration issues iteration
    /// `iv + D` into its stage and waits for this iteration's tiles (then a barrier); the
    /// others were issued with it. Returns whether `i` was handled.
    pub fn pipelined_write(&mut self, i: Inst) -> Result<bool, BackendError> {
        let Some(p) = self.pipes.iter().rev().find(|p| p.plan.writes.contains(&i)).cloned() else { return Ok(false) };
        if p.early {
            // Each write waits for its own copy: its mbarrier's phase, or a barrier after the
            // threads' own copies (a thread copy's `cp.async` groups complete first).
            if self.tp.tma.thread_copy(p.loop_inst, i) {
                self.call("llvm.nvvm.cp.async.wait.all", None, &[])?;
                self.fence_proxy_async()?;
                return self.bar_sync().map(|()| true);
            }
            let w = p.plan.writes.iter().position(|&x| x == i).unwrap_or(0);
            let (bar, ok) = (self.tma_barrier(p.loop_inst, self.i32(w as i32))?, p.tma_ok.unwrap_or(self.ctx.bool_type().const_zero()));
            self.if_else(ok, &mut |cg| cg.mbarrier_wait(bar, p.phase), &mut |cg| {
                cg.fence_proxy_async()?;
                cg.bar_sync()
            })?;
            return Ok(true);
        }
        if p.plan.writes.first() != Some(&i) {
            return Ok(true);
        }
        if p.ws {
            return self.await_stage(&p).map(|()| true);
        }
        let (s, dist) = (p.plan.stages, p.plan.distance());
        let j = self.iteration_ahead(&p, dist)?;
        let live = self.live_iteration(&p.plan, p.lo, p.hi, j)?;
        let next = self.b.build_int_unsigned_rem(self.b.build_int_add(p.stage, self.i32(dist as i32), "")?, self.i32(s as i32), "pf.stage")?;
        self.if_then(live, &mut |cg| cg.issue(p.loop_inst, &p.plan, p.tma_ok, j, next, None))?;
        if let Some(ok) = p.tma_ok {
            // This iteration's stage: its mbarrier phase, or (copied by the threads) a barrier.
            let bar = self.tma_barrier(p.loop_inst, p.stage)?;
            self.if_else(ok, &mut |cg| cg.mbarrier_wait(bar, p.phase), &mut |cg| {
                cg.fence_proxy_async()?;
                cg.bar_sync()
            })?;
            if !self.has_thread_copies(p.loop_inst, &p.plan) {
                return Ok(true);
            }
            // The thread copies: this iteration's group is the oldest of the D + 1 in flight.
            self.call("llvm.nvvm.cp.async.commit.group", None, &[])?;
            self.call("llvm.nvvm.cp.async.wait.group", None, &[self.i32(dist as i32).into()])?;
            self.fence_proxy_async()?;
            self.bar_sync()?;
            return Ok(true);
        }
        self.call("llvm.nvvm.cp.async.commit.group", None, &[])?;
        // This iteration's group is the oldest of the D + 1 in flight.
        self.call("llvm.nvvm.cp.async.wait.group", None, &[self.i32(dist as i32).into()])?;
        // cp.async writes are generic-proxy writes that wgmma reads through the async proxy.
        self.fence_proxy_async()?;
        self.bar_sync()?;
        Ok(true)
    }

    /// The iteration at execution position `pos` of loop `lo..hi` in `plan`'s direction.
    pub(crate) fn iteration_at(&self, plan: &Pipeline, lo: IntValue<'ctx>, hi: IntValue<'ctx>, pos: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(if plan.reverse { self.b.build_int_sub(self.b.build_int_sub(hi, self.i32(1), "")?, pos, "pf.iter")? } else { self.b.build_int_add(lo, pos, "pf.iter")? })
    }

    /// The iteration `d` positions after the current one in execution order.
    fn iteration_ahead(&self, p: &ActivePipeline<'ctx>, d: u32) -> Result<IntValue<'ctx>, BackendError> {
        let d = self.i32(d as i32);
        Ok(if p.plan.reverse { self.b.build_int_sub(p.iv, d, "pf.iter")? } else { self.b.build_int_add(p.iv, d, "pf.iter")? })
    }

    /// Whether iteration `j` is one the loop runs (`lo <= j < hi`; only the far end can fail).
    fn live_iteration(&self, plan: &Pipeline, lo: IntValue<'ctx>, hi: IntValue<'ctx>, j: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(if plan.reverse { self.b.build_int_compare(IntPredicate::SGE, j, lo, "pf.live")? } else { self.b.build_int_compare(IntPredicate::SLT, j, hi, "pf.live")? })
    }

    /// Issues the pipelined tiles of iteration `j` into ring stage `stage` (no wait): TMA
    /// copies where `tma_ok` holds, complete element copies where it does not, `cp.async`
    /// groups in a loop without TMA.
    /// With `each`, just those writes, each against its own mbarrier (an early refill); the
    /// index slice is evaluated once for all of them.
    pub(crate) fn issue(&mut self, loop_inst: Inst, plan: &Pipeline, tma_ok: Option<IntValue<'ctx>>, j: IntValue<'ctx>, stage: IntValue<'ctx>, each: Option<&[usize]>) -> Result<(), BackendError> {
        let k = self.k;
        // Rebind the induction variable and re-evaluate the index slice at iteration j.
        let iv = k.insts[loop_inst].result;
        let mut saved: Vec<(crate::ir::Value, Option<BasicValueEnum<'ctx>>)> = vec![];
        if let Some(iv) = iv {
            saved.push((iv, self.scalars[iv]));
            self.scalars[iv] = Some(j.into());
        }
        for &si in &plan.slice {
            if let Some(r) = k.insts[si].result {
                saved.push((r, self.scalars[r]));
            }
            self.inst(si)?;
        }
        let writes: Vec<Inst> = match each {
            Some(ws) => ws.iter().map(|&w| plan.writes[w]).collect(),
            None => plan.writes.clone(),
        };
        let mut dsts = vec![];
        for &w in &writes {
            let Op::WriteVar(v, _) = k.insts[w].op else { return Err(BackendError::Invalid(format!("pipelined {w} is not a variable write"))) };
            dsts.push(self.stage_base(v, stage)?);
        }
        // In a TMA loop, the writes TMA cannot take are `cp.async` copies by the threads.
        let thread: Vec<bool> = writes.iter().map(|&w| self.tp.tma.thread_copy(loop_inst, w)).collect();
        // Copies by the threads: every write (`only_thread` false), or the thread copies alone.
        let copies = |cg: &mut Self, wait: bool, only_thread: bool| -> Result<(), BackendError> {
            for ((&w, &dst), _) in writes.iter().zip(&dsts).zip(&thread).filter(|(_, &t)| t || !only_thread) {
                let Op::WriteVar(v, x) = k.insts[w].op else { continue };
                cg.write_var_tile(v, x, dst, wait)?;
            }
            Ok(())
        };
        match tma_ok {
            Some(ok) => match each {
                Some(ws) => {
                    let mut issue = |cg: &mut Self| -> Result<(), BackendError> {
                        for (n, &w) in ws.iter().enumerate() {
                            if thread[n] {
                                continue;
                            }
                            let bar = cg.tma_barrier(loop_inst, cg.i32(w as i32))?;
                            cg.tma_issue(&writes[n..=n], &dsts[n..=n], bar, true)?;
                        }
                        if thread.contains(&true) {
                            copies(cg, false, true)?;
                            cg.call("llvm.nvvm.cp.async.commit.group", None, &[])?;
                        }
                        Ok(())
                    };
                    self.if_else(ok, &mut issue, &mut |cg| copies(cg, true, false))?;
                }
                None => {
                    let bar = self.tma_barrier(loop_inst, stage)?;
                    let tma_writes: Vec<Inst> = writes.iter().zip(&thread).filter(|(_, &t)| !t).map(|(&w, _)| w).collect();
                    let tma_dsts: Vec<IntValue<'ctx>> = dsts.iter().zip(&thread).filter(|(_, &t)| !t).map(|(&d, _)| d).collect();
                    let mut issue = |cg: &mut Self| -> Result<(), BackendError> {
                        cg.tma_issue(&tma_writes, &tma_dsts, bar, false)?;
                        copies(cg, false, true)
                    };
                    self.if_else(ok, &mut issue, &mut |cg| copies(cg, true, false))?;
                }
            },
            None => copies(self, false, false)?,
        }
        for (v, old) in saved.into_iter().rev() {
            self.scalars[v] = old;
        }
        Ok(())
    }

    /// After instruction `i` of an early-refill loop's body: every write whose variable `i` read
    /// last is refilled with the next iteration's tile, once all threads are past the read.
    pub fn refill_after(&mut self, i: Inst) -> Result<(), BackendError> {
        if self.refills_after(i) {
            self.bar_sync()?;
            self.refill(i)?;
        }
        Ok(())
    }

    /// Whether instruction `i` reads a variable of the innermost early-refill loop last.
    pub fn refills_after(&self, i: Inst) -> bool {
        self.pipes.last().is_some_and(|p| p.early && p.plan.last_read.contains(&i))
    }

    /// Issues the refills after `i` ([`Codegen::refill_after`]), every thread being past its
    /// reads (a barrier, or for an MMA its wait and a barrier).
    pub fn refill(&mut self, i: Inst) -> Result<(), BackendError> {
        let Some(p) = self.pipes.last().filter(|p| p.early && p.plan.last_read.contains(&i)).cloned() else { return Ok(()) };
        let j = self.iteration_ahead(&p, 1)?;
        let live = self.live_iteration(&p.plan, p.lo, p.hi, j)?;
        let zero = self.i32(0);
        let ws: Vec<usize> = p.plan.last_read.iter().enumerate().filter(|(_, &l)| l == i).map(|(w, _)| w).collect();
        self.if_then(live, &mut |cg| cg.issue(p.loop_inst, &p.plan, p.tma_ok, j, zero, Some(&ws)))
    }

    /// Whether TMA loop `l` (plan `plan`) has writes the threads copy with `cp.async`.
    fn has_thread_copies(&self, l: Inst, plan: &Pipeline) -> bool {
        plan.writes.iter().any(|&w| self.tp.tma.thread_copy(l, w))
    }

    /// Absolute byte offset of stage `stage` of variable `v`'s ring.
    fn stage_base(&self, v: Var, stage: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        // A one-stage pipeline has no ring: its one buffer is stage 0.
        let (_, stride) = self.tp.smem.rings.get(v).copied().flatten().unwrap_or((1, 0));
        let off = self.b.build_int_mul(stage, self.i32(stride as i32), "")?;
        Ok(self.b.build_int_add(self.i32(self.var_buf(v)? as i32), off, "stage.base")?)
    }

    /// Byte offset of the current stage of `v` from its buffer, inside the pipelined loop that
    /// rings it (`None` elsewhere: the variable has one buffer).
    pub fn stage_offset(&self, v: Var) -> Result<Option<IntValue<'ctx>>, BackendError> {
        let Some(p) = self.pipes.iter().rev().find(|p| p.plan.vars.contains(&v)) else { return Ok(None) };
        let Some((_, stride)) = self.tp.smem.rings.get(v).copied().flatten() else { return Ok(None) };
        Ok(Some(self.b.build_int_mul(p.stage, self.i32(stride as i32), "stage.off")?))
    }
}
