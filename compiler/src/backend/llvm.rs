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

/// Instructions (before optimisation) above which NVPTX code generation runs at -O0: at any
/// other level its pass pipeline includes Straight Line Strength Reduction, whose basis search
/// is quadratic in a function's length — a generated program of 200 sequential MMA loops
/// (~29,000 instructions on sm_100a) spent 12 s of 13 in it (`llc -time-passes`). At -O0 code
/// generation, though, LLVM copies wgmma results into new registers before their wait, which
/// ptxas answers by serialising the wgmmas (advisory C7514, `scripts/check-sass.sh` fails): at
/// 20,000, k2_wy_vjp_channel (≈ 21,400 IR lines with the 16-byte fragment stores) crossed it and
/// got the advisory. At 30,000 every shipped kernel keeps the full pipeline and -O2 code
/// generation, k2_wy_vjp (≈ 25,700) included: with them its SASS is 7,554 instructions and 228
/// registers instead of 9,601 and 254, and on an H100 it ran in 0.497 ms instead of 0.673 at
/// B=8 T=2048 H=16, outputs bitwise the same (docs/results.md, twenty-first session).
///
/// Counted since the twenty-third session without the per-use pointers into wgmma fragment
/// arrays, which the emitter no longer makes (one per array element, in the entry block): about
/// a quarter fewer in a wgmma-heavy module. k2_wy_vjp now counts ≈ 23,300; the generated
/// programs of 42–54 sequential MMA loops (`tests/programs`), ≈ 30,000–41,000 before, now fall
/// under the bound and get the full pipeline: a tenth of the PTX, about twice the LLVM time
/// (0.4 → 1.0 s). Every shipped kernel's PTX is unchanged.
pub const LONG_FUNCTION_INSTRUCTIONS: usize = 30_000;

/// Why the rest keep `default<O3>` and -O2 code generation with Straight Line Strength
/// Reduction, although they are nearly all of a cold build's time: both cheaper settings were
/// measured on a GPU (thirty-second session, H100, outputs bitwise the same) and both lose
/// speed. SLSR alone turned off (`-opt-disable=slsr`: code generation 3.96 → 2.79 s of CPU for
/// gdn.tile) made dqkwg_channel 22 %, dqkg_channel 24 % and k2_keys_channel 15 % slower; a short
/// IR pipeline (SROA, CSE, one InstCombine each side of LICM and GVN, loop rotation; IR 5.6 →
/// 2.5 s) made them 37–38 % slower and solve_tril and state_fwd 17 %.
///
/// The IR pipeline of a module over [`LONG_FUNCTION_INSTRUCTIONS`].
pub const LONG_FUNCTION_PIPELINE: &str = "function(sroa,early-cse<memssa>,simplifycfg,gvn,loop-mssa(licm),simplifycfg)";

/// A target machine for `target`, code generation at -O2, or -O0 for a module of more than
/// [`LONG_FUNCTION_INSTRUCTIONS`] (`long`).
///
/// # Errors
/// [`BackendError::Llvm`] when LLVM has no NVPTX target or refuses the CPU.
pub fn machine(target: Target, long: bool) -> Result<TargetMachine, BackendError> {
    init_nvptx();
    let triple = TargetTriple::create(TRIPLE);
    let t = LlvmTarget::from_triple(&triple).map_err(|e| BackendError::Llvm(format!("no NVPTX target in this LLVM: {e}")))?;
    // -O2 rather than -O3: on the shipped examples the SASS after ptxas is the same within ±8
    // instructions with identical register counts, while NVPTX code generation takes ~20 %
    // less time.
    let level = if long { OptimizationLevel::None } else { OptimizationLevel::Default };
    t.create_target_machine(&triple, target.name(), target.info().llvm_features, level, RelocMode::Default, CodeModel::Default)
        .ok_or_else(|| BackendError::Llvm(format!("LLVM refused to create an NVPTX machine for {}", target.name())))
}

/// Instructions in `module`'s function bodies.
pub(crate) fn instruction_count(module: &Module<'_>) -> usize {
    let mut n = 0;
    let mut f = module.get_first_function();
    while let Some(func) = f {
        for bb in func.get_basic_blocks() {
            n += bb.get_instructions().count();
        }
        f = func.get_next_function();
    }
    n
}

/// Verifies the module, checks the tcgen05 gate, runs `default<O3>` (or, for a long function,
/// [`LONG_FUNCTION_PIPELINE`]) with the new pass manager and returns the PTX text.
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
    let long = instruction_count(module) > LONG_FUNCTION_INSTRUCTIONS;
    let tm = machine(target, long)?;
    module.set_triple(&TargetTriple::create(TRIPLE));
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let opts = PassBuilderOptions::create();
    opts.set_verify_each(std::env::var_os("TILEC_VERIFY_EACH").is_some());
    // Full unrolling of the constant-trip CTA loops multiplies code size (and compile time,
    // which has a 300 ms budget) for little gain in this memory-bound strategy.
    opts.set_loop_unrolling(false);
    let t0 = std::time::Instant::now();
    // A long function gets a short pipeline: InstCombine, which `default<O3>` runs many times,
    // grows quadratically with a function's length too (0.56 s for 200 generated MMA loops,
    // 1.76 s for 400, alone); SROA (the wgmma fragments into registers), CSE, GVN and LICM are
    // linear, and ptxas optimises the PTX again.
    let pipeline = if long { LONG_FUNCTION_PIPELINE } else { "default<O3>" };
    module.run_passes(pipeline, &tm, opts).map_err(|e| BackendError::Llvm(format!("optimisation failed: {}", e.to_string_lossy())))?;
    super::barrier::drop_repeated_barriers(module);
    let t1 = std::time::Instant::now();
    let buf = tm.write_to_memory_buffer(module, FileType::Assembly).map_err(|e| BackendError::Llvm(format!("PTX emission failed: {}", e.to_string_lossy())))?;
    #[allow(clippy::print_stderr)] // opt-in (TILEC_TIMING) timing for the compile-time bench
    if std::env::var_os("TILEC_TIMING").is_some() {
        // Opt-in split of the LLVM time: IR pipeline vs NVPTX code generation (llc's passes).
        eprintln!("timing {target}: IR pipeline{} {:.1} ms, NVPTX codegen {:.1} ms", if long { " (long function)" } else { "" }, (t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3);
    }
    String::from_utf8(buf.as_slice().to_vec()).map_err(|_| BackendError::Llvm("LLVM emitted non-UTF-8 PTX".into()))
}
