//! `tilec run --interp FILE --inputs X.safetensors --out Y.safetensors [--kernel NAME]
//! [--size NAME=VALUE]... [--max-steps N] [--time-limit S] [--target sm_90a|sm_100a]
//! [--dump NAME]... [--dump-cta X,Y,Z]`: runs one kernel of a `.tile` file on the CPU IR
//! interpreter ([`crate::interp`]) over its whole grid.
//!
//! Inputs are named after the kernel's parameters (scalars as rank-0 tensors); the output file
//! holds every `out` parameter. Running on a GPU is `tilec build` followed by `tilec-run`.
//!
//! Exit codes: 0 — ran; 1 — the program does not compile or the run failed (message on
//! stderr); 2 — files could not be read or written, or the arguments are wrong.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::diag::{Code, Diagnostic, Diagnostics, Span};
use crate::frontend::{check_source, Options};
use crate::backend::Target;
use crate::interp::{run_kernel_with, InterpError, Options as InterpOptions};

/// Arguments of `tilec run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The .tile file.
    pub file: PathBuf,
    /// Size parameters (`--const K=64`).
    #[command(flatten)]
    pub consts: super::ConstArgs,
    /// Run on the CPU IR interpreter (required: it is the only executor behind `tilec run`).
    #[arg(long)]
    pub interp: bool,
    /// Input tensors (safetensors; bf16, f16, f32, i32), one per parameter that is not `out`,
    /// named after it, of its exact dtype (a scalar is a rank-0 tensor).
    #[arg(long, value_name = "FILE")]
    pub inputs: PathBuf,
    /// Where to write the output tensors (safetensors).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The kernel to run (needed when the file has more than one).
    #[arg(long, value_name = "NAME", conflicts_with = "operator")]
    pub kernel: Option<String>,
    /// Run a multi-kernel operator of the file instead (its launches in order, buffers
    /// allocated once); inputs and outputs are named after the operator's parameters, its sizes
    /// come from them (no --size), and --max-steps / --time-limit bound the whole call.
    #[arg(long, value_name = "NAME")]
    pub operator: Option<String>,
    /// Fix a symbolic size that the inputs do not determine, e.g. `--size NT=4` (repeatable).
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size, conflicts_with = "operator")]
    pub sizes: Vec<(String, i64)>,
    /// Instruction budget over the whole grid (a runaway loop stops with an error).
    #[arg(long, default_value_t = InterpOptions::default().max_steps)]
    pub max_steps: u64,
    /// Wall-clock limit of the run in seconds (a runaway loop stops with an error pointing at
    /// the statement it was executing); 0 for none.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub time_limit: f64,
    /// Whose MMA numerics to follow: sm_90a (mma.sync: the K-step sum first, then one f32
    /// operation with the old accumulator) or sm_100a (tcgen05.mma: a TMEM accumulator is
    /// seeded with its old value and every K=16 step rounds into it; others as sm_90a).
    #[arg(long, value_name = "TARGET", default_value_t = InterpOptions::default().target, value_parser = str::parse::<Target>)]
    pub target: Target,
    /// Record every value of the `let` binding or variable NAME in the CTA of `--dump-cta`
    /// (repeatable). The output file gets `dump.NAME`, shape [records, rows, cols], one record
    /// per time the value is computed or the variable written (per loop iteration). A NAME that
    /// nothing stored depends on is computed all the same (dead-code elimination keeps it).
    #[arg(long, value_name = "NAME", conflicts_with = "operator")]
    pub dump: Vec<String>,
    /// The CTA whose values `--dump` records, as `program_id` x,y,z (missing ones are 0).
    #[arg(long, value_name = "X,Y,Z", default_value = "0,0,0", value_parser = parse_cta, requires = "dump", allow_hyphen_values = true)]
    pub dump_cta: [i64; 3],
}

fn parse_cta(s: &str) -> Result<[i64; 3], String> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("`{s}` is not X[,Y[,Z]]"));
    }
    let mut cta = [0; 3];
    for (c, p) in cta.iter_mut().zip(&parts) {
        *c = p.trim().parse().map_err(|e| format!("`{p}` in `{s}`: {e}"))?;
    }
    Ok(cta)
}

pub(crate) fn parse_size(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    if name.trim().is_empty() {
        return Err(format!("`{s}` has no name before `=`"));
    }
    let value: i64 = value.trim().parse().map_err(|e| format!("size `{name}`: {e}"))?;
    if value < 0 {
        return Err(format!("size `{name}` is negative"));
    }
    Ok((name.trim().to_string(), value))
}

/// Runs `tilec run`.
pub fn run(a: &RunArgs) -> ExitCode {
    if !a.interp {
        eprintln!("error: `tilec run` executes on the IR interpreter only: pass --interp (on a GPU use `tilec build` and `tilec-run`)");
        return ExitCode::from(2);
    }
    let src = match std::fs::read(&a.file) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    let inputs = match tilec_abi::st::read(&a.inputs) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: inputs: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(size_values) = a.consts.values_or_report() else { return ExitCode::from(2) };
    let checked = check_source(&src, &Options { size_values, keep: a.dump.clone(), ..Options::default() }.for_file(&a.file));
    let name = a.file.display().to_string();
    if !checked.diags.is_empty() {
        eprint!("{}", checked.diags.render(&name, &src, std::io::stderr().is_terminal()));
    }
    if !checked.ok() {
        eprintln!("error: {name} does not compile");
        return ExitCode::from(1);
    }
    let time_limit = (a.time_limit > 0.0 && a.time_limit.is_finite()).then(|| std::time::Duration::from_secs_f64(a.time_limit));
    if let Some(op_name) = &a.operator {
        let opts = InterpOptions { max_steps: a.max_steps, target: a.target, time_limit, ..InterpOptions::default() };
        return run_operator_cli(&checked, op_name, inputs, &opts, a, &name, &src);
    }
    let Some(kernel) = super::select_kernel(&checked.module.kernels, a.kernel.as_deref(), &name) else {
        return ExitCode::from(2);
    };
    let opts = InterpOptions { max_steps: a.max_steps, sizes: a.sizes.iter().cloned().collect::<BTreeMap<_, _>>(), target: a.target, time_limit, dump: a.dump.clone(), dump_cta: a.dump_cta, ..InterpOptions::default() };
    let run = match run_kernel_with(kernel, &inputs, &opts) {
        Ok(r) => r,
        Err(e) => {
            report_failure(kernel, &e, &name, &src);
            return ExitCode::from(1);
        }
    };
    let mut written = run.outputs.clone();
    written.extend(run.dumps.clone());
    if let Err(e) = tilec_abi::st::write(&a.out, &written) {
        eprintln!("error: output: {e}");
        return ExitCode::from(2);
    }
    let outs: Vec<String> = written.iter().map(|(n, t)| format!("{n} {:?}{:?}", t.dtype, t.shape)).collect();
    eprintln!(
        "ok: {} grid ({}, {}, {}), {} CTAs, {} steps; wrote {} to {}",
        kernel.name,
        run.grid[0],
        run.grid[1],
        run.grid[2],
        run.ctas.len(),
        run.steps,
        outs.join(", "),
        a.out.display()
    );
    warn_non_finite(&run.outputs);
    ExitCode::SUCCESS
}

/// Reports a failed interpreter run: a run-time failure points at the statement that failed,
/// with the CTA; anything else is one line.
fn report_failure(kernel: &crate::ir::Kernel, e: &InterpError, name: &str, src: &str) {
    if let InterpError::Exec { kernel: kname, cta, inst, source } = e {
        let span = kernel.inst_spans.get(*inst).copied().filter(|s| *s != Span::default()).unwrap_or(kernel.span);
        let mut d = Diagnostic::error(Code::InterpRuntime, format!("{source}"), span, format!("while executing this in CTA ({}, {}, {})", cta[0], cta[1], cta[2]))
            .with_note(format!("kernel `{kname}`, IR instruction {inst}"));
        if let Some(help) = source.help() {
            d = d.with_note(help);
        }
        let mut ds = Diagnostics::default();
        ds.push(d);
        eprint!("{}", ds.render(name, src, std::io::stderr().is_terminal()));
    } else {
        eprintln!("error: {e}");
    }
}

/// `tilec run --interp FILE --operator NAME`.
fn run_operator_cli(checked: &crate::frontend::Checked, op_name: &str, inputs: tilec_abi::st::TensorMap, opts: &InterpOptions, a: &RunArgs, name: &str, src: &str) -> ExitCode {
    let Some(op) = checked.module.operators.iter().find(|o| o.name == op_name) else {
        let known: Vec<&str> = checked.module.operators.iter().map(|o| o.name.as_str()).collect();
        eprintln!("error: {name} has no operator `{op_name}` (its operators: {})", if known.is_empty() { "none".into() } else { known.join(", ") });
        return ExitCode::from(2);
    };
    let t0 = std::time::Instant::now();
    let outs = match crate::interp::run_operator(&checked.module, op, inputs, opts) {
        Ok(o) => o,
        Err((e, failure)) => {
            // A failed launch is reported once, at the statement that failed; anything else
            // (inputs refused before any launch, a buffer too large) as a line.
            if failure.is_none() {
                eprintln!("error: {e}");
            }
            if let Some(f) = failure {
                eprintln!("error: operator `{}`, launch {} (`{}`) failed:", op.name, f.index, op.launches.get(f.index).map_or("?", |l| l.kernel.as_str()));
                if let Some(i) = checked.module.kernels.iter().position(|k| Some(&k.name) == op.launches.get(f.index).map(|l| &l.kernel)) {
                    // The kernel's spans are in its own file (an import's, or this one).
                    let k = &checked.module.kernels[i];
                    match checked.origins[i].map(|j| &checked.imports[j]) {
                        Some(file) => report_failure(k, &f.error, &file.path.display().to_string(), &file.src),
                        None => report_failure(k, &f.error, name, src),
                    }
                }
            }
            return ExitCode::from(1);
        }
    };
    if let Err(e) = tilec_abi::st::write(&a.out, &outs) {
        eprintln!("error: output: {e}");
        return ExitCode::from(2);
    }
    let list: Vec<String> = outs.iter().map(|(n, t)| format!("{n} {:?}{:?}", t.dtype, t.shape)).collect();
    let n = op.launches.len();
    eprintln!("ok: operator {} ({n} launch{}) in {:.2} s; wrote {} to {}", op.name, if n == 1 { "" } else { "es" }, t0.elapsed().as_secs_f64(), list.join(", "), a.out.display());
    warn_non_finite(&outs);
    ExitCode::SUCCESS
}

/// Warns about outputs holding NaN or ±inf: the run itself succeeded (the program may mean it),
/// but random inputs often drive a recurrence there (`tilec inputs` draws gates from N(0, 1):
/// growth instead of decay), and an `ok` alone would hide it.
fn warn_non_finite(outs: &tilec_abi::st::TensorMap) {
    for (n, t) in outs {
        let v = t.to_f64();
        let bad = v.iter().filter(|x| !x.is_finite()).count();
        if bad > 0 {
            eprintln!("warning: output `{n}` has {bad} of {} elements NaN or infinite", v.len());
        }
    }
}
