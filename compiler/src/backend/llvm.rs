//! The LLVM NVPTX machinery: target-machine creation, the new pass manager, PTX emission, and
//! the tcgen05 gate. Targets and their limits are [`crate::target`].
//!
//! Why the gate: with `-mcpu=sm_100` (no `a`) every tcgen05 intrinsic makes llc *abort* ("Cannot
//! select"), a crash rather than a diagnostic (blackwell.md §0). So the back end checks the module
//! itself before it reaches the NVPTX code generator and returns [`BackendError::Tcgen05Target`].

use std::sync::OnceLock;

use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;

use super::{BackendError, Target};

/// The LLVM target triple of every kernel module.
pub const TRIPLE: &str = "nvptx64-nvidia-cuda";

/// Initialises the NVPTX back end once per process.
fn init_nvptx() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| LlvmTarget::initialize_nvptx(&InitializationConfig::default()));
}

/// A target machine for `target` at -O3.
///
/// # Errors
/// [`BackendError::Llvm`] when LLVM has no NVPTX target or refuses the CPU.
pub fn machine(target: Target) -> Result<TargetMachine, BackendError> {
    init_nvptx();
    let triple = TargetTriple::create(TRIPLE);
    let t = LlvmTarget::from_triple(&triple).map_err(|e| BackendError::Llvm(format!("no NVPTX target in this LLVM: {e}")))?;
    // Code generation at LLVM's default level (-O2), not -O3: on the shipped examples the SASS
    // after ptxas is the same within ±8 instructions with identical register counts, while
    // NVPTX code generation takes ~20 % less time (compile-time budget: 300 ms per example).
    t.create_target_machine(&triple, target.name(), target.info().llvm_features, OptimizationLevel::Default, RelocMode::Default, CodeModel::Default)
        .ok_or_else(|| BackendError::Llvm(format!("LLVM refused to create an NVPTX machine for {}", target.name())))
}

/// Verifies the module, checks the tcgen05 gate, runs `default<O3>` with the new pass manager and
/// returns the PTX text.
///
/// # Errors
/// [`BackendError::Llvm`] with LLVM's message when the module is invalid or emission fails;
/// [`BackendError::Tcgen05Target`] when a tcgen05 intrinsic is present on a non-tcgen05 target.
pub fn optimize_and_emit(module: &Module<'_>, target: Target) -> Result<String, BackendError> {
    module.verify().map_err(|e| BackendError::Llvm(format!("generated LLVM IR is invalid: {}", e.to_string_lossy())))?;
    if !target.info().mma.tcgen05 {
        let mut f = module.get_first_function();
        while let Some(func) = f {
            let name = func.get_name().to_string_lossy();
            if name.starts_with("llvm.nvvm.tcgen05") {
                return Err(BackendError::Tcgen05Target { target: target.name().into(), what: name.into_owned() });
            }
            f = func.get_next_function();
        }
    }
    let tm = machine(target)?;
    module.set_triple(&TargetTriple::create(TRIPLE));
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let opts = PassBuilderOptions::create();
    opts.set_verify_each(std::env::var_os("TILEC_VERIFY_EACH").is_some());
    // Full unrolling of the constant-trip CTA loops multiplies code size (and compile time,
    // which has a 300 ms budget) for little gain in this memory-bound strategy.
    opts.set_loop_unrolling(false);
    let t0 = std::time::Instant::now();
    module.run_passes("default<O3>", &tm, opts).map_err(|e| BackendError::Llvm(format!("optimisation failed: {}", e.to_string_lossy())))?;
    let t1 = std::time::Instant::now();
    let buf = tm.write_to_memory_buffer(module, FileType::Assembly).map_err(|e| BackendError::Llvm(format!("PTX emission failed: {}", e.to_string_lossy())))?;
    #[allow(clippy::print_stderr)] // opt-in (TILEC_TIMING) timing for the compile-time bench
    if std::env::var_os("TILEC_TIMING").is_some() {
        // Opt-in split of the LLVM time: IR pipeline vs NVPTX code generation (llc's passes).
        eprintln!("timing {target}: default<O3> {:.1} ms, NVPTX codegen {:.1} ms", (t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3);
    }
    String::from_utf8(buf.as_slice().to_vec()).map_err(|_| BackendError::Llvm("LLVM emitted non-UTF-8 PTX".into()))
}
