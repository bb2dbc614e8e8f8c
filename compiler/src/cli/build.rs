//! `tilec build FILE [--target sm_100a|sm_90a|all] [-o DIR] [--emit ir,llvm,ptx,tmem-plan]`.
//!
//! Writes per kernel and target `<kernel>.<target>.ptx`, `<kernel>.<target>.cubin` (when ptxas
//! is found: `TILEC_PTXAS` or PATH) and `<kernel>.<target>.meta.json` into DIR (default `out`).
//! `--emit` additionally prints the IR, the PTX or the TMEM plan on stdout, and `llvm` writes
//! `<kernel>.<target>.ll`.
//!
//! Per operator and target it writes `<operator>.<target>.plan.json`. `--verify` then runs every
//! operator that declares `contract(member)` and every kernel that declares `contract(class)`
//! on the interpreter at small shapes and judges each output against kverify's fp64 references
//! ([`crate::verify`], [`crate::verify::kernel`]; report: [`super::verify`]), printing the
//! error, the derived bound, the margin and a verdict per output.
//!
//! Exit codes: 0 — built (and verified); 1 — the program has errors, code generation failed or a
//! verified output is outside its bound; 2 — the file
//! could not be read, an output could not be written, or ptxas failed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::TargetArg;
use crate::build::{build_source, BuildError, BuildOptions};
use crate::frontend::Options;
use crate::ir::write::write_module;
use crate::passes::tmem_report;


/// `--emit` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Emit {
    /// Print the tile IR after planning.
    Ir,
    /// Write `<kernel>.<target>.ll` (LLVM IR before optimisation).
    Llvm,
    /// Print the PTX.
    Ptx,
    /// Print the TMEM plan (table and column map).
    TmemPlan,
}

/// Arguments of `tilec build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The .tile file.
    pub file: PathBuf,
    /// Size parameters (`--const K=64`).
    #[command(flatten)]
    pub consts: super::ConstArgs,
    /// Target(s).
    #[arg(long, value_enum, default_value = "all")]
    pub target: TargetArg,
    /// Output folder.
    #[arg(short = 'o', long = "out", default_value = "out")]
    pub out: PathBuf,
    /// Extra outputs (repeatable, or comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub emit: Vec<Emit>,
    /// Do not run ptxas even when it is found.
    #[arg(long)]
    pub no_ptxas: bool,

    /// Compile every module afresh: neither read nor write the build cache (PTX per LLVM module,
    /// cubins per PTX; in `TILEC_CACHE_DIR`, else `$XDG_CACHE_HOME/tilec` or `~/.cache/tilec`;
    /// `TILEC_CACHE=0` also turns it off)
    #[arg(long)]
    pub no_cache: bool,
    /// Colour diagnostics (default: when stderr is a terminal).
    #[arg(long)]
    pub color: Option<bool>,
    /// Verify every operator and kernel with a `contract` against kverify's fp64 references
    /// (exit 1 on a violation): on the interpreter (`--verify`), or the built sm_90a artifacts
    /// (operator plans, kernels) run by `tilec-run` on a GPU (`--verify=gpu`; without a GPU it
    /// says so and judges on the interpreter).
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "interp")]
    pub verify: Option<VerifyOn>,
    /// The `tilec-run` for `--verify=gpu` (default: the one beside this tilec).
    #[arg(long, value_name = "PATH")]
    pub tilec_run: Option<PathBuf>,
}

/// Where `--verify` runs the operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyOn {
    /// The CPU interpreter (the numerical reference of the lowering).
    Interp,
    /// The built sm_90a plan on a GPU, through `tilec-run`.
    Gpu,
}

/// Runs `tilec build`.
pub fn run(a: &BuildArgs) -> ExitCode {
    let src = match std::fs::read(&a.file) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    let targets = a.target.targets();
    let Some(size_values) = a.consts.values_or_report() else { return ExitCode::from(2) };
    let cache = if a.no_cache { None } else { crate::cache::BuildCache::from_env().map(std::sync::Arc::new) };
    let opts = BuildOptions { targets, out_dir: Some(a.out.clone()), ptxas: !a.no_ptxas, write_llvm: a.emit.contains(&Emit::Llvm), frontend: Options { size_values, ..Options::default() }, cache: cache.clone() };
    let name = a.file.display().to_string();
    let color = a.color.unwrap_or_else(|| std::io::stderr().is_terminal());
    let report = match build_source(&src, &name, &opts) {
        Ok(r) => r,
        Err(BuildError::Source(d)) => {
            eprint!("{}", d.render(&name, &src, color));
            return ExitCode::from(1);
        }
        Err(BuildError::Backend { kernel, target, source }) => {
            // Valid, planned IR the back end cannot lower is the compiler's own failure: say so,
            // and point at the statement being lowered.
            let msg = format!("internal compiler error: kernel `{kernel}` on {target}: {source}");
            match source.span() {
                Some(span) => {
                    let d = crate::diag::Diagnostic::error(crate::diag::Code::Internal, msg, span, "while lowering this").with_note("help: please report this with the .tile file");
                    let mut ds = crate::diag::Diagnostics::default();
                    ds.push(d);
                    eprint!("{}", ds.render(&name, &src, color));
                }
                None => eprintln!("error: {msg}"),
            }
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if !report.checked.diags.is_empty() {
        eprint!("{}", report.checked.diags.render(&name, &src, color));
    }
    for e in &a.emit {
        match e {
            Emit::Ir => {
                print!("{}", write_module(&report.checked.module));
                for pk in report.checked.kernels() {
                    for tp in pk.targets {
                        print!("{}", crate::passes::layout_report::render(pk.kernel, tp));
                    }
                }
            }
            Emit::TmemPlan => report.checked.plans.iter().for_each(|p| print!("{}", tmem_report::render_text(p))),
            Emit::Ptx => report.built.iter().for_each(|b| print!("{}", b.compiled.ptx)),
            Emit::Llvm => {}
        }
    }
    for b in &report.built {
        let regs = b.meta.ptxas.as_ref().map(|p| format!(", {} registers, {} B spills", p.registers, p.spill_store_bytes)).unwrap_or_default();
        eprintln!("built {} for {}: {} B dynamic smem{regs}", b.kernel, b.target, b.compiled.smem_bytes);
        for note in &b.ptxas_advisories {
            eprintln!("  ptxas: {note}");
        }
    }
    for p in &report.plans {
        let kernels: Vec<&str> = p.plan.launches.iter().map(|l| l.kernel.as_str()).collect();
        let file = p.file.as_ref().map(|f| format!(" → {}", f.display())).unwrap_or_default();
        let nb = p.plan.buffers.len();
        eprintln!("planned operator {} for {}: {} launch{} ({}), {nb} buffer{}{file}", p.plan.operator, p.plan.target, kernels.len(), if kernels.len() == 1 { "" } else { "es" }, kernels.join(" → "), if nb == 1 { "" } else { "s" });
    }
    if let Some(c) = &cache {
        let ((ph, pm), (ch, cm)) = (c.stats("ptx"), c.stats("cubin"));
        if ph + pm > 0 {
            let cubins = if ch + cm > 0 { format!(", {ch} of {} cubins", ch + cm) } else { String::new() };
            eprintln!("build cache: {ph} of {} PTX{cubins} reused from {} (--no-cache: compile afresh)", ph + pm, c.dir().display());
        }
        match crate::cache::max_bytes_from_env() {
            Ok(limit) => {
                if let Some(t) = c.trim_after_build(limit).filter(|t| t.keys > 0) {
                    let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
                    let limit = limit.map_or(0.0, mb);
                    eprintln!("build cache: over its {limit:.0} MiB limit (TILEC_CACHE_MAX_MB): removed the {} least recently used key(s), {:.1} MiB; {:.1} MiB kept", t.keys, mb(t.freed), mb(t.kept));
                }
            }
            Err(text) => eprintln!("warning: TILEC_CACHE_MAX_MB={text:?} is not a whole number of MiB: the build cache was not trimmed\nhelp: set it to the limit in MiB (default {}), or 0 for none", crate::cache::DEFAULT_MAX_MB),
        }
    }
    if !report.ptxas_ran && !a.no_ptxas {
        eprintln!("note: ptxas not found (set TILEC_PTXAS or run scripts/setup.sh): no cubins");
    }
    eprintln!("compile time (front end + code generation, no ptxas): {:.1} ms", report.compile_time.as_secs_f64() * 1e3);
    if let Some(on) = a.verify {
        let gpu = match on {
            VerifyOn::Interp => None,
            VerifyOn::Gpu => {
                if !a.target.targets().contains(&crate::target::Target::Sm90a) {
                    eprintln!("error: --verify=gpu runs the sm_90a artifacts: build with --target sm_90a or all");
                    return ExitCode::from(2);
                }
                Some((crate::verify::gpu::tilec_run_path(a.tilec_run.as_deref()), a.out.clone()))
            }
        };
        return super::verify::verify(&report.checked, gpu);
    }
    ExitCode::SUCCESS
}
