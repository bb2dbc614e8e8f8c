//! Build artifacts: per kernel and target `<kernel>.<target>.ptx`, a cubin when ptxas is found
//! (`TILEC_PTXAS`, else `ptxas` on PATH), and `<kernel>.<target>.meta.json` in the runtime's
//! schema ([`tilec_abi::meta::KernelMeta`], `docs/metadata.md`).
//!
//! ptxas runs with `-v`; its resource lines ("Used N registers", "N bytes spill stores", …) are
//! parsed into [`PtxasInfo`]. A failing ptxas is an error carrying ptxas's own message.

use std::path::{Path, PathBuf};
use std::process::Command;

use tilec_abi::hash::fnv1a64_hex;
use tilec_abi::meta::{
    ArtifactFiles, CompilerInfo, Contract, DType, KernelMeta, LaunchMeta, Lifecycle, ParamMeta, PtxasInfo, Role, SourceInfo, SCHEMA_VERSION,
};

use crate::backend::{Compiled, Target};
use crate::ir::{Kernel, Op, Operator, ParamData, ParamKind, SizeExpr};
use tilec_abi::plan::{ArgBinding, BufferMeta, LaunchStep, OperatorPlan, PLAN_SCHEMA_VERSION};
use crate::passes::tmem_plan::TmemPlan;

/// Errors while producing artifacts.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// ptxas could not be started.
    #[error("cannot run ptxas at {path}: {source}")]
    PtxasSpawn {
        /// The ptxas path tried.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// ptxas rejected the PTX; carries its output.
    #[error("ptxas failed for {target}:\n{message}")]
    Ptxas {
        /// Target.
        target: String,
        /// ptxas's stderr and stdout.
        message: String,
    },
    /// The registers ptxas gave each thread do not fit one CTA of the launch's threads into an
    /// SM's register file: the kernel would build and then fail to launch.
    #[error("kernel `{kernel}` cannot launch on {target}: ptxas gave it {registers} registers per thread, and {threads} threads per CTA take {needed} of the {file} an SM has\nhelp: at {registers} registers a CTA has room for {most} threads; use fewer, or declare `ctas_per_sm({target}: 1)` so that ptxas fits {threads} threads' registers (spilling if it must)")]
    RegistersPerCta {
        /// Kernel.
        kernel: String,
        /// Target.
        target: String,
        /// Registers per thread (ptxas).
        registers: u32,
        /// Threads per CTA at launch.
        threads: u32,
        /// Registers one CTA takes, allocated per warp in units of 256.
        needed: u32,
        /// The register file of an SM.
        file: u32,
        /// The most threads (whole warps) that fit at these registers.
        most: u32,
    },
    /// A parameter has no metadata dtype (bool).
    #[error("parameter `{0}` has a type the metadata schema cannot describe")]
    ParamType(String),
    /// JSON serialisation failed.
    #[error("metadata: {0}")]
    Meta(String),
}

/// ptxas: `TILEC_PTXAS` if set and present, else `ptxas` found on PATH.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TILEC_PTXAS").map(PathBuf::from) {
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file())
}

#[cfg(test)]
mod advisory_tests {
    #[test]
    fn advisories_are_the_c75_lines_without_their_prefix() {
        let text = "ptxas info    : Used 242 registers, used 1 barriers\nptxas info    : (C7517) wgmma.wait_group is injected in around line 2145 by compiler\n";
        assert_eq!(super::ptxas_advisories(text), vec!["(C7517) wgmma.wait_group is injected in around line 2145 by compiler".to_string()]);
        assert!(super::ptxas_advisories("ptxas info    : Used 8 registers").is_empty());
    }
}

/// Parses the resource lines of `ptxas -v` (registers, spills, shared memory, stack frame).
/// Missing fields are 0.
pub fn parse_ptxas_info(text: &str) -> PtxasInfo {
    let num_before = |line: &str, unit: &str| -> Option<u32> {
        let i = line.find(unit)?;
        line[..i].split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).last()?.parse().ok()
    };
    let mut info = PtxasInfo { registers: 0, spill_store_bytes: 0, spill_load_bytes: 0, shared_bytes: 0, stack_bytes: 0 };
    for line in text.lines() {
        if let Some(v) = num_before(line, " registers") {
            info.registers = v;
        }
        if let Some(v) = num_before(line, " bytes smem") {
            info.shared_bytes = v;
        }
        if let Some(v) = num_before(line, " bytes spill stores") {
            info.spill_store_bytes = v;
        }
        if let Some(v) = num_before(line, " bytes spill loads") {
            info.spill_load_bytes = v;
        }
        if let Some(v) = num_before(line, " bytes stack frame") {
            info.stack_bytes = v;
        }
    }
    info
}

/// Assembles `ptx` for `target` in a scratch folder; returns the cubin and ptxas's report.
///
/// # Errors
/// [`ArtifactError::PtxasSpawn`] when ptxas is missing or cannot start, [`ArtifactError::Ptxas`]
/// with ptxas's message when it rejects the PTX.
pub fn run_ptxas(ptx: &str, target: Target) -> Result<(Vec<u8>, PtxasInfo), ArtifactError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("tilec-ptxas-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).map_err(|source| ArtifactError::Io { path: dir.clone(), source })?;
    let ptx_path = dir.join("k.ptx");
    let cubin_path = dir.join("k.cubin");
    std::fs::write(&ptx_path, ptx).map_err(|source| ArtifactError::Io { path: ptx_path.clone(), source })?;
    let r = assemble_file(&ptx_path, &cubin_path, target).and_then(|info| {
        let cubin = std::fs::read(&cubin_path).map_err(|source| ArtifactError::Io { path: cubin_path.clone(), source })?;
        Ok((cubin, info))
    });
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// ptxas's performance advisories in its `-v` report: the info lines with a `(C75nn)` code,
/// e.g. C7517 "wgmma.wait_group is injected ... to allow use of registers defined by GMMA" (it
/// waited for every wgmma in flight where the code meant to keep some running) or C7510 "wgmma
/// serialized". Generated code should give none.
pub fn ptxas_advisories(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.find("(C75").map(|at| l[at..].trim().to_string())).collect()
}

/// Runs `ptxas -arch=<target> -v ptx -o cubin`; returns its resource report and
/// [`ptxas_advisories`].
///
/// # Errors
/// As [`run_ptxas`].
pub fn assemble_file_reporting(ptx: &Path, cubin: &Path, target: Target) -> Result<(PtxasInfo, Vec<String>), ArtifactError> {
    assemble_file_text(ptx, cubin, target).map(|r| r.1)
}

/// [`assemble_file_reporting`], with ptxas's `-v` text (what the build cache stores).
///
/// # Errors
/// As [`run_ptxas`].
pub fn assemble_file_text(ptx: &Path, cubin: &Path, target: Target) -> Result<(String, (PtxasInfo, Vec<String>)), ArtifactError> {
    let exe = find_ptxas().unwrap_or_else(|| PathBuf::from("ptxas"));
    let out = Command::new(&exe)
        .arg(format!("-arch={}", target.name()))
        .arg("-v")
        .arg(ptx)
        .arg("-o")
        .arg(cubin)
        .output()
        .map_err(|source| ArtifactError::PtxasSpawn { path: exe.clone(), source })?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(ArtifactError::Ptxas { target: target.name().into(), message: text });
    }
    let r = (parse_ptxas_info(&text), ptxas_advisories(&text));
    Ok((text, r))
}

/// [`assemble_file_reporting`] without the advisories.
///
/// # Errors
/// As [`run_ptxas`].
pub fn assemble_file(ptx: &Path, cubin: &Path, target: Target) -> Result<PtxasInfo, ArtifactError> {
    assemble_file_reporting(ptx, cubin, target).map(|r| r.0)
}

/// The metadata record of a parameter, shape texts written by `size_text`: an `out` tensor is
/// [`Role::Output`], everything else [`Role::Input`] (a kernel's loaded output is made `inout`
/// by [`kernel_meta`]). `None` for a predicate parameter, which has no schema dtype.
pub fn param_record(d: &ParamData, size_text: impl Fn(&SizeExpr) -> String) -> Option<ParamMeta> {
    Some(match &d.kind {
        ParamKind::Tensor { elem, shape, output } => {
            ParamMeta { name: d.name.clone(), dtype: elem.host_dtype()?, shape: shape.iter().map(size_text).collect(), role: if *output { Role::Output } else { Role::Input } }
        }
        ParamKind::Scalar(e) => ParamMeta { name: d.name.clone(), dtype: e.host_dtype()?, shape: vec![], role: Role::Input },
    })
}

/// What [`kernel_meta`] needs besides the kernel.
pub struct MetaInput<'a> {
    /// Source path as given.
    pub source_path: &'a str,
    /// Source bytes (hashed).
    pub source: &'a [u8],
    /// The TMEM plan, when the planner ran.
    pub plan: Option<&'a TmemPlan>,
    /// Target.
    pub target: Target,
    /// The back end's result.
    pub compiled: &'a Compiled,
    /// ptxas's report, when it ran.
    pub ptxas: Option<PtxasInfo>,
    /// Artifact file names.
    pub files: ArtifactFiles,
}

/// The metadata of one kernel for one target. Parameters are the declared ones followed by one
/// `i32` input per symbolic size (the PTX argument order); a tensor the kernel both loads and
/// stores is `inout`.
///
/// # Errors
/// [`ArtifactError::ParamType`] for a parameter without a schema dtype.
pub fn kernel_meta(k: &Kernel, m: &MetaInput<'_>) -> Result<KernelMeta, ArtifactError> {
    let mut loaded = std::collections::HashSet::new();
    k.walk(|i| {
        if let Op::Load { src, .. } = &k.insts[i].op {
            loaded.insert(*src);
        }
    });
    let mut params = vec![];
    for (p, d) in k.params.iter() {
        let mut m = param_record(d, |s| k.size_text(s)).ok_or_else(|| ArtifactError::ParamType(d.name.clone()))?;
        if m.role == Role::Output && loaded.contains(&p) {
            m.role = Role::Inout;
        }
        params.push(m);
    }
    for s in &k.sizes {
        params.push(ParamMeta { name: s.1.clone(), dtype: DType::I32, shape: vec![], role: Role::Input });
    }
    let mut lifecycle = Lifecycle { alloc: 0, relinquish: 0, dealloc: 0 };
    k.walk(|i| match k.insts[i].op {
        Op::TmemAlloc { .. } => lifecycle.alloc += 1,
        Op::TmemRelinquish => lifecycle.relinquish += 1,
        Op::TmemDealloc { .. } => lifecycle.dealloc += 1,
        _ => {}
    });
    let tmem = match m.plan {
        Some(p) if m.target.has_tcgen05() && p.alloc_columns > 0 => {
            let mut t = crate::passes::tmem_report::to_meta(p);
            t.lifecycle = lifecycle; // counted in the IR that was compiled
            Some(t)
        }
        _ => None,
    };
    Ok(KernelMeta {
        schema_version: SCHEMA_VERSION,
        kernel: k.name.clone(),
        target: m.target.name().into(),
        compiler: CompilerInfo { name: "tilec".into(), version: env!("CARGO_PKG_VERSION").into() },
        source: SourceInfo { path: m.source_path.into(), hash: fnv1a64_hex(m.source) },
        sizes: k.sizes.values().cloned().collect(),
        params,
        launch: LaunchMeta { grid: k.grid.clone().map(|g| k.size_text(&g)), block_threads: m.compiled.threads, dynamic_smem_bytes: m.compiled.smem_bytes },
        tmem,
        // The schema's `smem_bytes` is *static* shared memory; every buffer of this back end is
        // in the dynamic (extern) array, whose size is `launch.dynamic_smem_bytes`.
        smem_bytes: 0,
        ptxas: m.ptxas.clone(),
        // A kernel built for a declared residency on this target (`ctas_per_sm`) lets ptxas
        // spill to fit N CTAs' registers — the author's trade, measured (docs/language.md,
        // "Residency"); every other kernel's contract forbids spills (RES-02 checks it). The
        // reference is the kverify class a `contract(class)` names (`matmul`), if any.
        contract: Contract { no_spill: k.residency(m.target).is_none(), accumulator: DType::F32, reference: k.contract.as_ref().map(|c| c.class.clone()), envelope: vec![] },
        files: m.files.clone(),
        tensor_maps: m.compiled.tensor_maps.clone(),
    })
}

/// The plan of operator `op` for target `t` (`<operator>.<target>.plan.json`): its parameters
/// as metadata records (`out` tensors [`Role::Output`]), its buffers with shape texts, and per
/// launch the kernel's metadata file name and the argument routing.
///
/// # Errors
/// [`ArtifactError::ParamType`] for a parameter or buffer without a schema dtype.
pub fn operator_plan(op: &Operator, size_params: &[crate::ir::SizeParam], t: Target, source_path: &str, source: &[u8]) -> Result<OperatorPlan, ArtifactError> {
    let params = op.params.iter().map(|d| param_record(d, |s| op.size_text(s)).ok_or_else(|| ArtifactError::ParamType(d.name.clone()))).collect::<Result<Vec<_>, _>>()?;
    let mut buffers = vec![];
    for b in &op.buffers {
        buffers.push(BufferMeta { name: b.name.clone(), dtype: b.elem.host_dtype().ok_or_else(|| ArtifactError::ParamType(b.name.clone()))?, shape: b.shape.iter().map(|s| op.size_text(s)).collect() });
    }
    Ok(OperatorPlan {
        schema_version: PLAN_SCHEMA_VERSION,
        operator: op.name.clone(),
        target: t.name().into(),
        compiler: CompilerInfo { name: "tilec".into(), version: env!("CARGO_PKG_VERSION").into() },
        source: SourceInfo { path: source_path.into(), hash: fnv1a64_hex(source) },
        sizes: op.sizes.values().cloned().collect(),
        params,
        buffers,
        launches: op
            .launches
            .iter()
            .map(|l| LaunchStep {
                kernel: l.kernel.clone(),
                meta: format!("{}.{}.meta.json", l.kernel, t.name()),
                args: l.args.iter().map(|(p, v)| ArgBinding { param: p.clone(), value: v.clone() }).collect(),
            })
            .collect(),
        size_params: size_params
            .iter()
            .filter_map(|sp| {
                let dims: Vec<String> = op.size_param_dims.iter().filter(|(n, _, _)| *n == sp.name).map(|(_, p, d)| format!("{p}[{d}]")).collect();
                (!dims.is_empty()).then(|| tilec_abi::plan::SizeParamMeta { name: sp.name.clone(), value: sp.value, supported: sp.supported.clone(), dims })
            })
            .collect(),
        offsets: op.offsets.iter().map(|(param, total)| tilec_abi::plan::OffsetsMeta { param: param.clone(), total: total.clone() }).collect(),
        optional: op.optional.clone(),
    })
}

/// Writes `text` to `dir/name`.
///
/// # Errors
/// [`ArtifactError::Io`].
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ArtifactError> {
    let p = dir.join(name);
    std::fs::write(&p, bytes).map_err(|source| ArtifactError::Io { path: p.clone(), source })?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_report() {
        let text = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'k' for 'sm_90a'\nptxas info    : Function properties for k\n    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\nptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]\n";
        let i = parse_ptxas_info(text);
        assert_eq!((i.registers, i.spill_store_bytes, i.spill_load_bytes, i.shared_bytes, i.stack_bytes), (40, 8, 4, 1024, 16));
    }
}
