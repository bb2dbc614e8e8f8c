//! The NVPTX back end: tile IR → LLVM IR (inkwell, LLVM 22) → PTX, for `sm_100a` (tcgen05 and
//! tensor memory) and `sm_90a` (`mma.sync`, runs on the H200).
//!
//! The back end plans nothing: it takes the kernel's TMEM layout and its per-target plan
//! ([`crate::passes::target_plan::TargetPlan`]: fusion, shared-memory offsets, barriers) and
//! translates. Structure:
//! * the core — [`emit`] (kernel signature, instruction walk, loops, buffer addressing, and the
//!   [`crate::layout::IndexArith`] that layout maps emit through), [`elementwise`], [`reduce`],
//!   [`memory`], [`view`] (sub-tile views, cumulative sums), [`math`] (accurate `exp2`/`log2`), [`barrier`], [`llvm`] (target machine, pass
//!   pipeline, PTX emission, tcgen05 gate);
//! * one [`lowering::Lowering`] per target for what differs: [`sm90`] (`mma.sync`; `tmem`
//!   variables in shared memory) and [`sm100`] (`tcgen05.mma`, `tcgen05.ld/st`, the TMEM
//!   lifecycle, descriptors and mbarriers).
//!
//! Strategy (correctness first; performance work comes later): scalars are uniform LLVM
//! registers; every register tile value and register/shared variable lives in dynamic shared
//! memory; each tile instruction is a CTA-wide loop (thread `t` handles elements
//! `t, t+threads, …`) followed by `bar.sync` where the barrier pass put one.

// The code-generation core is crate-private: outside the back end only `compile_kernel`, its
// error and result types, the TMEM layout and the tcgen05 gate are used.
pub(crate) mod barrier;
pub(crate) mod copy;
pub(crate) mod descriptors;
pub(crate) mod edge;
pub(crate) mod elementwise;
pub(crate) mod emit;
pub(crate) mod groups;
pub(crate) mod llvm;
pub(crate) mod loops;
pub(crate) mod lowering;
pub(crate) mod math;
pub(crate) mod mbarrier;
pub(crate) mod memory;
pub(crate) mod operand_desc;
pub(crate) mod pipeline;
pub(crate) mod reduce;
pub(crate) mod staging;
pub(crate) mod tma;
pub(crate) mod view;
pub(crate) mod warp_spec;
pub mod sm100;
pub(crate) mod sm90;

use inkwell::builder::BuilderError;
use inkwell::context::Context;

use crate::ir::validate::Validated;
use crate::passes::target_plan::TargetPlan;

pub use crate::target::Target;
pub use sm100::tmem_layout::{self, TmemLayout};

/// Errors of the back end. None of them is a panic: unsupported IR, invalid descriptors, LLVM's
/// own messages.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// An LLVM builder call failed (a back-end bug, reported rather than unwrapped).
    #[error("LLVM builder error: {0}")]
    Builder(#[from] BuilderError),
    /// LLVM rejected the module or failed to emit PTX; carries LLVM's message.
    #[error("LLVM: {0}")]
    Llvm(String),
    /// A target name tilec does not know.
    #[error(transparent)]
    UnknownTarget(#[from] crate::target::UnknownTarget),
    /// A tcgen05 instruction requested for a target without tcgen05 (llc would abort).
    #[error("{what} needs tcgen05, which target {target} does not have (only sm_100a)")]
    Tcgen05Target {
        /// Target name.
        target: String,
        /// The instruction or intrinsic.
        what: String,
    },
    /// IR this back end does not (yet) translate.
    #[error("unsupported by the {target} back end: {what}")]
    Unsupported {
        /// Target name.
        target: String,
        /// What.
        what: String,
    },
    /// An invalid shape, descriptor field, column count or plan.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Any of the above, raised while lowering instruction `inst` (the innermost one).
    #[error("{source} (lowering {inst})")]
    At {
        /// The instruction.
        inst: crate::ir::Inst,
        /// Its source span.
        span: crate::diag::Span,
        /// What went wrong.
        source: Box<BackendError>,
    },
}

impl BackendError {
    /// Attaches instruction `inst` (with its span) unless an inner instruction already is.
    pub fn at(self, inst: crate::ir::Inst, span: crate::diag::Span) -> BackendError {
        match self {
            e @ BackendError::At { .. } => e,
            e => BackendError::At { inst, span, source: Box::new(e) },
        }
    }

    /// The source span of the instruction being lowered, when known.
    pub fn span(&self) -> Option<crate::diag::Span> {
        match self {
            BackendError::At { span, .. } => Some(*span),
            _ => None,
        }
    }
}

/// Result of compiling one kernel for one target.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// The LLVM IR before optimisation, as text with its value names (`--emit llvm`); `None`
    /// unless asked for ([`compile_kernel_cached`]'s `llvm_text`).
    pub llvm_ir: Option<String>,
    /// Dynamic shared memory the kernel needs per CTA, in bytes.
    pub smem_bytes: u32,
    /// Threads per CTA at launch: the kernel's, plus a producer warpgroup where a loop is
    /// warp-specialised ([`crate::passes::warp_spec`]).
    pub threads: u32,
    /// The tensor maps the kernel takes after its sizes ([`crate::passes::tma`]).
    pub tensor_maps: Vec<tilec_abi::meta::TensorMapMeta>,
}

/// Compiles one validated kernel ([`crate::ir::validate::validate`]) to PTX for the target of `plan`.
///
/// `tmem` gives the column offset of every TMEM variable (from the TMEM planner, or
/// [`TmemLayout::prefix_sums`]); on `sm_100a` a kernel with TMEM variables must already carry the
/// planner's `TmemAlloc` / `TmemRelinquish` / `TmemDealloc` instructions. `plan` comes from
/// [`crate::passes::target_plan::run`] on this kernel.
///
/// # Errors
/// [`BackendError`] for unsupported IR, invalid MMA shapes or descriptors, a tcgen05 request on a
/// target without it, and LLVM failures (with LLVM's message).
pub fn compile_kernel(v: &Validated<'_>, tmem: &TmemLayout, plan: &TargetPlan) -> Result<Compiled, BackendError> {
    compile_kernel_cached(v, tmem, plan, None, true)
}

/// [`compile_kernel`], taking the PTX from `cache` when it holds this LLVM module's
/// ([`crate::cache`]: keyed on the module's bitcode before optimisation, the target and the
/// compiler) and storing it there otherwise. `llvm_text` keeps the IR as text in
/// [`Compiled::llvm_ir`].
///
/// Without `llvm_text` the module's context discards the names of local values: LLVM keeps
/// every name unique in a function's symbol table, renames on every copy and prints them, which
/// was ~5 % of a long function's build, and the PTX does not depend on them (its registers and
/// labels are numbered). Printing the module as text, ~15 % of a long function's build, is
/// likewise done only when asked for; the cache key hashes the bitcode instead.
///
/// # Errors
/// As [`compile_kernel`] (errors are never cached).
pub fn compile_kernel_cached(v: &Validated<'_>, tmem: &TmemLayout, plan: &TargetPlan, cache: Option<&crate::cache::BuildCache>, llvm_text: bool) -> Result<Compiled, BackendError> {
    let k = v.kernel();
    let target = plan.target;
    let t0 = std::time::Instant::now();
    let ctx = Context::create();
    if !llvm_text {
        // SAFETY: `ctx` is a live context owned here, and no value has been created in it yet.
        unsafe { inkwell::llvm_sys::core::LLVMContextSetDiscardValueNames(ctx.raw(), 1) };
    }
    let cg = emit::Codegen::new(&ctx, k, tmem, plan, for_target(target))?;
    let (module, smem_bytes) = cg.run()?;
    let llvm_ir = llvm_text.then(|| {
        let text = module.print_to_string().to_string();
        // The same module as a build without `--emit llvm` from here on: the same cache key
        // (a plain build's PTX is reused, and the other way round) and the same optimisation.
        strip_local_names(&module);
        text
    });
    let timing = std::env::var_os("TILEC_TIMING").is_some();
    let instructions = if timing { llvm::instruction_count(&module) } else { 0 };
    let t1 = std::time::Instant::now();
    let key = cache.map(|_| crate::cache::key(&[crate::cache::compiler_fingerprint().as_bytes(), target.name().as_bytes(), module.write_bitcode_to_memory().as_slice()]));
    let cached = cache.zip(key.as_deref()).and_then(|(c, key)| c.get(key, "ptx")).and_then(|b| String::from_utf8(b).ok());
    let ptx = match cached {
        Some(ptx) => ptx,
        None => {
            let ptx = llvm::optimize_and_emit(&module, target)?;
            if let (Some(c), Some(key)) = (cache, key.as_deref()) {
                c.put(key, "ptx", ptx.as_bytes());
            }
            ptx
        }
    };
    #[allow(clippy::print_stderr)] // opt-in (TILEC_TIMING) timing for the compile-time bench
    if timing {
        // Opt-in timing of the two halves (stderr), for the compile-time benchmark.
        eprintln!("timing {} {target}: emit_llvm {:.1} ms, opt_and_ptx {:.1} ms, {} IR instructions", k.name, (t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3, instructions);
    }
    let threads = plan.warp_spec.map_or(k.threads, |ws| ws.launch_threads());
    Ok(Compiled { ptx, llvm_ir, smem_bytes, threads, tensor_maps: crate::passes::tma::to_meta(k, &plan.tma) })
}

/// Removes the names of every parameter, block and instruction, as a context that discards
/// value names would have left them.
fn strip_local_names(module: &inkwell::module::Module<'_>) {
    for f in module.get_functions() {
        for p in f.get_param_iter() {
            p.set_name("");
        }
        for bb in f.get_basic_blocks() {
            bb.set_name("");
            for i in bb.get_instructions() {
                // A void instruction has no name to remove.
                let _ = i.set_name("");
            }
        }
    }
}

/// The lowering of `target` (chosen here, once, so that the core does not depend on the targets).
fn for_target(target: Target) -> &'static dyn lowering::Lowering {
    match target {
        Target::Sm90a => &sm90::Sm90,
        Target::Sm100a => &sm100::Sm100,
    }
}
