//! The NVPTX back end: tile IR → LLVM IR (inkwell, LLVM 22) → PTX, for `sm_100a` (tcgen05 and
//! tensor memory) and `sm_90a` (`mma.sync`, runs on the H200).
//!
//! Strategy (correctness first; performance work comes later):
//! * Scalars are uniform LLVM registers. Every register tile value, register/shared variable and
//!   MMA staging buffer lives in the kernel's dynamic shared memory at an offset from
//!   [`smem::plan`] (first fit over live intervals). On `sm_90a` TMEM variables are shared-memory
//!   f32 tiles too; on `sm_100a` they live in tensor memory at the planner's column offsets.
//! * Each tile instruction is a CTA-wide loop (thread `t` handles elements `t, t+threads, …`) and is
//!   followed by `bar.sync`, which orders both producer→consumer and buffer reuse.
//! * MMA: `mma_sm90` builds `mma.sync.m16n8k16` fragments from the row-major operand buffers;
//!   `mma_sm100` restages operands into the SWIZZLE_NONE K-major layout and issues `tcgen05.mma`
//!   from one thread, completing through `tcgen05.commit` → mbarrier.
//!
//! One file per op family: [`elementwise`], [`reduce`], [`memory`], [`mma_sm90`], [`mma_sm100`],
//! [`tmem`] and [`tmem_access`], [`barrier`]; [`emit`] holds the [`emit::Codegen`] core (kernel signature, loops,
//! buffer addressing) and [`math`] the accurate `exp2`.

pub mod barrier;
pub mod descriptors;
pub mod elementwise;
pub mod emit;
pub mod fuse;
pub mod math;
pub mod memory;
pub mod mma_sm100;
pub mod mma_sm90;
pub mod reduce;
pub mod smem;
pub mod target;
pub mod tmem;
pub mod tmem_access;
pub mod tmem_layout;

use inkwell::builder::BuilderError;
use inkwell::context::Context;

use crate::ir::Kernel;

pub use target::Target;
pub use tmem_layout::TmemLayout;

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
    #[error("unknown target `{0}` (expected sm_100a or sm_90a)")]
    UnknownTarget(String),
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
}

/// Result of compiling one kernel for one target.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// The LLVM IR before optimisation (for `--emit llvm`).
    pub llvm_ir: String,
    /// Dynamic shared memory the kernel needs per CTA, in bytes.
    pub smem_bytes: u32,
    /// Threads per CTA.
    pub threads: u32,
}

/// Compiles one validated kernel to PTX for `target`.
///
/// `tmem` gives the column offset of every TMEM variable (from the TMEM planner, or
/// [`TmemLayout::prefix_sums`]); on `sm_100a` a kernel with TMEM variables must already carry the
/// planner's `TmemAlloc` / `TmemRelinquish` / `TmemDealloc` instructions.
///
/// # Errors
/// [`BackendError`] for unsupported IR, invalid MMA shapes or descriptors, a tcgen05 request on a
/// target without it, and LLVM failures (with LLVM's message).
pub fn compile_kernel(k: &Kernel, tmem: &TmemLayout, target: Target) -> Result<Compiled, BackendError> {
    let t0 = std::time::Instant::now();
    let ctx = Context::create();
    let cg = emit::Codegen::new(&ctx, k, tmem, target)?;
    let (module, smem_bytes) = cg.run()?;
    let llvm_ir = module.print_to_string().to_string();
    let t1 = std::time::Instant::now();
    let ptx = target::optimize_and_emit(&module, target)?;
    if std::env::var_os("TILEC_TIMING").is_some() {
        // Opt-in timing of the two halves (stderr), for the compile-time benchmark.
        eprintln!("timing {} {target}: emit_llvm {:.1} ms, opt_and_ptx {:.1} ms, {} IR lines", k.name, (t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3, llvm_ir.lines().count());
    }
    Ok(Compiled { ptx, llvm_ir, smem_bytes, threads: k.threads })
}
