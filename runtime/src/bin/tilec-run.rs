//! `tilec-run`: launch a tilec artifact on a GPU with inputs from a safetensors file.
//!
//! ```text
//! tilec-run ARTIFACT.meta.json --inputs IN.safetensors --out OUT.safetensors [--repeat N] [--bench]
//! ```
//! Writes the output and inout tensors of the first run. `--repeat N` runs N times on fresh
//! copies of the inputs and reports whether every run's outputs are bitwise identical (exit
//! status 3 if not). `--bench` times N launches (N from `--repeat`, default 20) with CUDA
//! events and prints the median. Scalars may be given in the inputs file as one-element
//! tensors named like the parameter, or with `--scalar NAME=VALUE`; sizes no tensor reveals
//! with `--size NAME=VALUE`. Exit status: 0 ok, 1 error, 2 usage, 3 nondeterministic outputs,
//! 4 no GPU that can run the artifact (no driver, no device, or a device of another architecture).
//!
//! Given an operator plan (`<operator>.<target>.plan.json`) instead of kernel metadata, it runs
//! the whole operator as one call (tensors stay on the device between launches) with inputs and
//! outputs named after the operator's parameters; `--repeat N` checks N runs bitwise, `--bench`
//! prints each kernel's median device time and their sum over N runs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tilec_runtime::artifact::Artifact;
use tilec_runtime::bind::{Args, Scalar};
use tilec_runtime::launch::{BenchTimes, CodeKind, Gpu, RuntimeError};
use tilec_runtime::meta::{DType, KernelMeta};
use tilec_runtime::round::{f64_to_bf16, f64_to_f16};
use tilec_runtime::st::{self, TensorMap};

#[derive(Parser, Debug)]
#[command(name = "tilec-run", version, about = "Launch a tilec artifact on a GPU")]
struct Cli {
    /// The artifact's `<kernel>.meta.json`, or an operator's `<operator>.<target>.plan.json`;
    /// code and kernel metadata files are looked up next to it.
    meta: PathBuf,
    /// Input tensors (and optionally scalars) by parameter name.
    #[arg(long)]
    inputs: PathBuf,
    /// Where to write the output / inout tensors.
    #[arg(long)]
    out: PathBuf,
    /// Run N times and check that outputs are bitwise identical (with --bench: timed launches).
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
    /// Time the launch with CUDA events and print the median of N launches.
    #[arg(long)]
    bench: bool,
    /// A scalar parameter, `NAME=VALUE` (parsed as the parameter's dtype). Repeatable.
    #[arg(long = "scalar", value_name = "NAME=VALUE")]
    scalars: Vec<String>,
    /// An explicit size, `NAME=VALUE`. Repeatable.
    #[arg(long = "size", value_name = "NAME=VALUE")]
    sizes: Vec<String>,
    /// Which code to load: auto (cubin when it matches the device, else PTX), ptx, cubin.
    #[arg(long, default_value = "auto", value_parser = ["auto", "ptx", "cubin"])]
    code: String,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

/// Errors of the command line tool, with the exit status each maps to.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Usage(String),
    /// Inputs the plan refuses (exit 1).
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Meta(#[from] tilec_runtime::meta::MetaError),
    #[error(transparent)]
    St(#[from] tilec_runtime::st::StError),
}

fn split_kv(s: &str) -> Result<(&str, &str), CliError> {
    s.split_once('=').ok_or_else(|| CliError::Usage(format!("expected NAME=VALUE, found `{s}`")))
}

fn parse_scalar(meta: &KernelMeta, name: &str, value: &str) -> Result<Scalar, CliError> {
    let p = meta
        .params
        .iter()
        .find(|p| p.name == name && p.shape.is_empty())
        .ok_or_else(|| CliError::Usage(format!("kernel `{}` has no scalar parameter `{name}`", meta.kernel)))?;
    let bad = || CliError::Usage(format!("--scalar {name}={value}: not a valid {:?}", p.dtype));
    Ok(match p.dtype {
        DType::I32 => Scalar::I32(value.parse().map_err(|_| bad())?),
        DType::F32 => Scalar::F32(value.parse().map_err(|_| bad())?),
        // One correct rounding from the decimal's f64 value (`half`'s `from_f64` rounds twice).
        DType::F16 => Scalar::F16(f64_to_f16(value.parse().map_err(|_| bad())?)),
        DType::Bf16 => Scalar::Bf16(f64_to_bf16(value.parse().map_err(|_| bad())?)),
    })
}

/// First difference between two output maps, as a message; `None` when bitwise identical.
fn first_difference(a: &TensorMap, b: &TensorMap) -> Option<String> {
    for (name, ta) in a {
        let Some(tb) = b.get(name) else { return Some(format!("output `{name}` missing in a later run")) };
        if let Some(i) = ta.bytes.iter().zip(&tb.bytes).position(|(x, y)| x != y) {
            let elem = i / ta.dtype.size_bytes();
            return Some(format!("output `{name}` differs at element {elem} (byte {i})"));
        }
    }
    None
}

/// Runs `again` until `n` runs in all (with the first) and compares each with `first` bitwise;
/// prints the verdict and returns the exit status (0, or 3 when outputs differ).
fn repeat_check(first: &TensorMap, n: usize, mut again: impl FnMut() -> Result<TensorMap, CliError>) -> Result<u8, CliError> {
    for _ in 1..n {
        if let Some(d) = first_difference(first, &again()?) {
            println!("repeat: {n} runs, outputs NOT bitwise identical: {d}");
            return Ok(3);
        }
    }
    println!("repeat: {n} runs, outputs bitwise identical");
    Ok(0)
}

fn run_plan(cli: &Cli) -> Result<u8, CliError> {
    let text = std::fs::read_to_string(&cli.meta).map_err(|e| CliError::Usage(format!("{}: {e}", cli.meta.display())))?;
    let plan = tilec_runtime::plan_schema::OperatorPlan::from_json(&text).map_err(|e| CliError::Usage(e.to_string()))?;
    let dir = cli.meta.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    if !cli.scalars.is_empty() || !cli.sizes.is_empty() {
        return Err(CliError::Usage("--scalar and --size are not used with a plan: give scalars in the inputs file (one-element tensors named like the parameter); the operator's sizes come from its inputs".into()));
    }
    let args = plan.args(st::read(&cli.inputs)?);
    // Argument mistakes are reported on any machine, before a GPU is needed.
    tilec_runtime::plan_schema::check_inputs(&plan, &args).map_err(|e| match e {
        tilec_runtime::plan_schema::PlanError::Bind { source, .. } => CliError::Runtime(RuntimeError::from(source)),
        // Inputs that do not fit the plan are an error (1), as a binder error is; not usage (2).
        e @ (tilec_runtime::plan_schema::PlanError::UnsupportedSize { .. } | tilec_runtime::plan_schema::PlanError::BadOffsets { .. }) => CliError::Input(e.to_string()),
        other => CliError::Usage(other.to_string()),
    })?;
    let code = match cli.code.as_str() {
        "ptx" => CodeKind::Ptx,
        "cubin" => CodeKind::Cubin,
        _ => CodeKind::Auto,
    };
    // Every launched kernel's metadata is read and checked before a GPU is needed: a missing or
    // malformed file is the artifacts' fault (exit 2), never reported as "no GPU" (exit 4).
    for (i, step) in plan.launches.iter().enumerate() {
        Artifact::open(&dir.join(&step.meta)).map_err(|e| CliError::Usage(format!("operator `{}`, launch {i} (`{}`): {e}", plan.operator, step.kernel)))?;
    }
    let gpu = Gpu::open(cli.device)?;
    let launches: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    println!("operator {} ({}) on {}: {} launches ({})", plan.operator, plan.target, gpu.name()?, launches.len(), launches.join(" → "));
    let mut runner = gpu.plan_runner(&plan, &dir, code);
    let mut once = |timed: bool| {
        runner.run(&args, timed).map_err(|(e, r)| match r {
            Some(r) => CliError::Runtime(r),
            None => CliError::Usage(e.to_string()),
        })
    };
    let first = once(false)?;
    st::write(&cli.out, &first.outputs)?;
    let names: Vec<&str> = first.outputs.keys().map(String::as_str).collect();
    println!("wrote {} ({})", cli.out.display(), names.join(", "));
    let mut status = 0;
    if let (Some(n), false) = (cli.repeat, cli.bench) {
        status = repeat_check(&first.outputs, n, || Ok(once(false)?.outputs))?;
    }
    if cli.bench {
        let n = cli.repeat.unwrap_or(20);
        let mut per: Vec<Vec<f32>> = vec![vec![]; plan.launches.len()];
        let mut totals = vec![];
        for _ in 0..n {
            let r = once(true)?;
            totals.push(r.kernel_ms.iter().map(|(_, t)| t).sum::<f32>());
            for (i, (_, t)) in r.kernel_ms.iter().enumerate() {
                per[i].push(*t);
            }
        }
        for (l, ts) in plan.launches.iter().zip(per) {
            println!("bench: {:<16} median {:.4} ms", l.kernel, BenchTimes { ms: ts }.median_ms().unwrap_or(0.0));
        }
        println!("bench: operator {} {n} runs, median sum of kernel times {:.4} ms", plan.operator, BenchTimes { ms: totals }.median_ms().unwrap_or(0.0));
    }
    Ok(status)
}

fn run(cli: &Cli) -> Result<u8, CliError> {
    if cli.meta.to_string_lossy().ends_with(".plan.json") {
        return run_plan(cli);
    }
    let artifact = Artifact::open(&cli.meta)?;
    let meta = &artifact.meta;
    let mut args = Args::from_tensor_map(meta, st::read(&cli.inputs)?);
    for kv in &cli.scalars {
        let (k, v) = split_kv(kv)?;
        args.scalars.insert(k.to_string(), parse_scalar(meta, k, v)?);
    }
    for kv in &cli.sizes {
        let (k, v) = split_kv(kv)?;
        let v = v.parse().map_err(|_| CliError::Usage(format!("--size {kv}: not a non-negative integer")))?;
        args.sizes.insert(k.to_string(), v);
    }
    // Bind before touching the GPU so argument mistakes are reported on any machine.
    let binding = tilec_runtime::bind::bind(meta, &args).map_err(RuntimeError::from)?;
    let sizes: Vec<String> = binding.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "kernel {} ({}) sizes [{}] grid {:?} block {:?} dynamic smem {} B",
        meta.kernel,
        meta.target,
        sizes.join(", "),
        binding.grid,
        binding.block,
        binding.dynamic_smem_bytes
    );

    let gpu = Gpu::open(cli.device)?;
    let (major, minor) = gpu.compute_capability()?;
    let code = match cli.code.as_str() {
        "ptx" => CodeKind::Ptx,
        "cubin" => CodeKind::Cubin,
        _ => CodeKind::Auto,
    };
    let kernel = gpu.load(&artifact, code)?;
    let a = kernel.attributes;
    println!(
        "device {} (sm_{major}{minor}); loaded {}; {} registers, {} B local, {} B static smem",
        gpu.name()?,
        kernel.loaded_from,
        a.registers,
        a.local_bytes,
        a.static_smem_bytes
    );

    let first = gpu.run(&kernel, &args)?;
    st::write(&cli.out, &first.outputs)?;
    let names: Vec<&str> = first.outputs.keys().map(String::as_str).collect();
    println!("wrote {} ({})", cli.out.display(), names.join(", "));

    let mut status = 0;
    if let (Some(n), false) = (cli.repeat, cli.bench) {
        status = repeat_check(&first.outputs, n, || Ok(gpu.run(&kernel, &args)?.outputs))?;
    }
    if cli.bench {
        let n = cli.repeat.unwrap_or(20);
        let t = gpu.bench(&kernel, &args, n)?;
        let min = t.ms.iter().copied().fold(f32::INFINITY, f32::min);
        let max = t.ms.iter().copied().fold(0.0f32, f32::max);
        match t.median_ms() {
            Some(med) => println!("bench: {n} launches, median {:.4} ms (min {:.4}, max {:.4})", med, min, max),
            None => println!("bench: no launches timed (N = 0)"),
        }
    }
    Ok(status)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("tilec-run: error: {e}");
            let code = match &e {
                CliError::Usage(_) => 2,
                CliError::Runtime(r) if r.is_unavailable() => 4,
                _ => 1,
            };
            ExitCode::from(code)
        }
    }
}
