//! `Mma` on `sm_90a` with `wgmma.mma_async` into a register-resident accumulator
//! ([`crate::passes::var_roles::VarRoles::accumulators`]; blackwell.md §6.1, H200-verified there).
//!
//! The accumulator's home is its fragment array: every thread keeps its registers of the wgmma
//! D fragments of its warpgroup's units ([`crate::layout::wgmma`]) for the whole kernel, loops
//! included, so a `for` loop of MMAs never touches its shared-memory buffer. That buffer is
//! where the rest of the kernel meets it: a `ReadVar` first writes the fragments back to it
//! ([`Codegen::fragments_to_smem`]), a `WriteVar` reloads them from it after the write. Two
//! cases skip it: a broadcast scalar is written straight into the registers
//! ([`Codegen::fragments_fill`]) and a read fused into an elementwise store or write is
//! evaluated where the fragments are ([`super::frag_eval`]). An accumulator only ever written
//! so has no buffer at all (`passes::var_roles::VarRoles::register_only`): its other reads get
//! the fragments written straight into their result tile ([`Codegen::fragments_to_tile`]).
//!
//! One MMA statement:
//! 1. A (`M x K`) and B (as `N x K`) are staged into the K-major SWIZZLE_NONE canonical layout
//!    (shared with tcgen05, [`super::super::staging`]); `fence.proxy.async` and `bar.sync`;
//! 2. `wgmma.fence`, then per unit (64 rows × a column piece) of the warpgroup one
//!    `wgmma.mma_async.m64nNk16` per K = 16 step (one asm statement for all of a unit's steps)
//!    with the fragment registers tied to its outputs
//!    (scale-d = 0 only on the first step of `=`; imm-scale-a = −1 for a negated product, so
//!    `-=` adds `(−a)·b` every step, the order [`crate::interp`] models);
//! 3. one `commit_group` and `wait_group 0` for all units, and a barrier — or `wait_group 1` in a
//!    software-pipelined loop whose MMA reads only pipelined stages: that MMA stays in flight
//!    while the next iteration issues its copies ([`crate::passes::pipeline`]), and whatever
//!    touches the registers next waits first ([`Codegen::settle_wgmma`]).
//!
//! `wgmma.mma_async` has no LLVM intrinsic: it is inline assembly (`convergent`), as in
//! `hopper_wgmma_noswz.ll`.

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, IntValue, PointerValue};
use inkwell::IntPredicate;

use crate::ir::{Elem, MmaOperand, Var};
use crate::layout::staging::{sbo_for, LBO};
use crate::layout::wgmma::{fragment_coords, Distribution, ROWS, WARPGROUP};
use crate::passes::smem_plan::ALIGN;

use super::super::descriptors::smem_desc_start;
use super::super::operand_desc::{check_range, OperandDesc};
use super::super::emit::Codegen;
use super::super::BackendError;

/// The body [`Codegen::for_each_unit`] runs per slot: `(codegen, slot, unit row origin, unit
/// column origin, thread in warpgroup)`.
pub(crate) type UnitBody<'b, 'ctx, C> = &'b mut dyn FnMut(&mut C, u32, IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>) -> Result<(), BackendError>;

impl<'ctx> Codegen<'ctx, '_> {
    /// The distribution of a register-resident accumulator, if `v` is one.
    pub fn accumulator(&self, v: Var) -> Option<Distribution> {
        self.tp.roles.accumulator(v)
    }

    /// Allocates (and zeroes) the fragment array of every register-resident accumulator.
    pub fn alloc_fragments(&mut self) -> Result<(), BackendError> {
        for v in self.k.vars.keys() {
            let Some(d) = self.accumulator(v) else { continue };
            let ty = self.ctx.f32_type().array_type(d.floats_per_thread());
            let p = self.entry_alloca(ty.into(), &format!("frag.{}", self.k.vars[v].name))?;
            self.b.build_store(p, ty.const_zero())?;
            self.fragments[v] = Some(p);
            // Every float's pointer once, right after the array: a pointer per use made a
            // third of a long kernel's instructions, all for SROA to fold away again.
            let at = self.ctx.create_builder();
            match p.as_instruction().and_then(|i| i.get_next_instruction()) {
                Some(next) => at.position_before(&next),
                None => at.position_at_end(self.func.get_first_basic_block().ok_or_else(|| BackendError::Invalid("kernel has no entry block".into()))?),
            }
            let slots = (0..d.floats_per_thread())
                // SAFETY of the GEP: a constant index below the array's length.
                .map(|i| unsafe { at.build_in_bounds_gep(ty, p, &[self.i32(0), self.i32(i as i32)], "fr") })
                .collect::<Result<Vec<_>, _>>()?;
            self.frag_slots.insert(p, slots);
        }
        Ok(())
    }

    pub(crate) fn fragment(&self, v: Var) -> Result<(PointerValue<'ctx>, Distribution), BackendError> {
        match (self.fragments.get(v).copied().flatten(), self.accumulator(v)) {
            (Some(p), Some(d)) => Ok((p, d)),
            _ => Err(BackendError::Invalid(format!("`{}` is not a register-resident accumulator", self.k.vars[v].name))),
        }
    }

    /// Pointer to float `idx` of a fragment array of `len` floats.
    pub(crate) fn frag_slot(&self, arr: PointerValue<'ctx>, len: u32, idx: u32) -> Result<PointerValue<'ctx>, BackendError> {
        self.frag_slots
            .get(&arr)
            .filter(|s| s.len() == len as usize)
            .and_then(|s| s.get(idx as usize).copied())
            .ok_or_else(|| BackendError::Invalid(format!("float {idx} of a fragment array of {len} floats")))
    }

    /// Runs `body(slot, unit row origin, unit column origin, thread in warpgroup)` for each slot
    /// of this thread's warpgroup, skipping (uniformly per warpgroup) a slot without a unit.
    pub(crate) fn for_each_unit(&mut self, d: Distribution, body: UnitBody<'_, 'ctx, Self>) -> Result<(), BackendError> {
        self.for_each_unit_in(d, false, body)
    }

    /// [`Self::for_each_unit`], with the warpgroup index broadcast from lane 0
    /// (`shfl.sync.idx`) when `uniform`: the value is the same, but ptxas then knows it is
    /// warp-uniform and may build what derives from it — the wgmma descriptors — in uniform
    /// registers, where otherwise each descriptor is computed per thread and moved over with
    /// two R2UR (k2_keys_channel: 76 R2UR → 2, 3,760 → 3,680 SASS instructions; ptxas keeps
    /// dqkwg_channel's per thread either way). Only where the whole warp is converged: the
    /// MMAs (`.sync.aligned`) require it.
    pub(crate) fn for_each_unit_in(&mut self, d: Distribution, uniform: bool, body: UnitBody<'_, 'ctx, Self>) -> Result<(), BackendError> {
        let tid = self.fragment_tid()?;
        let mut wg = self.b.build_right_shift(tid, self.i32(7), false, "wg")?;
        if uniform {
            wg = self.warp_uniform(wg)?;
        }
        let t = self.b.build_and(tid, self.i32((WARPGROUP - 1) as i32), "wgt")?;
        for s in 0..d.slots {
            let u = self.b.build_int_add(self.b.build_int_mul(self.i32(s as i32), self.i32(d.warpgroups as i32), "")?, wg, "unit")?;
            let (r0, c0) = d.unit_origin(&*self, u)?;
            if d.even() || s + 1 < d.slots {
                body(self, s, r0, c0, t)?;
            } else {
                let has = self.b.build_int_compare(IntPredicate::ULT, u, self.i32(d.units as i32), "has")?;
                self.if_then(has, &mut |cg| body(cg, s, r0, c0, t))?;
            }
        }
        Ok(())
    }

    /// The thread index that fragment-order code derives its coordinates and offsets from.
    ///
    /// The kernel's one `tid.x` read, except in a kernel built for a residency
    /// on sm_90a (`ctas_per_sm`): there it is read again for each fragment loop through inline
    /// assembly with side effects, which LLVM neither hoists out of a loop nor merges with
    /// another read. Otherwise LICM computes every fragment element's shared-memory and global
    /// offsets once, before the chunk loop, and keeps them all live through it: K#1 held ≥ 195
    /// registers everywhere in its loop, 48 of them accumulators (`nvdisasm
    /// --print-life-ranges`); with the offsets recomputed where they are used, ptxas fits it in
    /// 158 registers with no spill, where the same budget forced 372 B of spills before
    /// (docs/results.md). The value is the same, so the arithmetic is unchanged. Inside a short
    /// loop without matrix products (`Codegen::short_inner_loop`) the one read before that loop
    /// serves: the key-row loops' offsets are then computed once and stepped by a row stride
    /// (dqkwg_channel's step 141 → 134 SASS instructions, 128 → 126 registers).
    pub(crate) fn fragment_tid(&mut self) -> Result<IntValue<'ctx>, BackendError> {
        if self.k.residency(self.target).is_none() {
            return Ok(self.tid);
        }
        if let Some(t) = self.loop_tid {
            return Ok(t);
        }
        let fty = self.ctx.i32_type().fn_type(&[], false);
        let asm = self.ctx.create_inline_asm(fty, "mov.u32 $0, %tid.x;".into(), "=r".into(), true, false, None, false);
        let call = self.b.build_indirect_call(fty, asm, &[], "tid")?;
        // `memory(inaccessiblemem: readwrite)` (MemoryEffects: two bits per location, argmem
        // first): the side effect alone would count as touching all memory and keep loads and
        // stores from moving across the read; this way only the read itself stays put. (The
        // shipped K#1's PTX is the same either way.)
        let memory = Attribute::get_named_enum_kind_id("memory");
        call.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(memory, 3 << 2));
        call.try_as_basic_value().basic().map(|v| v.into_int_value()).ok_or_else(|| BackendError::Invalid("tid asm without a result".into()))
    }

    /// Writes the fragments of `v` back to its shared-memory buffer (row-major f32), between
    /// barriers (earlier readers of the buffer finish first; later ones see every element).
    pub fn fragments_to_smem(&mut self, v: Var) -> Result<(), BackendError> {
        let buf = self.var_buf(v)?;
        self.fragments_move(v, buf, true)
    }

    /// Reloads the fragments of `v` from its shared-memory buffer after a write to it.
    pub fn fragments_from_smem(&mut self, v: Var) -> Result<(), BackendError> {
        let buf = self.var_buf(v)?;
        self.fragments_move(v, buf, false)
    }

    /// Writes the fragments of `v` (an accumulator without a buffer) straight into the
    /// row-major f32 tile at byte `buf`: the result of a `ReadVar` of it.
    pub fn fragments_to_tile(&mut self, v: Var, buf: u32) -> Result<(), BackendError> {
        self.fragments_move(v, buf, true)
    }

    fn fragments_move(&mut self, v: Var, buf: u32, to_smem: bool) -> Result<(), BackendError> {
        self.settle_wgmma()?;
        self.expect_settled(v)?;
        let (arr, d) = self.fragment(v)?;
        let f32t = self.ctx.f32_type();
        let per_slot = d.piece_n / 2;
        let len = d.floats_per_thread();
        self.bar_sync()?;
        self.for_each_unit(d, &mut |cg, s, r0, c0, t| {
            for i in 0..per_slot {
                let (r, c) = fragment_coords(&*cg, t, i)?;
                let (r, c) = (cg.b.build_int_add(r0, r, "")?, cg.b.build_int_add(c0, c, "")?);
                let e = cg.b.build_int_add(cg.b.build_int_mul(r, cg.i32(d.n as i32), "")?, c, "")?;
                let off = cg.b.build_int_add(cg.i32(buf as i32), cg.b.build_int_mul(e, cg.i32(4), "")?, "")?;
                let p = cg.smem_at(off)?;
                let slot = cg.frag_slot(arr, len, s * per_slot + i)?;
                if to_smem {
                    let x = cg.b.build_load(f32t, slot, "")?;
                    cg.b.build_store(p, x)?;
                } else {
                    let x = cg.b.build_load(f32t, p, "")?;
                    cg.b.build_store(slot, x)?;
                }
            }
            Ok(())
        })?;
        if to_smem {
            self.bar_sync()?;
        }
        Ok(())
    }

    /// `WriteVar` of a broadcast scalar (`zeros`, `full`) into a register accumulator: every
    /// fragment register takes the value; the shared-memory buffer is not involved.
    pub fn fragments_fill(&mut self, v: Var, x: crate::ir::Value) -> Result<(), BackendError> {
        self.settle_wgmma()?;
        self.expect_settled(v)?;
        let (arr, d) = self.fragment(v)?;
        let z = self.i32(0);
        let y = self.operand(x, z, z)?;
        let y = self.convert(y, self.res_elem(x), Elem::F32)?;
        let len = d.floats_per_thread();
        for i in 0..len {
            let slot = self.frag_slot(arr, len, i)?;
            self.b.build_store(slot, y)?;
        }
        Ok(())
    }

    /// Emits `dst (+|-)= a @ b` or `dst = (-)a @ b` into a register-resident accumulator (see
    /// the module docs).
    pub fn mma_wgmma(&mut self, i: crate::ir::Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        let (m, n, kdim, elem) = self.mma_shape(dst, a, b)?;
        let (arr, d) = self.fragment(dst)?;
        // An MMA whose operands are all pipelined stages may stay in flight; any other waits
        // for the ones before it (its staging may reuse their scratch).
        let overlap = self.mma_may_overlap(a.var, b.var);
        if !overlap {
            self.settle_wgmma()?;
        }
        if (d.m, d.n) != (m, n) {
            return Err(BackendError::Invalid(format!("accumulator distribution {}x{} for an MMA of {m}x{n}", d.m, d.n)));
        }
        // 1. Each operand is read in place (a core-matrix tile) or staged K-major into this
        //    MMA's scratch (A first, then B, as the shared-memory plan sized it); the staged
        //    copies are made visible to the async proxy.
        let scratch = if self.tp.smem.scratch[i].is_some() { Some(self.scratch_buf(i)?) } else { None };
        let mut next = scratch;
        let mut place = |cg: &mut Self, op: MmaOperand, is_b: bool, rows: u32| -> Result<OperandDesc<'ctx>, BackendError> {
            if let Some(d) = cg.tiled_operand(op, is_b)? {
                return Ok(d);
            }
            let at = next.ok_or_else(|| BackendError::Invalid("a staged wgmma operand without scratch".into()))?;
            next = Some(at + (rows * kdim * 2).next_multiple_of(ALIGN));
            let src = cg.var_buf(op.var)?;
            cg.stage_kmajor(op, src, is_b, at, rows, kdim)?;
            smem_desc_start(at)?;
            check_range(cg, at + rows * kdim * 2)?;
            Ok(OperandDesc { base: cg.i32(at as i32), lbo: LBO, sbo: sbo_for(kdim), transposed: false, swizzle: None })
        };
        let da = place(self, a, false, m)?;
        let db = place(self, b, true, n)?;
        // Tiles of the innermost pipelined loop were made visible when this iteration waited
        // for them (mbarrier phase, or proxy fence and barrier); anything staged here was not.
        let pipelined = self.pipes.last().is_some_and(|p| p.plan.vars.contains(&a.var) && p.plan.vars.contains(&b.var));
        if !pipelined && !self.tp.barriers.chained(i) {
            self.fence_proxy_async()?;
            self.bar_sync()?;
        }
        // 2. Each warpgroup runs its units.
        let (hi_a, hi_b) = (da.fields()?, db.fields()?);
        let smem_addr = self.b.build_ptr_to_int(self.smem, self.ctx.i32_type(), "smem.addr")?;
        let per_slot = d.piece_n / 2;
        let len = d.floats_per_thread();
        let asm = self.wgmma_asm(d.piece_n, elem, negate, da.transposed, db.transposed, kdim / 16)?;
        // All units' wgmmas go out back to back (their accumulators are distinct registers),
        // then one commit and one wait: the tensor core never idles between units.
        self.call("llvm.nvvm.wgmma.fence.sync.aligned", None, &[])?;
        self.for_each_unit_in(d, true, &mut |cg, s, r0, c0, _t| {
            // The unit's rows r0.. of A and columns c0.. of B ([`OperandDesc::origin`]); a K = 16
            // step is two K-adjacent core matrices, 2·LBO, or 32 bytes inside a swizzled panel.
            let a_base = cg.b.build_int_add(da.base, da.origin(&*cg, r0)?, "")?;
            let b_base = cg.b.build_int_add(db.base, db.origin(&*cg, c0)?, "")?;
            let mut acc: Vec<BasicMetadataValueEnum<'ctx>> = vec![];
            for r in 0..per_slot {
                let slot = cg.frag_slot(arr, len, s * per_slot + r)?;
                acc.push(cg.b.build_load(cg.ctx.f32_type(), slot, "")?.into());
            }
            // All K = 16 steps of the unit in one asm statement: the accumulator registers
            // are passed in and out once per MMA instead of once per step (a fourth of the
            // LLVM IR at K = 64, which is what long programs' build time is made of).
            // The start-address field of the unit's first step, masked once; a later step adds
            // its offset in 16-byte units to it, which cannot carry out of the field (the operand
            // ends inside the descriptor's range: `check_range`).
            let (a_start, b_start) = (cg.desc_start(smem_addr, a_base)?, cg.desc_start(smem_addr, b_base)?);
            let mut args: Vec<BasicMetadataValueEnum<'ctx>> = vec![];
            for ks in 0..kdim / 16 {
                args.push(cg.descriptor(a_start, da.k_step_bytes(ks), hi_a)?.into());
                args.push(cg.descriptor(b_start, db.k_step_bytes(ks), hi_b)?.into());
            }
            args.push(cg.i32(i32::from(accumulate)).into());
            args.extend(acc.iter().copied());
            let call = cg.b.build_indirect_call(asm.0, asm.1, &args, "wgmma")?;
            let convergent = Attribute::get_named_enum_kind_id("convergent");
            call.add_attribute(AttributeLoc::Function, cg.ctx.create_enum_attribute(convergent, 0));
            let out = call.try_as_basic_value().basic().ok_or_else(|| BackendError::Invalid("wgmma asm without results".into()))?.into_struct_value();
            acc = (0..per_slot).map(|r| cg.b.build_extract_value(out, r, "d").map(Into::into)).collect::<Result<_, _>>()?;
            for (r, x) in acc.iter().enumerate() {
                let slot = cg.frag_slot(arr, len, s * per_slot + r as u32)?;
                let x: inkwell::values::BasicValueEnum = (*x).try_into().map_err(|_| BackendError::Invalid("wgmma result is not a value".into()))?;
                cg.b.build_store(slot, x)?;
            }
            Ok(())
        })?;
        self.call("llvm.nvvm.wgmma.commit_group.sync.aligned", None, &[])?;
        if self.tp.barriers.deferred(i) {
            // Left in flight: the barrier pass placed its wait before what depends on it.
            self.inflight.push((i, dst));
            return Ok(());
        }
        // In flight: only this MMA may remain (the previous one, whose stage the next issue
        // overwrites, is complete); otherwise all complete.
        self.call("llvm.nvvm.wgmma.wait_group.sync.aligned", None, &[self.ctx.i64_type().const_int(u64::from(overlap), false).into()])?;
        self.wgmma_pending = overlap;
        if pipelined && self.pipes.last().is_some_and(|p| p.ws) {
            // A warp-specialised loop's stages are rewritten by the producer only after every
            // consumer warp handed them back, each after its own `wait_group`
            // ([`Codegen::release_stage`]), and the iteration writes no other shared memory.
            return Ok(());
        }
        // Later writers of the operands' buffers and of the staging scratch wait for the MMAs
        // (they read shared memory asynchronously until `wait_group`) — in every warp: the PTX
        // ISA defines `wait_group`'s completion for the executing thread's groups, and the
        // pipelines that release a stage after one thread's wait (FlashAttention-3's) sync the
        // whole warpgroup first. (Tried without it for one-warpgroup CTAs; reverted on review.)
        self.bar_sync()
    }

    /// `wgmma.wait_group n` for the MMAs left in flight ([`Codegen::inflight`]): all but the
    /// newest `n` complete. Their accumulators' registers pass through the wait (inline-asm
    /// operands tied in and out, as Triton's wait does), so no use of them is scheduled above
    /// it. Then a barrier when `barrier` asks (a write to bytes they read follows) or one of
    /// them reads a one-stage ring last: its refill overwrites what every warp's wgmmas read.
    pub fn await_mmas(&mut self, n: u32, barrier: bool) -> Result<(), BackendError> {
        let keep = (n as usize).min(self.inflight.len());
        let done: Vec<(crate::ir::Inst, Var)> = self.inflight.drain(..self.inflight.len() - keep).collect();
        let mut vars: Vec<Var> = done.iter().map(|d| d.1).collect();
        vars.sort();
        vars.dedup();
        self.wait_group_tied(n, &vars)?;
        let refills: Vec<crate::ir::Inst> = done.iter().map(|d| d.0).filter(|&i| self.refills_after(i)).collect();
        if barrier || !refills.is_empty() {
            self.bar_sync()?;
        }
        for i in refills {
            self.refill(i)?;
        }
        Ok(())
    }

    /// `wgmma.wait_group n` as inline assembly whose operands are the fragment registers of
    /// `vars`, tied: the values read after it are its results.
    fn wait_group_tied(&mut self, n: u32, vars: &[Var]) -> Result<(), BackendError> {
        let mut slots = vec![];
        for &v in vars {
            let (arr, d) = self.fragment(v)?;
            let len = d.floats_per_thread();
            for idx in 0..len {
                slots.push(self.frag_slot(arr, len, idx)?);
            }
        }
        if slots.is_empty() {
            self.call("llvm.nvvm.wgmma.wait_group.sync.aligned", None, &[self.ctx.i64_type().const_int(u64::from(n), false).into()])?;
            return Ok(());
        }
        let f32t = self.ctx.f32_type();
        let nf = slots.len();
        let mut cons: Vec<String> = vec!["=f".into(); nf];
        cons.extend((0..nf).map(|r| r.to_string()));
        cons.push("~{memory}".into());
        let ret = self.ctx.struct_type(&vec![BasicTypeEnum::from(f32t); nf], false);
        let params: Vec<inkwell::types::BasicMetadataTypeEnum> = (0..nf).map(|_| f32t.into()).collect();
        let fty = ret.fn_type(&params, false);
        let asm = self.ctx.create_inline_asm(fty, format!("wgmma.wait_group.sync.aligned {n};"), cons.join(","), true, false, None, false);
        let mut args: Vec<BasicMetadataValueEnum<'ctx>> = vec![];
        for &p in &slots {
            args.push(self.b.build_load(f32t, p, "")?.into());
        }
        let call = self.b.build_indirect_call(fty, asm, &args, "wait")?;
        let convergent = Attribute::get_named_enum_kind_id("convergent");
        call.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(convergent, 0));
        let out = call.try_as_basic_value().basic().ok_or_else(|| BackendError::Invalid("wgmma wait asm without results".into()))?.into_struct_value();
        for (r, &p) in slots.iter().enumerate() {
            let x = self.b.build_extract_value(out, r as u32, "")?;
            self.b.build_store(p, x)?;
        }
        Ok(())
    }

    /// An internal check: the registers of `v` are not touched while an MMA into them is in
    /// flight (the barrier pass places the wait before).
    pub(crate) fn expect_settled(&self, v: Var) -> Result<(), BackendError> {
        if self.inflight.iter().any(|x| x.1 == v) {
            return Err(BackendError::Invalid(format!("`{}`'s registers touched while an MMA into it is in flight", self.k.vars[v].name)));
        }
        Ok(())
    }

    /// The inline assembly of `steps` consecutive `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.
    /// {ab}.{ab}` (the K = 16 steps of one unit) on `n/2` tied f32 accumulators, inputs
    /// `(a_desc_0: i64, b_desc_0: i64, …, scale_d: i32, d...)` where `scale_d` applies to the
    /// first step only; `trans_a`/`trans_b` are the MN-major immediates (bf16/f16 only).
    fn wgmma_asm(&self, n: u32, elem: Elem, negate: bool, trans_a: bool, trans_b: bool, steps: u32) -> Result<(inkwell::types::FunctionType<'ctx>, PointerValue<'ctx>), BackendError> {
        let ab = match elem {
            Elem::Bf16 => "bf16",
            Elem::F16 => "f16",
            other => return Err(self.unsupported(format!("wgmma operands of {other}"))),
        };
        if n % 8 != 0 || n == 0 || n > 256 || ROWS != 64 || steps == 0 {
            return Err(BackendError::Invalid(format!("wgmma m64n{n}k16 x {steps}: N must be a multiple of 8 in 8..=256")));
        }
        let nf = n / 2;
        let outs: Vec<String> = (0..nf).map(|r| format!("${r}")).collect();
        let scale_a = if negate { -1 } else { 1 };
        // Operands: $0.. the accumulators (tied), then an (A, B) descriptor pair per step, then
        // scale-d of the first step (0: overwrite); later steps always accumulate (q is true:
        // the flag is 0 or 1, never 2).
        let flag = nf + 2 * steps;
        let mut text = format!("{{\n.reg .pred p, q;\nsetp.ne.b32 p, ${flag}, 0;\nsetp.ne.b32 q, ${flag}, 2;\n");
        for ks in 0..steps {
            let pred = if ks == 0 { "p" } else { "q" };
            text += &format!(
                "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{}}}, ${}, ${}, {pred}, {scale_a}, 1, {}, {};\n",
                outs.join(", "),
                nf + 2 * ks,
                nf + 2 * ks + 1,
                u8::from(trans_a),
                u8::from(trans_b)
            );
        }
        text += "}";
        let mut cons: Vec<String> = vec!["=f".into(); nf as usize];
        cons.extend((0..2 * steps).map(|_| "l".to_string()));
        cons.push("r".into());
        cons.extend((0..nf).map(|r| r.to_string()));
        cons.push("~{memory}".into());
        let f32t = self.ctx.f32_type();
        let ret = self.ctx.struct_type(&vec![BasicTypeEnum::from(f32t); nf as usize], false);
        let mut params: Vec<inkwell::types::BasicMetadataTypeEnum> = (0..2 * steps).map(|_| self.ctx.i64_type().into()).collect();
        params.push(self.ctx.i32_type().into());
        params.extend((0..nf).map(|_| inkwell::types::BasicMetadataTypeEnum::from(f32t)));
        let fty = ret.fn_type(&params, false);
        let ptr = self.ctx.create_inline_asm(fty, text, cons.join(","), true, false, None, false);
        Ok((fty, ptr))
    }
}
