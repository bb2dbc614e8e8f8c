//! The `tilec build` driver: checked and planned IR (from [`crate::frontend`]) → PTX per kernel
//! and target ([`crate::backend`]) → files, cubins and metadata ([`crate::artifact`]).
//!
//! Separated from the CLI so that tests and the benchmark can call it. Code generation time is
//! measured apart from ptxas (the 300 ms budget of the issue excludes ptxas).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tilec_abi::meta::{ArtifactFiles, KernelMeta};

use crate::artifact::{self, ArtifactError, MetaInput};
use crate::backend::{self, BackendError, Compiled, Target, TmemLayout};
use crate::diag::Diagnostics;
use crate::frontend::{check_source, Checked, Options};
use crate::ir::validate::{validate, Validated};

/// Errors of a build (besides diagnostics on the source, which come back in [`BuildError::Source`]).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The program has errors.
    #[error("the program has errors")]
    Source(Diagnostics),
    /// The back end failed for a kernel.
    #[error("{kernel} ({target}): {source}")]
    Backend {
        /// Kernel.
        kernel: String,
        /// Target.
        target: Target,
        /// The error.
        source: BackendError,
    },
    /// Writing artifacts or running ptxas failed.
    #[error("{kernel} ({target}): {source}")]
    Artifact {
        /// Kernel.
        kernel: String,
        /// Target.
        target: Target,
        /// The error.
        source: ArtifactError,
    },
}

/// Options of a build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Targets to build.
    pub targets: Vec<Target>,
    /// Output folder (created if missing); `None` compiles without writing files.
    pub out_dir: Option<PathBuf>,
    /// Run ptxas when it is found.
    pub ptxas: bool,
    /// Also write `<kernel>.<target>.ll` (LLVM IR before optimisation).
    pub write_llvm: bool,
    /// Front-end options.
    pub frontend: Options,
    /// The build cache ([`crate::cache`]): PTX and cubins of inputs LLVM and ptxas have seen.
    pub cache: Option<std::sync::Arc<crate::cache::BuildCache>>,
}

impl BuildOptions {
    /// PTX for `targets` in memory: no output folder, no ptxas, no `.ll` files, the default
    /// front-end options, no build cache. The other settings by struct update, e.g.
    /// `BuildOptions { ptxas: true, ..BuildOptions::ptx_only(Target::ALL.to_vec()) }`.
    pub fn ptx_only(targets: Vec<Target>) -> BuildOptions {
        BuildOptions { targets, out_dir: None, ptxas: false, write_llvm: false, frontend: Options::default(), cache: None }
    }
}

/// One kernel built for one target.
#[derive(Debug)]
pub struct Built {
    /// Kernel name.
    pub kernel: String,
    /// Target.
    pub target: Target,
    /// Back-end output.
    pub compiled: Compiled,
    /// The metadata (also written to disk when `out_dir` is set).
    pub meta: KernelMeta,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// ptxas's performance advisories ([`artifact::ptxas_advisories`]), when it ran.
    pub ptxas_advisories: Vec<String>,
}

/// Result of a build.
#[derive(Debug)]
pub struct BuildReport {
    /// The front end's result (IR, plans, warnings).
    pub checked: Checked,
    /// Every (kernel, target) built.
    pub built: Vec<Built>,
    /// Every (operator, target) plan.
    pub plans: Vec<BuiltPlan>,
    /// Wall time of front end + code generation (no ptxas, no file writes).
    pub compile_time: Duration,
    /// Whether ptxas was found and ran.
    pub ptxas_ran: bool,
}

/// One operator plan for one target.
#[derive(Debug)]
pub struct BuiltPlan {
    /// The plan.
    pub plan: tilec_abi::plan::OperatorPlan,
    /// `<operator>.<target>.plan.json`, when written.
    pub file: Option<PathBuf>,
}

/// Builds a source text. `path` is recorded in the metadata; imports resolve from its directory.
///
/// # Errors
/// [`BuildError::Source`] with the diagnostics when the program has errors; back-end and
/// artifact errors per kernel and target.
pub fn build_source(src: &str, path: &str, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let frontend = Options { targets: opts.targets.clone(), ..opts.frontend.clone() }.for_file(Path::new(path));
    let checked = check_source(src, &frontend);
    if !checked.ok() {
        return Err(BuildError::Source(checked.diags));
    }
    let mut jobs = vec![];
    for pk in checked.kernels() {
        let layout = TmemLayout::from_plan(pk.tmem);
        // `check_source` validated every kernel it kept; this only re-derives the analysis.
        let v = validate(pk.kernel).map_err(|errs| BuildError::Backend {
            kernel: pk.kernel.name.clone(),
            target: opts.targets.first().copied().unwrap_or(Target::Sm100a),
            source: BackendError::Invalid(format!("invalid IR: {}", errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))),
        })?;
        for tp in pk.targets {
            jobs.push(Job { kernel: v.clone(), tmem: pk.tmem, layout: layout.clone(), plan: tp });
        }
    }
    let results = compile_parallel(&jobs, opts.cache.as_deref(), opts.write_llvm);
    let mut compiled = vec![];
    for (j, r) in jobs.iter().zip(results) {
        let t = j.plan.target;
        let k = j.kernel.kernel();
        let c = r.map_err(|source| BuildError::Backend { kernel: k.name.clone(), target: t, source })?;
        compiled.push((k, j.tmem, t, c));
    }
    let compile_time = t0.elapsed();
    let ptxas_path = if opts.ptxas { artifact::find_ptxas() } else { None };
    if let Some(dir) = &opts.out_dir {
        std::fs::create_dir_all(dir).map_err(|source| BuildError::Artifact {
            kernel: String::new(),
            target: opts.targets.first().copied().unwrap_or(Target::Sm100a),
            source: ArtifactError::Io { path: dir.clone(), source },
        })?;
    }
    let mut built = vec![];
    for (k, plan, t, c) in compiled {
        let err = |source| BuildError::Artifact { kernel: k.name.clone(), target: t, source };
        let stem = format!("{}.{}", k.name, t.name());
        let mut files = vec![];
        let mut ptxas = None;
        let mut advisories = vec![];
        let mut cubin_name = None;
        if let Some(dir) = &opts.out_dir {
            let ptx_path = artifact::write(dir, &format!("{stem}.ptx"), c.ptx.as_bytes()).map_err(err)?;
            files.push(ptx_path.clone());
            if opts.write_llvm {
                files.push(artifact::write(dir, &format!("{stem}.ll"), c.llvm_ir.as_deref().unwrap_or_default().as_bytes()).map_err(err)?);
            }
            if ptxas_path.is_some() {
                let cubin = dir.join(format!("{stem}.cubin"));
                let (info, notes) = assemble_cached(&ptx_path, &cubin, t, &c.ptx, ptxas_path.as_deref(), opts.cache.as_deref()).map_err(|e| err(residency_help(k, t, e)))?;
                launchable(k, t, c.threads, info.registers).map_err(err)?;
                ptxas = Some(info);
                advisories = notes;
                cubin_name = Some(format!("{stem}.cubin"));
                files.push(cubin);
            }
        }
        // An imported kernel records the file it is defined in.
        let origin = checked.module.kernels.iter().position(|x| x.name == k.name).and_then(|i| checked.origins[i]).map(|i| &checked.imports[i]);
        let origin_path = origin.map(|f| f.path.display().to_string());
        let m = MetaInput {
            source_path: origin_path.as_deref().unwrap_or(path),
            source: origin.map_or(src.as_bytes(), |f| f.src.as_bytes()),
            plan: Some(plan),
            target: t,
            compiled: &c,
            ptxas,
            files: ArtifactFiles { ptx: format!("{stem}.ptx"), cubin: cubin_name },
        };
        let meta = artifact::kernel_meta(k, &m).map_err(err)?;
        if let Some(dir) = &opts.out_dir {
            let json = meta.to_json_string().map_err(|e| err(ArtifactError::Meta(e.to_string())))?;
            files.push(artifact::write(dir, &format!("{stem}.meta.json"), json.as_bytes()).map_err(err)?);
        }
        built.push(Built { kernel: k.name.clone(), target: t, compiled: c, meta, files, ptxas_advisories: advisories });
    }
    let mut plans = vec![];
    for op in &checked.module.operators {
        for &t in &opts.targets {
            let err = |source| BuildError::Artifact { kernel: op.name.clone(), target: t, source };
            let plan = artifact::operator_plan(op, &checked.module.size_params, t, path, src.as_bytes()).map_err(err)?;
            let mut file = None;
            if let Some(dir) = &opts.out_dir {
                let json = plan.to_json_string().map_err(|e| err(ArtifactError::Meta(e.to_string())))?;
                file = Some(artifact::write(dir, &format!("{}.{}.plan.json", op.name, t.name()), json.as_bytes()).map_err(err)?);
            }
            plans.push(BuiltPlan { plan, file });
        }
    }
    Ok(BuildReport { checked, built, plans, compile_time, ptxas_ran: ptxas_path.is_some() && opts.out_dir.is_some() })
}

/// Whether one CTA of `threads` threads at `registers` registers per thread fits an SM's register
/// file on `t`: at most the budget of one resident CTA (`residency::register_budget`, the rule
/// `ctas_per_sm` declarations use). Without launch bounds (no `ctas_per_sm`) ptxas may exceed it
/// — gemm at `threads(640)` took 161 registers, 103,040 per CTA — and the launch would fail; the
/// build refuses instead.
fn launchable(k: &crate::ir::Kernel, t: Target, threads: u32, registers: u32) -> Result<(), ArtifactError> {
    if registers <= crate::passes::residency::register_budget(t.info(), 1, threads) {
        return Ok(());
    }
    // For the message: registers are allocated per warp, in units of 256 (8 per thread).
    let file = t.info().registers_per_sm;
    let per_warp = (registers * 32).div_ceil(256) * 256;
    let needed = threads.div_ceil(32) * per_warp;
    let most = file / per_warp.max(1) * 32;
    Err(ArtifactError::RegistersPerCta { kernel: k.name.clone(), target: t.name().into(), registers, threads, needed, file, most })
}

/// ptxas's error, with a help line when it ran out of registers in a kernel whose declared
/// residency (`ctas_per_sm`) set its register budget.
fn residency_help(k: &crate::ir::Kernel, t: Target, e: ArtifactError) -> ArtifactError {
    match (e, k.residency(t)) {
        (ArtifactError::Ptxas { target, message }, Some((n, _))) if message.contains("Insufficient registers") => {
            let budget = crate::passes::residency::register_budget(t.info(), n, k.threads);
            let sep = if message.ends_with('\n') { "" } else { "\n" };
            let message = format!("{message}{sep}help: `ctas_per_sm({}: {n})` in kernel `{}` leaves ptxas {budget} registers per thread ({n} CTAs of {} threads); declare fewer CTAs per SM", t.name(), k.name, k.threads);
            ArtifactError::Ptxas { target, message }
        }
        (e, _) => e,
    }
}

/// ptxas on `ptx_path` (text `ptx`) into `cubin`, or the cubin and report `cache` holds for
/// this PTX, target and ptxas ([`crate::cache`]).
fn assemble_cached(ptx_path: &Path, cubin: &Path, t: Target, ptx: &str, ptxas: Option<&Path>, cache: Option<&crate::cache::BuildCache>) -> Result<(tilec_abi::meta::PtxasInfo, Vec<String>), ArtifactError> {
    let key = cache.zip(ptxas.and_then(crate::cache::ptxas_identity)).map(|(_, id)| crate::cache::key(&[id.as_bytes(), t.name().as_bytes(), ptx.as_bytes()]));
    let (Some(c), Some(key)) = (cache, key) else { return artifact::assemble_file_reporting(ptx_path, cubin, t) };
    if let (Some(bin), Some(report)) = (c.get(&key, "cubin"), c.get(&key, "ptxas.txt")) {
        std::fs::write(cubin, bin).map_err(|source| ArtifactError::Io { path: cubin.to_path_buf(), source })?;
        let report = String::from_utf8_lossy(&report);
        return Ok((artifact::parse_ptxas_info(&report), artifact::ptxas_advisories(&report)));
    }
    let (text, r) = artifact::assemble_file_text(ptx_path, cubin, t)?;
    if let Ok(bin) = std::fs::read(cubin) {
        c.put(&key, "cubin", &bin);
        c.put(&key, "ptxas.txt", text.as_bytes());
    }
    Ok(r)
}

/// One code-generation job: a kernel on one target.
struct Job<'a> {
    kernel: Validated<'a>,
    tmem: &'a crate::passes::tmem_plan::TmemPlan,
    layout: TmemLayout,
    plan: &'a crate::passes::target_plan::TargetPlan,
}

/// Stack of every code-generation thread. LLVM's analyses recurse with the length of the
/// program (ScalarEvolution over hundreds of sequential loops overflowed a default 2 MiB thread
/// stack: "thread has overflowed its stack", exit 134); 256 MiB of reserved address space costs
/// nothing until touched.
const CODEGEN_STACK_BYTES: usize = 256 << 20;

/// Compiles every job on all cores ([`crate::parallel`], with [`CODEGEN_STACK_BYTES`] of stack
/// each; each LLVM module has its own context, so modules are independent); results in job
/// order.
///
/// Why threads: LLVM's `default<O3>` + NVPTX code generation is nearly all of `tilec build`'s
/// time and scales with the number of modules (kernels × targets).
fn compile_parallel(jobs: &[Job<'_>], cache: Option<&crate::cache::BuildCache>, llvm_text: bool) -> Vec<Result<Compiled, BackendError>> {
    // Longest first: the cost estimate is the kernel's tile-IR length, sm_90a counting double
    // (its fragment code is per register; in gdn.tile its LLVM time is ~1.5x sm_100a's).
    let cost = |j: &Job<'_>| j.kernel.kernel().insts.len() * if j.plan.target == Target::Sm90a { 2 } else { 1 };
    crate::parallel::map_longest_first(jobs, cost, CODEGEN_STACK_BYTES, |j| backend::compile_kernel_cached(&j.kernel, &j.layout, j.plan, cache, llvm_text))
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(BackendError::Invalid("no code-generation thread could be started".into()))))
        .collect()
}

/// Reads and builds a file.
///
/// # Errors
/// As [`build_source`]; an unreadable file is [`BuildError::Artifact`] with an I/O error.
pub fn build_file(path: &Path, opts: &BuildOptions) -> Result<(String, BuildReport), BuildError> {
    let src = std::fs::read(path).map_err(|source| BuildError::Artifact {
        kernel: String::new(),
        target: opts.targets.first().copied().unwrap_or(Target::Sm100a),
        source: ArtifactError::Io { path: path.to_path_buf(), source },
    })?;
    let src = String::from_utf8_lossy(&src).into_owned();
    let r = build_source(&src, &path.display().to_string(), opts)?;
    Ok((src, r))
}
