//! The code generator's core: the kernel signature, the instruction walk, loops, shared-memory
//! buffer addressing and value conversions. Op families are `impl Codegen` blocks in sibling
//! files.
//!
//! Register representation of scalars ("compute types"): `bool` → `i1`, `i32` → `i32`, and every
//! float type → `f32` (bf16/f16 arithmetic is done in f32; a bf16/f16 scalar result is rounded to
//! its type and kept widened). Shared-memory buffers hold the element type's storage form
//! (`bool` as one byte).

use cranelift_entity::SecondaryMap;
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use crate::ir::{Elem, Inst, Kernel, Op, Param, ParamKind, SizeExpr, SizeOp, Type, Value};
use crate::layout::IndexArith;
use crate::passes::target_plan::TargetPlan;

use super::lowering::Lowering;
use super::{BackendError, Target, TmemLayout};

/// LLVM's `ptx_kernel` calling convention number (`CallingConv::PTX_Kernel`).
const PTX_KERNEL_CC: u32 = 71;
/// Most iterations of a loop whose fragment loops share one thread-index read before it
/// (`Codegen::short_inner_loop`).
const SHORT_LOOP: i64 = 16;

/// Per-kernel code-generation state.
pub(crate) struct Codegen<'ctx, 'k> {
    /// LLVM context.
    pub ctx: &'ctx Context,
    /// The module being built.
    pub module: Module<'ctx>,
    /// The instruction builder.
    pub b: Builder<'ctx>,
    /// The kernel.
    pub k: &'k Kernel,
    /// Target.
    pub target: Target,
    /// The target's lowering of MMAs and tensor memory.
    pub(crate) lowering: &'static dyn Lowering,
    /// TMEM column offsets.
    pub tmem: &'k TmemLayout,
    /// The per-target plans: fusion, shared-memory offsets, barriers.
    pub tp: &'k TargetPlan,
    /// Bytes before the planned region.
    pub header: u32,
    /// The kernel function.
    pub func: FunctionValue<'ctx>,
    /// Base of the dynamic shared memory (`extern .shared` array).
    pub smem: PointerValue<'ctx>,
    /// Scalar values (compute types).
    pub scalars: SecondaryMap<Value, Option<BasicValueEnum<'ctx>>>,
    /// Kernel parameters (tensors as global pointers, scalars in compute type).
    pub params: SecondaryMap<Param, Option<BasicValueEnum<'ctx>>>,
    /// Symbolic sizes, in `Kernel::sizes` order (i32).
    pub sizes: Vec<IntValue<'ctx>>,
    /// Per tensor parameter: extents (i64), outermost first.
    pub dims: SecondaryMap<Param, Vec<IntValue<'ctx>>>,
    /// Per tensor parameter: element strides (i64), row-major.
    pub strides: SecondaryMap<Param, Vec<IntValue<'ctx>>>,
    /// `threadIdx.x`.
    pub tid: IntValue<'ctx>,
    /// The thread index read once before the short loop being emitted, for its fragment loops
    /// (`Codegen::fragment_tid`); `None` outside such a loop.
    pub(crate) loop_tid: Option<IntValue<'ctx>>,
    /// `threadIdx.x / 32`.
    pub warp: IntValue<'ctx>,
    /// TMEM base address, after the allocation.
    pub tmem_base: Option<IntValue<'ctx>>,
    /// Local slot holding the MMA mbarrier's current phase (promoted to a register by mem2reg).
    pub mma_phase: Option<PointerValue<'ctx>>,
    /// Register-resident accumulators: each one's fragment array (a stack array with constant
    /// indices, which SROA turns into registers; `sm90::wgmma`).
    pub fragments: SecondaryMap<crate::ir::Var, Option<PointerValue<'ctx>>>,
    /// Per fragment array, a pointer to each of its floats, built once in the entry block
    /// ([`Codegen::frag_slot`]).
    pub(crate) frag_slots: std::collections::HashMap<PointerValue<'ctx>, Vec<PointerValue<'ctx>>>,
    /// The software-pipelined loops being emitted, innermost last ([`super::pipeline`]).
    pub(crate) pipes: Vec<super::pipeline::ActivePipeline<'ctx>>,
    /// Whether a wgmma group may still be in flight here (an MMA of a pipelined loop left
    /// running; [`Codegen::settle_wgmma`] waits for it).
    pub wgmma_pending: bool,
    /// MMAs committed and left in flight ([`crate::passes::barriers::Barriers::deferred`]), in
    /// issue order: each one's instruction and accumulator.
    pub inflight: Vec<(Inst, crate::ir::Var)>,
    /// The tensor-map parameters, in [`crate::passes::tma::TmaPlan::maps`] order.
    pub tmaps: Vec<PointerValue<'ctx>>,
    /// While a root is evaluated in an accumulator's fragment order: that accumulator's
    /// distribution and the index of the element at hand among each thread's fragment registers
    /// ([`super::sm90::frag_eval`]); every accumulator of that distribution is read there.
    pub frag_ctx: Option<(crate::layout::wgmma::Distribution, u32)>,
    /// After a warp-specialised loop's role split ([`super::warp_spec`]): the consumer threads,
    /// whose CTA barriers are then `bar.sync 1, n`.
    pub ws_consumers: Option<u32>,
    /// While the producer's elected thread issues TMA copies: no thread-0 guard around them.
    pub elected_issuer: bool,
}

impl<'ctx, 'k> Codegen<'ctx, 'k> {
    /// Sets up the module, the kernel signature and the entry block.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] for parameter types without a PTX form.
    pub(crate) fn new(ctx: &'ctx Context, k: &'k Kernel, tmem: &'k TmemLayout, tp: &'k TargetPlan, lowering: &'static dyn Lowering) -> Result<Self, BackendError> {
        let target = tp.target;
        let module = ctx.create_module(&k.name);
        let b = ctx.create_builder();
        let mut arg_tys: Vec<BasicMetadataTypeEnum> = vec![];
        for (_, p) in k.params.iter() {
            arg_tys.push(match &p.kind {
                ParamKind::Tensor { .. } => ctx.ptr_type(AddressSpace::from(1u16)).into(),
                ParamKind::Scalar(e) => match e {
                    Elem::I32 => ctx.i32_type().into(),
                    Elem::F32 => ctx.f32_type().into(),
                    Elem::F16 => ctx.f16_type().into(),
                    Elem::Bf16 => ctx.bf16_type().into(),
                    Elem::Bool => {
                        return Err(BackendError::Unsupported { target: target.name().into(), what: format!("bool scalar parameter `{}`", p.name) })
                    }
                },
            });
        }
        for _ in &k.sizes {
            arg_tys.push(ctx.i32_type().into());
        }
        let first_map = arg_tys.len();
        for _ in &tp.tma.maps {
            arg_tys.push(ctx.ptr_type(AddressSpace::default()).into());
        }
        let fty = ctx.void_type().fn_type(&arg_tys, false);
        let func = module.add_function(&k.name, fty, Some(Linkage::External));
        func.set_call_conventions(PTX_KERNEL_CC);
        let attr = |name: &str, value: u32| ctx.create_string_attribute(name, &value.to_string());
        if let Some((n, _)) = k.residency(target) {
            // `.maxntid threads` and `.minnctapersm N` (PTX ISA, "Performance-Tuning
            // Directives"): ptxas fits the registers of N resident CTAs.
            func.add_attribute(inkwell::attributes::AttributeLoc::Function, attr("nvvm.maxntid", k.threads));
            func.add_attribute(inkwell::attributes::AttributeLoc::Function, attr("nvvm.minctasm", n));
        }
        if let Some(ws) = tp.warp_spec {
            // The launch's threads (the producer warpgroup too) and the register cap at entry
            // that `setmaxnreg` needs before it acts (else ptxas ignores it: C7508).
            func.add_attribute(inkwell::attributes::AttributeLoc::Function, attr("nvvm.maxntid", ws.launch_threads()));
            func.add_attribute(inkwell::attributes::AttributeLoc::Function, attr("nvvm.maxnreg", ws.entry_registers));
        }
        super::tma::mark_tensor_map_params(ctx, func, first_map as u32, tp.tma.maps.len());
        let smem_g = module.add_global(ctx.i8_type().array_type(0), Some(AddressSpace::from(3u16)), "tilec_smem");
        smem_g.set_linkage(Linkage::External);
        smem_g.set_alignment(1024);
        let entry = ctx.append_basic_block(func, "entry");
        b.position_at_end(entry);
        let mut cg = Codegen {
            ctx,
            module,
            b,
            k,
            target,
            lowering,
            tmem,
            tp,
            header: tp.header_bytes,
            func,
            smem: smem_g.as_pointer_value(),
            scalars: SecondaryMap::new(),
            params: SecondaryMap::new(),
            sizes: vec![],
            dims: SecondaryMap::new(),
            strides: SecondaryMap::new(),
            tid: ctx.i32_type().const_zero(),
            loop_tid: None,
            warp: ctx.i32_type().const_zero(),
            tmem_base: None,
            mma_phase: None,
            fragments: SecondaryMap::new(),
            frag_slots: std::collections::HashMap::new(),
            pipes: vec![],
            wgmma_pending: false,
            inflight: vec![],
            frag_ctx: None,
            ws_consumers: None,
            elected_issuer: false,
            tmaps: (0..tp.tma.maps.len()).filter_map(|j| func.get_nth_param((first_map + j) as u32).map(|p| p.into_pointer_value())).collect(),
        };
        cg.prologue()?;
        Ok(cg)
    }

    /// Reads thread ids, binds parameters and sizes, and evaluates tensor extents and strides.
    fn prologue(&mut self) -> Result<(), BackendError> {
        let i32t = self.ctx.i32_type();
        self.tid = self.call("llvm.nvvm.read.ptx.sreg.tid.x", Some(i32t.into()), &[])?.into_int_value();
        self.warp = self.b.build_right_shift(self.tid, self.i32(5), false, "warp")?;
        let nparams = self.k.params.len();
        for (idx, (p, data)) in self.k.params.iter().enumerate() {
            let arg = self.func.get_nth_param(idx as u32).ok_or_else(|| BackendError::Invalid("missing kernel argument".into()))?;
            let v = match &data.kind {
                ParamKind::Scalar(e) if matches!(e, Elem::F16 | Elem::Bf16) => self.b.build_float_ext(arg.into_float_value(), self.ctx.f32_type(), "p")?.into(),
                _ => arg,
            };
            self.params[p] = Some(v);
        }
        for s in 0..self.k.sizes.len() {
            let arg = self.func.get_nth_param((nparams + s) as u32).ok_or_else(|| BackendError::Invalid("missing size argument".into()))?;
            self.sizes.push(arg.into_int_value());
        }
        let i64t = self.ctx.i64_type();
        for (p, data) in self.k.params.iter() {
            if let ParamKind::Tensor { shape, .. } = &data.kind {
                let mut dims = vec![];
                for e in shape {
                    dims.push(self.size_expr_i64(e)?);
                }
                let mut strides = vec![i64t.const_int(1, false); dims.len()];
                for d in (0..dims.len().saturating_sub(1)).rev() {
                    strides[d] = self.b.build_int_mul(strides[d + 1], dims[d + 1], "stride")?;
                }
                self.dims[p] = dims;
                self.strides[p] = strides;
            }
        }
        let l = self.lowering;
        l.prologue(self)
    }

    /// Emits the kernel body and returns the module and the dynamic shared memory in bytes.
    ///
    /// # Errors
    /// Whatever an instruction's emitter reports.
    pub fn run(mut self) -> Result<(Module<'ctx>, u32), BackendError> {
        let body = self.k.body;
        self.block(body)?;
        self.b.build_return(None)?;
        let bytes = self.tp.smem_bytes();
        Ok((self.module, bytes))
    }

    /// Emits the instructions of a block in order.
    pub fn block(&mut self, blk: crate::ir::Block) -> Result<(), BackendError> {
        for &i in &self.k.blocks[blk].insts {
            if self.k.insts[i].result.is_some_and(|r| self.tp.fusion.is_fused(r)) {
                continue; // evaluated inside its consumer
            }
            let span = self.k.inst_spans.get(i).copied().unwrap_or(self.k.span);
            let barrier = self.tp.barriers.before(i);
            match self.tp.barriers.wait_before(i) {
                Some(n) => self.await_mmas(n, barrier).map_err(|e| e.at(i, span))?,
                None if barrier => self.bar_sync()?,
                None => {}
            }
            // Accesses that may not pass a tensor's edge, tested here for a pipelined load too.
            self.check_edges(i).map_err(|e| e.at(i, span))?;
            // A pipelined write was issued ahead; its place in the body waits for it.
            if !self.pipelined_write(i).map_err(|e| e.at(i, span))? {
                self.inst(i).map_err(|e| e.at(i, span))?;
            }
            if !self.tp.barriers.deferred(i) {
                self.refill_after(i).map_err(|e| e.at(i, span))?;
            }
        }
        if self.tp.barriers.settles_at_end(blk) {
            self.await_mmas(0, true)?;
        }
        if !self.inflight.is_empty() {
            return Err(BackendError::Invalid(format!("{} MMA(s) left in flight at the end of {blk}", self.inflight.len())));
        }
        Ok(())
    }

    /// Dispatches one instruction to its family's emitter.
    pub(crate) fn inst(&mut self, i: Inst) -> Result<(), BackendError> {
        let k = self.k;
        self.check_views(i)?;
        let res = k.insts[i].result;
        match &k.insts[i].op {
            Op::ConstInt(c) => self.set(res, self.i32(*c as i32).into()),
            Op::ConstFloat(c) => self.set(res, self.ctx.f32_type().const_float(*c as f32 as f64).into()),
            Op::ProgramId(axis) => {
                let name = match axis {
                    0 => "llvm.nvvm.read.ptx.sreg.ctaid.x",
                    1 => "llvm.nvvm.read.ptx.sreg.ctaid.y",
                    _ => "llvm.nvvm.read.ptx.sreg.ctaid.z",
                };
                let v = self.call(name, Some(self.ctx.i32_type().into()), &[])?;
                self.set(res, v)
            }
            Op::Size(s) => {
                let v = *self.sizes.get(s.as_u32() as usize).ok_or_else(|| BackendError::Invalid(format!("{s} out of range")))?;
                self.set(res, v.into())
            }
            Op::ScalarParam(p) => {
                let v = self.params[*p].ok_or_else(|| BackendError::Invalid(format!("parameter {p} is not a scalar")))?;
                self.set(res, v)
            }
            // Per-element operations (`Op::is_elementwise`, an exhaustive list in the IR).
            op if op.is_elementwise() => self.elementwise(i),
            Op::Scan { src, reverse } => self.scan(i, *src, *reverse),
            Op::Reduce(..) if self.tp.fusion.frag_root(i).is_some() => {
                let v = self.tp.fusion.frag_root(i).ok_or_else(|| BackendError::Invalid("fragment root".into()))?;
                self.fragment_reduce_rows(i, v)
            }
            Op::Reduce(op, axis, v) => self.reduce(i, *op, *axis, *v),
            Op::Load { src, index } => self.load(i, *src, index),
            Op::Store { .. } | Op::WriteVar(..) if self.tp.fusion.frag_root(i).is_some() => {
                let v = self.tp.fusion.frag_root(i).ok_or_else(|| BackendError::Invalid("fragment root".into()))?;
                self.fragment_root(i, v)
            }
            Op::Store { dst, index, value, mask } => self.store(*dst, index, *value, *mask),
            Op::ReadVar(v) => self.read_var(i, *v),
            Op::WriteVar(v, x) => self.write_var(*v, *x),
            Op::Mma { dst, a, b, accumulate, negate } => {
                let l = self.lowering;
                l.mma(self, i, *dst, *a, *b, *accumulate, *negate)
            }
            Op::For { lo, hi, reverse, body } => self.for_loop(i, *lo, *hi, *reverse, *body),
            Op::TmemAlloc { columns } => {
                let l = self.lowering;
                l.tmem_alloc(self, *columns)
            }
            Op::TmemRelinquish => {
                let l = self.lowering;
                l.tmem_relinquish(self)
            }
            Op::TmemDealloc { columns } => {
                let l = self.lowering;
                l.tmem_dealloc(self, *columns)
            }
            other => Err(BackendError::Invalid(format!("{other:?} has no emitter"))),
        }
    }

    fn set(&mut self, res: Option<Value>, v: BasicValueEnum<'ctx>) -> Result<(), BackendError> {
        let r = res.ok_or_else(|| BackendError::Invalid("instruction without a result".into()))?;
        self.scalars[r] = Some(v);
        Ok(())
    }

    /// A scalar value's register.
    pub fn scalar(&self, v: Value) -> Result<BasicValueEnum<'ctx>, BackendError> {
        self.scalars[v].ok_or_else(|| BackendError::Invalid(format!("scalar {v} used before its definition")))
    }

    /// `for iv in lo..hi` (or reversed): a counted loop whose induction value is a phi.
    fn for_loop(&mut self, i: Inst, lo: Value, hi: Value, reverse: bool, body: crate::ir::Block) -> Result<(), BackendError> {
        let lo = self.scalar(lo)?.into_int_value();
        let hi = self.scalar(hi)?.into_int_value();
        if self.tp.pipelines.get(i).is_some_and(Option::is_some) {
            return self.pipelined_loop(i, lo, hi, body);
        }
        // The body may run zero times: nothing in flight may cross into it unwaited.
        self.settle_wgmma()?;
        let one = self.i32(1);
        let init = if reverse { self.b.build_int_sub(hi, one, "init")? } else { lo };
        let iv = self.k.insts[i].result;
        // (A short loop holds no loop, so `outer` is always `None`; restored all the same.)
        let outer = self.loop_tid;
        if self.short_inner_loop(i, body) {
            self.loop_tid = Some(self.fragment_tid()?);
        }
        let r = self.counted_loop(lo, hi, init, reverse, &mut |cg, x| {
            if let Some(iv) = iv {
                cg.scalars[iv] = Some(x.into());
            }
            cg.block(body)
        });
        self.loop_tid = outer;
        r
    }

    /// Whether loop `i` (body `body`) is an innermost loop of at most [`SHORT_LOOP`] iterations
    /// by constant bounds, without matrix products: its fragment loops then share one
    /// thread-index read before it, so that LLVM computes their per-element offsets once,
    /// outside it, and each step adds its row stride. (The key-row loops of dqkwg_channel and k2_keys_channel recomputed every
    /// element's offset from the thread index at each of their 15 steps.)
    fn short_inner_loop(&self, i: Inst, body: crate::ir::Block) -> bool {
        let Op::For { lo, hi, .. } = self.k.insts[i].op else { return false };
        let konst = |v| crate::passes::pipeline::const_int(self.k, v);
        let trips = match (konst(lo), konst(hi)) {
            (Some(a), Some(b)) => b - a,
            _ => return false,
        };
        // Not a loop of matrix products: their fragments and descriptors are live across it
        // already (solve_tril's four-step Newton loop spilled 152 B with its offsets hoisted,
        // 32 B without).
        trips <= SHORT_LOOP && !self.k.blocks[body].insts.iter().any(|&j| matches!(self.k.insts[j].op, Op::For { .. } | Op::Mma { .. }))
    }

    /// A stack slot in the entry block (so that mem2reg promotes it to a register).
    pub fn entry_alloca(&self, ty: BasicTypeEnum<'ctx>, name: &str) -> Result<PointerValue<'ctx>, BackendError> {
        let entry = self.func.get_first_basic_block().ok_or_else(|| BackendError::Invalid("kernel has no entry block".into()))?;
        let tmp = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(first) => tmp.position_before(&first),
            None => tmp.position_at_end(entry),
        }
        Ok(tmp.build_alloca(ty, name)?)
    }

    /// The block the builder appends to.
    pub fn cur_block(&self) -> Result<BasicBlock<'ctx>, BackendError> {
        self.b.get_insert_block().ok_or_else(|| BackendError::Invalid("builder has no insertion block".into()))
    }

    /// An i32 constant.
    pub fn i32(&self, c: i32) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(c as i64 as u64, true)
    }

    /// `v`, an i32 every thread of the warp holds alike, broadcast from lane 0 (`shfl.sync.idx`)
    /// so that ptxas knows it is warp-uniform: what derives from it may then live in uniform
    /// registers (the wgmma descriptors of [`Self::for_each_unit_in`]). Only where the whole warp
    /// is converged (`shfl.sync` with a full mask).
    ///
    /// # Errors
    /// [`BackendError::Builder`].
    pub fn warp_uniform(&self, v: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        let i32t = self.ctx.i32_type();
        Ok(self.call("llvm.nvvm.shfl.sync.idx.i32", Some(i32t.into()), &[self.i32(-1).into(), v.into(), self.i32(0).into(), self.i32(0x1f).into()])?.into_int_value())
    }

    /// Calls `name` (declared on first use with the argument types given).
    ///
    /// # Errors
    /// [`BackendError::Builder`]; [`BackendError::Invalid`] when a non-void call has no value.
    pub fn call(&self, name: &str, ret: Option<BasicTypeEnum<'ctx>>, args: &[BasicValueEnum<'ctx>]) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let tys: Vec<BasicMetadataTypeEnum> = args.iter().map(|a| a.get_type().into()).collect();
                let fty = match ret {
                    Some(t) => t.fn_type(&tys, false),
                    None => self.ctx.void_type().fn_type(&tys, false),
                };
                self.module.add_function(name, fty, None)
            }
        };
        let margs: Vec<BasicMetadataValueEnum> = args.iter().map(|a| (*a).into()).collect();
        let cs = self.b.build_call(f, &margs, "")?;
        match ret {
            None => Ok(self.i32(0).into()),
            Some(_) => cs.try_as_basic_value().basic().ok_or_else(|| BackendError::Invalid(format!("call to {name} has no value"))),
        }
    }

    /// Pointer to byte `off` (i32) of the dynamic shared memory.
    pub fn smem_at(&self, off: IntValue<'ctx>) -> Result<PointerValue<'ctx>, BackendError> {
        // SAFETY of the GEP: i8 indexing into the extern shared array; offsets stay inside the
        // planned region (the launch provides header + plan bytes).
        Ok(unsafe { self.b.build_in_bounds_gep(self.ctx.i8_type(), self.smem, &[off], "s")? })
    }

    /// Absolute byte offset of a tile value's buffer.
    pub fn value_buf(&self, v: Value) -> Result<u32, BackendError> {
        self.tp.smem.values[v].map(|o| o + self.header).ok_or_else(|| BackendError::Invalid(format!("tile {v} has no shared-memory buffer")))
    }

    /// Absolute byte offset of variable `v`'s data here: its buffer, plus the current stage's
    /// offset inside a pipelined loop that rings it.
    pub fn var_base(&self, v: crate::ir::Var) -> Result<IntValue<'ctx>, BackendError> {
        let buf = self.i32(self.var_buf(v)? as i32);
        Ok(match self.stage_offset(v)? {
            Some(off) => self.b.build_int_add(buf, off, "var.base")?,
            None => buf,
        })
    }

    /// Absolute byte offset of the scratch buffer of instruction `i`.
    pub fn scratch_buf(&self, i: Inst) -> Result<u32, BackendError> {
        self.tp.smem.scratch[i].map(|o| o + self.header).ok_or_else(|| BackendError::Invalid(format!("{i} has no scratch buffer")))
    }

    /// Absolute byte offset of a shared-memory-resident variable's buffer.
    pub fn var_buf(&self, v: crate::ir::Var) -> Result<u32, BackendError> {
        self.tp.smem.vars[v].map(|o| o + self.header).ok_or_else(|| BackendError::Invalid(format!("variable {} has no shared-memory buffer", self.k.vars[v].name)))
    }

    /// Loads element `idx` of a buffer of `elem` at byte `buf`, in compute type.
    pub fn load_elem(&self, buf: u32, idx: IntValue<'ctx>, elem: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        self.load_elem_at(self.i32(buf as i32), idx, elem)
    }

    /// [`Codegen::load_elem`] from a buffer at a run-time byte offset (a ring stage).
    pub fn load_elem_at(&self, buf: IntValue<'ctx>, idx: IntValue<'ctx>, elem: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let off = self.b.build_int_add(buf, self.b.build_int_mul(idx, self.i32(elem.size_bytes() as i32), "")?, "")?;
        let p = self.smem_at(off)?;
        let raw = self.b.build_load(self.storage_type(elem), p, "ld")?;
        self.to_compute(raw, elem)
    }

    /// Stores a compute-type value as element `idx` of a buffer of `elem` at byte `buf`.
    pub fn store_elem(&self, buf: u32, idx: IntValue<'ctx>, elem: Elem, v: BasicValueEnum<'ctx>) -> Result<(), BackendError> {
        let off = self.b.build_int_add(self.i32(buf as i32), self.b.build_int_mul(idx, self.i32(elem.size_bytes() as i32), "")?, "")?;
        let p = self.smem_at(off)?;
        let s = self.to_storage(v, elem)?;
        self.b.build_store(p, s)?;
        Ok(())
    }

    /// The LLVM type of an element in memory.
    pub fn storage_type(&self, e: Elem) -> BasicTypeEnum<'ctx> {
        match e {
            Elem::Bool => self.ctx.i8_type().into(),
            Elem::I32 => self.ctx.i32_type().into(),
            Elem::F16 => self.ctx.f16_type().into(),
            Elem::Bf16 => self.ctx.bf16_type().into(),
            Elem::F32 => self.ctx.f32_type().into(),
        }
    }

    /// Memory form → compute type.
    pub fn to_compute(&self, raw: BasicValueEnum<'ctx>, e: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        Ok(match e {
            Elem::Bool => self.b.build_int_compare(IntPredicate::NE, raw.into_int_value(), self.ctx.i8_type().const_zero(), "b")?.into(),
            Elem::F16 | Elem::Bf16 => self.b.build_float_ext(raw.into_float_value(), self.ctx.f32_type(), "x")?.into(),
            Elem::I32 | Elem::F32 => raw,
        })
    }

    /// Compute type → memory form (bf16/f16 narrowing rounds to nearest even: `cvt.rn`).
    pub fn to_storage(&self, v: BasicValueEnum<'ctx>, e: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        Ok(match e {
            Elem::Bool => self.b.build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "b")?.into(),
            Elem::F16 | Elem::Bf16 => {
                let t = self.storage_type(e).into_float_type();
                self.b.build_float_trunc(v.into_float_value(), t, "n")?.into()
            }
            Elem::I32 | Elem::F32 => v,
        })
    }

    /// Two values already in memory form (`to_storage`) as one `<2 x storage type>` vector,
    /// for a 2-element store.
    pub fn storage_pair(&self, vs: [BasicValueEnum<'ctx>; 2], e: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let ty = match self.storage_type(e) {
            BasicTypeEnum::IntType(t) => t.vec_type(2),
            BasicTypeEnum::FloatType(t) => t.vec_type(2),
            other => return Err(BackendError::Invalid(format!("no vector of {other:?}"))),
        };
        let mut v = ty.get_undef();
        for (k, x) in vs.into_iter().enumerate() {
            v = self.b.build_insert_element(v, x, self.i32(k as i32), "")?;
        }
        Ok(v.into())
    }

    /// A size expression over the size arguments, evaluated in 64 bits: the extents of tensors, whose products (a shape
    /// `B * T`, the row-major strides) pass 2³¹ on large inputs — the runtime's binder
    /// evaluates them in 64 bits too (issue 9, item 8; fla-org/flash-linear-attention#1080 is
    /// this class of bug).
    pub fn size_expr_i64(&self, e: &SizeExpr) -> Result<IntValue<'ctx>, BackendError> {
        self.size_expr_as(e, self.ctx.i64_type())
    }

    fn size_expr_as(&self, e: &SizeExpr, ty: inkwell::types::IntType<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(match e {
            SizeExpr::Const(c) => ty.const_int(*c as u64, true),
            SizeExpr::Sym(s) => {
                let v = *self.sizes.get(s.as_u32() as usize).ok_or_else(|| BackendError::Invalid(format!("unknown size {s}")))?;
                if ty.get_bit_width() == 32 {
                    v
                } else {
                    self.b.build_int_s_extend(v, ty, "size")?
                }
            }
            SizeExpr::Bin(op, a, b) => {
                let (a, b) = (self.size_expr_as(a, ty)?, self.size_expr_as(b, ty)?);
                match op {
                    SizeOp::Add => self.b.build_int_add(a, b, "")?,
                    SizeOp::Sub => self.b.build_int_sub(a, b, "")?,
                    SizeOp::Mul => self.b.build_int_mul(a, b, "")?,
                    SizeOp::Div => self.b.build_int_signed_div(a, b, "")?,
                    SizeOp::Rem => self.b.build_int_signed_rem(a, b, "")?,
                    SizeOp::Cdiv => {
                        let t = self.b.build_int_add(a, self.b.build_int_sub(b, ty.const_int(1, false), "")?, "")?;
                        self.b.build_int_signed_div(t, b, "")?
                    }
                    SizeOp::Min | SizeOp::Max => {
                        let pred = if *op == SizeOp::Min { IntPredicate::SLT } else { IntPredicate::SGT };
                        let c = self.b.build_int_compare(pred, a, b, "")?;
                        self.b.build_select(c, a, b, "")?.into_int_value()
                    }
                }
            }
        })
    }

    /// `(rows, cols)` of a tile type, or an error naming `what`.
    pub fn shape_of(&self, ty: Type, what: &str) -> Result<(u32, u32), BackendError> {
        ty.shape().ok_or_else(|| BackendError::Invalid(format!("{what} must be a tile, found {ty}")))
    }

    /// An unsupported-IR error for this target.
    pub fn unsupported(&self, what: impl Into<String>) -> BackendError {
        BackendError::Unsupported { target: self.target.name().into(), what: what.into() }
    }
}

/// Index arithmetic of [`crate::layout`] emitted as LLVM `i32` instructions, one per operation,
/// so a layout map compiles to exactly the arithmetic it states.
impl<'ctx> IndexArith for Codegen<'ctx, '_> {
    type V = IntValue<'ctx>;
    type E = BackendError;
    fn c(&self, c: u32) -> IntValue<'ctx> {
        self.i32(c as i32)
    }
    fn add(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_add(a, b, "")?)
    }
    fn mul(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_mul(a, b, "")?)
    }
    fn and(&self, a: IntValue<'ctx>, mask: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_and(a, self.i32(mask as i32), "")?)
    }
    fn shl(&self, a: IntValue<'ctx>, s: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_left_shift(a, self.i32(s as i32), "")?)
    }
    fn shr(&self, a: IntValue<'ctx>, s: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_right_shift(a, self.i32(s as i32), false, "")?)
    }
    fn xor(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_xor(a, b, "")?)
    }
    fn udiv(&self, a: IntValue<'ctx>, d: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_unsigned_div(a, self.i32(d as i32), "")?)
    }
    fn urem(&self, a: IntValue<'ctx>, d: u32) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_unsigned_rem(a, self.i32(d as i32), "")?)
    }
}
