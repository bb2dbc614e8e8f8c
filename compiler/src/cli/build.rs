//! `tilec build FILE [--target sm_100a|sm_90a|all] [-o DIR] [--emit ir,llvm,ptx,tmem-plan]`.
//!
//! Writes per kernel and target `<kernel>.<target>.ptx`, `<kernel>.<target>.cubin` (when ptxas
//! is found: `TILEC_PTXAS` or PATH) and `<kernel>.<target>.meta.json` into DIR (default `out`).
//! `--emit` additionally prints the IR, the PTX or the TMEM plan on stdout, and `llvm` writes
//! `<kernel>.<target>.ll`.
//!
//! Per operator and target it writes `<operator>.<target>.plan.json`. `--verify` then runs every
//! operator that declares `contract(member)` on the interpreter at small shapes and judges each
//! output against kverify's fp64 oracle ([`crate::verify`]), printing the error, the derived
//! bound, the margin and a verdict per output.
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
    /// Verify every operator with a `contract` against kverify's fp64 oracle (exit 1 on a
    /// violation): on the interpreter (`--verify`), or the built sm_90a artifact run by
    /// `tilec-run` on a GPU (`--verify=gpu`; without a GPU it says so and judges on the
    /// interpreter).
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
        return verify(&report.checked, gpu);
    }
    ExitCode::SUCCESS
}

/// `--verify`: judges every operator with a contract; prints one line per output and case.
/// `gpu`: `--verify=gpu`'s `tilec-run` (if found) and the folder holding the built plans.
fn verify(checked: &crate::frontend::Checked, gpu: Option<(Option<PathBuf>, PathBuf)>) -> ExitCode {
    let mut violations = 0;
    let mut judged = 0;
    let mut unjudged = 0;
    // `--verify=gpu` without a GPU (or without tilec-run): said once, then the interpreter.
    let asked_gpu = gpu.is_some();
    let mut gpu = match gpu {
        Some((Some(bin), dir)) => Some((bin, dir)),
        Some((None, _)) => {
            eprintln!("note: --verify=gpu: no tilec-run beside tilec (cargo build --release -p tilec-runtime, or pass --tilec-run): judging on the interpreter instead");
            None
        }
        None => None,
    };
    for op in &checked.module.operators {
        let Some(model) = op.contract else {
            eprintln!("verify: operator {} declares no contract: not judged", op.name);
            continue;
        };
        let opts = crate::interp::Options::default();
        let mut result = None;
        if let Some((bin, dir)) = &gpu {
            let plan = dir.join(format!("{}.sm_90a.plan.json", op.name));
            println!("verify {} against kverify's fp64 oracle of {} (token-serial), on the GPU ({}):", op.name, model.name(), plan.display());
            let work = std::env::temp_dir().join(format!("tilec-verify-gpu-{}-{}", std::process::id(), op.name));
            match crate::verify::verify_operator_on(&checked.module, op, &mut crate::verify::gpu::runner(bin, &plan, &work)) {
                Err(crate::verify::VerifyError::NoGpu(why)) => eprintln!("note: --verify=gpu: no GPU can run {} ({why}): judging on the interpreter instead", plan.display()),
                r => result = Some(r),
            }
            std::fs::remove_dir_all(&work).ok();
        }
        if result.is_none() {
            gpu = None;
        }
        let result = match result {
            Some(r) => r,
            None => {
                println!("verify {} against kverify's fp64 oracle of {} (token-serial), on the interpreter ({} numerics):", op.name, model.name(), opts.target);
                crate::verify::verify_operator(&checked.module, op, &opts)
            }
        };
        let w = if op.params.iter().any(|p| p.name == "cu_seqlens") { 44 } else { 28 };
        println!("  {:<w$} {:<7} {:>17} {:>9} {:>8}  verdict", "case", "output", "max|err|/max|ref|", "bound", "margin");
        // One row per judgement; the (judged, violations) counts.
        let rows = |js: &mut dyn Iterator<Item = &crate::verify::Judgement>| {
            let (mut n, mut bad) = (0, 0);
            for j in js {
                n += 1;
                let verdict = if j.ok() { "ok" } else { "VIOLATION" };
                bad += usize::from(!j.ok());
                // Varlen: the packed sequence judged on its own scale, where it is the nearest its bound.
                let case = j.sequence.map_or_else(|| j.case.clone(), |i| format!("{} seq {i}", j.case));
                // A bound of 0 (isolation) asks for equal bits: no margin to give.
                let margin = if j.bound == 0.0 { "bitwise".to_string() } else { format!("{:.1}×", j.bound / j.error) };
                println!("  {case:<w$} {:<7} {:>17.3e} {:>9.2e} {margin:>8}  {verdict}", j.output, j.error, j.bound);
            }
            (n, bad)
        };
        // R is per output (the same in every case): "dq 33, dk 50, …".
        let per_output = |js: &[crate::verify::Judgement]| {
            let mut per: Vec<(&str, usize)> = js.iter().map(|j| (j.output.as_str(), j.roundings)).collect();
            per.sort_unstable();
            per.dedup();
            per.iter().map(|(o, r)| format!("{o} {r}")).collect::<Vec<_>>().join(", ")
        };
        match result {
            Ok(v) => {
                let (n, bad) = rows(&mut v.judgements.iter().chain(&v.isolation));
                (judged, violations) = (judged + n, violations + bad);
                if let Some(j) = v.judgements.first() {
                    println!("  bound = {} √R κu: R = the rounding points whose results reach the output ({}); κu = the oracle's change when every input moves by one rounding of its dtype (at least u = 2^{})", crate::verify::LAMBDA, per_output(&v.judgements), j.unit.log2());
                }
                for n in &v.not_run {
                    println!("  not run: {n}");
                }
                // The mathematics alone: the same operator with nothing rounded to 16 bits.
                println!("  wide twin of {} (every bf16/f16 made f32), on the interpreter:", op.name);
                match crate::verify::verify_wide(&checked.module, op, &opts) {
                    Ok(wv) => {
                        let (n, bad) = rows(&mut wv.judgements.iter());
                        (judged, violations) = (judged + n, violations + bad);
                        if let Some(j) = wv.judgements.first() {
                            println!("  bound = γ_R κ = R κu / (1 − R u): R = the f32 roundings whose results reach the output ({}); u = 2^{}", per_output(&wv.judgements), j.unit.log2());
                        }
                    }
                    Err(e) => {
                        eprintln!("error: verify: wide twin: {e}");
                        unjudged += 1;
                    }
                }
            }
            Err(e) => {
                // Not a violation, but nothing was judged: say so and go on with the others.
                eprintln!("error: verify: {e}");
                unjudged += 1;
            }
        }
    }
    if judged == 0 && unjudged == 0 {
        eprintln!("verify: no operator declares a contract: nothing judged");
        return ExitCode::SUCCESS;
    }
    if unjudged > 0 {
        eprintln!("error: verify: {unjudged} operator(s) could not be judged");
        return ExitCode::from(1);
    }
    if violations > 0 {
        eprintln!("error: verify: {violations} of {judged} outputs outside their bound");
        return ExitCode::from(1);
    }
    // Said again at the end: a `--verify=gpu` that fell back judged nothing on a GPU.
    let place = match (asked_gpu, gpu.is_some()) {
        (true, false) => " (on the interpreter: no GPU run was possible)",
        (true, true) => " (on the GPU)",
        _ => "",
    };
    eprintln!("verify: {judged} outputs judged{place}, all within their bounds");
    ExitCode::SUCCESS
}
