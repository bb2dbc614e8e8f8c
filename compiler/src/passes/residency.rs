//! A declared residency (`ctas_per_sm([target:] N)`, docs/language.md "Residency") against
//! what one CTA of the planned kernel takes on a target: shared memory (E0405), the registers
//! of its register accumulators (E0406) and its tensor-memory allocation (E0402). Registers
//! beyond the accumulators are ptxas's to count; the build names the declaration when ptxas
//! runs out of them.

use super::var_roles::VarRoles;
use crate::diag::{Code, Diagnostic};
use crate::ir::Kernel;
use crate::target::TargetInfo;

/// Checks `k`'s declared residency on `info`'s target, `bytes` of shared memory per CTA (header
/// included) as planned.
///
/// # Errors
/// E0405, E0406 or E0402, at the declaration.
pub fn check(k: &Kernel, bytes: u32, info: &TargetInfo, roles: &VarRoles) -> Result<(), Diagnostic> {
    shared_memory(k, bytes, info)?;
    registers_and_tensor_memory(k, info, roles)
}

/// E0405 when the declared `ctas_per_sm(N)` does not fit `bytes` of shared memory per CTA:
/// N · (bytes + the driver's reservation) must fit one SM.
fn shared_memory(k: &Kernel, bytes: u32, info: &TargetInfo) -> Result<(), Diagnostic> {
    let Some((n, span)) = k.residency(info.target) else { return Ok(()) };
    let per_cta = bytes + info.smem_reserved_per_cta;
    let fit = info.smem_per_sm / per_cta;
    if fit >= n {
        return Ok(());
    }
    let help = if fit == 0 { "help: shrink the kernel's tiles".to_string() } else { format!("help: this plan keeps {fit} resident: write ctas_per_sm({}: {fit}), or shrink the kernel's tiles", info.name) };
    Err(Diagnostic::error(
        Code::SmemOverBudget,
        format!("kernel `{}` asks for {n} CTAs per SM on {}, but its shared memory holds {fit}", k.name, info.name),
        span,
        format!("{n} CTAs per SM"),
    )
    .with_note(format!("{n} x ({bytes} bytes per CTA + {} reserved by the driver) = {} bytes; an SM has {}", info.smem_reserved_per_cta, u64::from(n) * u64::from(per_cta), info.smem_per_sm))
    .with_note(help))
}

/// Registers per thread ptxas may use when `ctas` CTAs of `threads` threads share an SM: the
/// register file split between them, in ptxas's allocation unit of 8 per thread (256 per
/// warp), at most the per-thread maximum.
pub fn register_budget(info: &TargetInfo, ctas: u32, threads: u32) -> u32 {
    (info.registers_per_sm / (ctas * threads).max(1) / 8 * 8).min(info.max_registers_per_thread)
}

/// The declared residency against what a kernel is known to need besides shared memory:
/// - registers (E0406): one register accumulator (wgmma fragments, sm_90a) holds its floats
///   per thread for its whole life, and ptxas cannot spill them; with anything else beside it
///   the budget of [`register_budget`] must exceed them. (This is a floor: ptxas needs some
///   tens more for addresses and descriptors, and says so when they do not fit.)
/// - tensor memory (E0402): N CTAs each allocating its planned columns must fit the SM's 512.
fn registers_and_tensor_memory(k: &Kernel, info: &TargetInfo, roles: &VarRoles) -> Result<(), Diagnostic> {
    let Some((n, span)) = k.residency(info.target) else { return Ok(()) };
    let budget = register_budget(info, n, k.threads);
    let acc = k.vars.iter().filter_map(|(v, d)| roles.accumulator(v).map(|dist| (dist.floats_per_thread(), d))).max_by_key(|x| x.0);
    if let Some((floats, d)) = acc.filter(|a| a.0 >= budget) {
        // At the per-thread maximum no residency helps: the accumulator is too large for a thread.
        let (what, help) = if budget == info.max_registers_per_thread {
            (format!("its accumulator `{}` alone needs {floats} registers per thread, and a thread has at most {budget}", d.name), "help: split the accumulator (fewer columns per CTA, or more threads)")
        } else {
            (format!("asks for {n} CTAs per SM on {}, but its accumulator `{}` alone needs {floats} registers per thread", info.name, d.name), "help: declare fewer CTAs per SM, or split the accumulator")
        };
        return Err(Diagnostic::error(
            Code::RegistersOverBudget,
            format!("kernel `{}` {what}", k.name),
            span,
            format!("{n} CTAs per SM"),
        )
        .with_label(d.span, format!("{floats} f32 registers per thread (wgmma fragments)"))
        .with_note(format!("{n} CTA{} x {} threads leave {budget} registers per thread ({} per SM), and ptxas needs some for addresses and descriptors beside the accumulator", if n == 1 { "" } else { "s" }, k.threads, info.registers_per_sm))
        .with_note(help));
    }
    // The TMEM planner's one allocation (the validator requires exactly one).
    let mut tmem = None;
    k.walk(|i| {
        if let crate::ir::Op::TmemAlloc { columns } = k.insts[i].op {
            tmem = tmem.max(Some(columns));
        }
    });
    if let (Some(cols), Some(t)) = (tmem, info.tmem) {
        if n * cols > t.columns {
            return Err(Diagnostic::error(
                Code::TmemOverBudget,
                format!("kernel `{}` asks for {n} CTAs per SM on {}, but each allocates {cols} tensor-memory columns", k.name, info.name),
                span,
                format!("{n} CTAs per SM"),
            )
            .with_note(format!("{n} x {cols} = {} columns; an SM has {} (a CTA past them waits in tcgen05.alloc until another deallocates)", n * cols, t.columns))
            .with_note(format!("help: declare ctas_per_sm({}: {}) or fewer", info.name, (t.columns / cols).max(1))));
        }
    }
    Ok(())
}
