//! tilec kernels as candidates, run through tilec's own executables (one process per call).
//!
//! * [`Executor::Interp`]: `tilec run --interp FILE.tile [--kernel NAME] --inputs IN --out OUT`,
//!   tilec's CPU IR interpreter (`compiler/src/cli/run.rs`).
//! * [`Executor::InterpOperator`]: `tilec run --interp FILE.tile --operator NAME [--const ..]`,
//!   a multi-kernel operator (its launches in order) on the same interpreter — e.g.
//!   `gdn_fwd.tile`'s `gdn_fwd` judged as the `gdn` class. For a recurrence class
//!   ([`crate::references::recurrence`]) this executor passes the class's fixed scale K^-0.5 as
//!   the rank-0 f32 tensor `scale`, which the operator must take (the other executors pass only
//!   the bound tensors).
//! * [`Executor::Gpu`]: `tilec-run ARTIFACT.meta.json --inputs IN --out OUT`, the runtime's GPU
//!   launcher (`runtime/src/bin/tilec-run.rs`); exit status 4 means "no GPU on this machine".
//!
//! kverify never links the compiler (it links LLVM): it only needs the binaries, located by an
//! explicit path or the `TILEC` / `TILEC_RUN` environment variables ([`locate`]).
//!
//! Both tools are one-shot: read a safetensors file of tensors named after the kernel's
//! parameters, write one with its `out` parameters, exit. A [`Binding`] maps the operator's
//! inputs (in kverify's order, see [`crate::references`]) to parameter names, and the kernel's
//! output parameters back to the operator's outputs. Each call runs under the same confinement
//! as the external-process workers ([`super::process::confine`]: own process group, address
//! space limit) with a time limit after which the whole group is killed; deaths are reported with
//! the signal or exit code and the tail of stderr, never as value errors (fairness rule 9).

use super::external::{confine, signal_name, tail};
use super::safetensors_io;
use super::{Candidate, CandidateError, CandidateOutput};
use crate::error_model::Precision;
use crate::references::{op_by_id, Dims};
use crate::tensor::{DType, Tensor};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wait_timeout::ChildExt;

/// Exit status with which `tilec-run` says that there is no GPU (no driver or no device).
pub const EXIT_NO_GPU: i32 = 4;

/// Which tilec executable runs the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executor {
    /// The CPU IR interpreter: `tilec run --interp`.
    Interp {
        /// The `tilec` binary.
        tilec: PathBuf,
        /// The `.tile` source file.
        source: PathBuf,
        /// Kernel name (needed when the file has several).
        kernel: Option<String>,
    },
    /// A multi-kernel operator on the CPU interpreter: `tilec run --interp --operator`.
    InterpOperator {
        /// The `tilec` binary.
        tilec: PathBuf,
        /// The `.tile` source file.
        source: PathBuf,
        /// Operator name.
        operator: String,
        /// Size parameters to compile it with (`--const NAME=VALUE` each, e.g. `K=64`).
        consts: Vec<String>,
    },
    /// A built artifact on the GPU: `tilec-run`.
    Gpu {
        /// The `tilec-run` binary.
        tilec_run: PathBuf,
        /// The artifact's `<kernel>.<target>.meta.json` (code files next to it).
        meta: PathBuf,
    },
}

/// How the operator's tensors map onto the kernel's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Kernel parameter name of each operator input, in the operator's input order.
    pub inputs: Vec<String>,
    /// The dtype each input is widened to when the kernel's parameter has another one than the
    /// declared input precision (`name@f32` in a binding; None: as the battery gives it). The
    /// values are the battery's, exactly: only widening dtypes are accepted.
    pub input_dtypes: Vec<Option<DType>>,
    /// Kernel `out` parameter of each operator output, in the operator's output order.
    pub outputs: Vec<String>,
    /// Sizes the tensors do not determine (`--size NAME=VALUE`).
    pub sizes: BTreeMap<String, usize>,
}

impl Binding {
    /// Checks the binding against operator class `op` declared at `precision`: one parameter
    /// per class input and output, each named, and every input dtype one that holds the
    /// generated `precision.input` values exactly (the class's own, f32 or f64). Shared by
    /// [`TilecCandidate::new`] and `tilec`'s `contract(class)` on a kernel.
    ///
    /// # Errors
    /// [`TilecError::UnknownOp`], [`TilecError::BindingArity`], or [`TilecError::Syntax`] for
    /// an unnamed input or a narrowing input dtype.
    pub fn check(&self, op: &str, precision: &Precision) -> Result<(), TilecError> {
        let o = op_by_id(op).ok_or_else(|| TilecError::UnknownOp(op.into()))?;
        for (what, want, names) in [("inputs", o.inputs.len(), &self.inputs), ("outputs", o.outputs.len(), &self.outputs)] {
            if names.len() != want {
                return Err(TilecError::BindingArity { op: op.into(), what, want, got: names.len(), names: names.join(",") });
            }
        }
        if self.inputs.iter().any(|n| n.is_empty()) {
            return Err(TilecError::Syntax("binding: an input without a parameter name".into()));
        }
        if self.input_dtypes.len() != self.inputs.len() {
            return Err(TilecError::Syntax(format!("binding: {} input dtypes for {} inputs", self.input_dtypes.len(), self.inputs.len())));
        }
        for (n, d) in self.inputs.iter().zip(&self.input_dtypes) {
            // f32 and f64 hold every value of the narrower formats exactly; anything else
            // would change the battery's inputs.
            let exact = |d: DType| d == precision.input || d == DType::F64 || (d == DType::F32 && precision.input != DType::F64);
            if let Some(d) = d.filter(|d| !exact(*d)) {
                return Err(TilecError::Syntax(format!("binding: input `{n}@{}` would round the battery's {} values; only f32 and f64 widen them exactly", d.name(), precision.input.name())));
            }
        }
        Ok(())
    }
}

/// Errors describing a tilec candidate.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TilecError {
    /// The operator id has no reference.
    #[error("unknown operator `{0}`{hint}", hint = crate::references::op_hint(.0))]
    UnknownOp(String),
    /// The binding does not name one parameter per operator tensor.
    #[error("operator `{op}` has {want} {what}, the binding names {got} ({names})")]
    BindingArity {
        /// Operator id.
        op: String,
        /// `inputs` or `outputs`.
        what: &'static str,
        /// Count the operator has.
        want: usize,
        /// Count the binding gives.
        got: usize,
        /// The names given.
        names: String,
    },
    /// No binary found.
    #[error("cannot find `{tool}`: pass {flag} PATH or set {env}")]
    NotFound {
        /// Binary name.
        tool: &'static str,
        /// Command-line option.
        flag: &'static str,
        /// Environment variable.
        env: &'static str,
    },
    /// A file the candidate needs does not exist.
    #[error("{what} `{path}` does not exist")]
    Missing {
        /// Which file.
        what: &'static str,
        /// Path.
        path: String,
    },
    /// A malformed `FILE:KERNEL` or binding string.
    #[error("{0}")]
    Syntax(String),
}

/// Find a tilec binary: `explicit` if given, else the environment variable `env`.
/// Errors: [`TilecError::NotFound`] when neither is set, [`TilecError::Missing`] when the path
/// does not exist.
pub fn locate(explicit: Option<&Path>, tool: &'static str, flag: &'static str, env: &'static str) -> Result<PathBuf, TilecError> {
    let p = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os(env).map(PathBuf::from).ok_or(TilecError::NotFound { tool, flag, env })?,
    };
    if !p.exists() {
        return Err(TilecError::Missing { what: tool, path: p.display().to_string() });
    }
    Ok(p)
}

/// Split `FILE.tile:KERNEL` (the kernel part is optional; a `:` inside the path is allowed
/// when followed by something that is not an identifier).
pub fn split_kernel_spec(s: &str) -> (PathBuf, Option<String>) {
    if let Some((f, k)) = s.rsplit_once(':') {
        if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return (PathBuf::from(f), Some(k.to_string()));
        }
    }
    (PathBuf::from(s), None)
}

/// Parse a binding `a,b:c` (inputs before the colon, outputs after; sizes not included); an
/// input may carry the dtype of its kernel parameter, `g@f32` (see [`Binding::input_dtypes`]).
pub fn parse_binding(s: &str) -> Result<Binding, TilecError> {
    let (i, o) = s.split_once(':').ok_or_else(|| TilecError::Syntax(format!("binding `{s}`: expected INPUTS:OUTPUTS, e.g. `a,b:c`")))?;
    let list = |x: &str| x.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect::<Vec<_>>();
    let (mut inputs, mut input_dtypes) = (Vec::new(), Vec::new());
    for item in list(i) {
        match item.split_once('@') {
            Some((n, d)) => {
                let dt = DType::parse(d.trim()).ok_or_else(|| TilecError::Syntax(format!("binding `{s}`: `{item}`: unknown dtype `{d}` (f64, f32, tf32, bf16, f16)")))?;
                inputs.push(n.trim().to_string());
                input_dtypes.push(Some(dt));
            }
            None => {
                inputs.push(item);
                input_dtypes.push(None);
            }
        }
    }
    Ok(Binding { inputs, input_dtypes, outputs: list(o), sizes: BTreeMap::new() })
}

/// The binding used when none is given: each operator input's name lower-cased (`A`, `B` ->
/// `a`, `b`), and `c` for a single output (`out0`, `out1`, ... for several).
pub fn default_binding(op: &str) -> Result<Binding, TilecError> {
    let o = op_by_id(op).ok_or_else(|| TilecError::UnknownOp(op.into()))?;
    let inputs = o.inputs.iter().map(|i| i.name.to_lowercase()).collect();
    let outputs = if o.outputs.len() == 1 { vec!["c".to_string()] } else { (0..o.outputs.len()).map(|i| format!("out{i}")).collect() };
    let input_dtypes = vec![None; o.inputs.len()];
    Ok(Binding { inputs, input_dtypes, outputs, sizes: BTreeMap::new() })
}

/// A tilec operator computing the class's backward: the input gradients from the inputs and
/// the output gradients (`kverify check --tilec-backward`).
#[derive(Debug, Clone)]
pub struct BackwardOperator {
    /// Which executable runs it (a multi-kernel operator on the interpreter).
    pub executor: Executor,
    /// Its parameters: the class's inputs, then one per output gradient (in the class's output
    /// order), then its `out` parameter of each input gradient (the class's backward order).
    pub binding: Binding,
}

/// A tilec kernel under judgement.
pub struct TilecCandidate {
    /// Display name.
    pub name: String,
    /// Operator class id.
    pub op: String,
    /// Declared precision (the kernel's parameter dtypes must match `input` and `output`).
    pub precision: Precision,
    /// Which executable runs it.
    pub executor: Executor,
    /// Tensor <-> parameter mapping.
    pub binding: Binding,
    /// Time limit of one call.
    pub time_limit: Duration,
    /// Address-space limit of the process, MiB (0: none).
    pub mem_limit_mb: u64,
    /// The operator computing its backward, if any ([`TilecCandidate::with_backward`]).
    pub backward: Option<BackwardOperator>,
    dir: Option<tempfile::TempDir>,
    next_id: AtomicU64,
}

impl TilecCandidate {
    /// A candidate. Errors: unknown operator, a binding whose arity differs from the
    /// operator's inputs / outputs, a missing source or artifact file.
    pub fn new(
        op: &str,
        precision: Precision,
        executor: Executor,
        binding: Binding,
        time_limit: Duration,
        mem_limit_mb: u64,
    ) -> Result<TilecCandidate, TilecError> {
        binding.check(op, &precision)?;
        if matches!(executor, Executor::InterpOperator { .. }) && is_recurrence(op) && binding.inputs.iter().any(|n| n == "scale") {
            return Err(TilecError::Syntax("binding: `scale` is the recurrence class's own K^-0.5 (passed to the operator's `scale`); bind no input to it".into()));
        }
        // The source's file name, once it is known to exist.
        let file_of = |source: &Path, what: &'static str| -> Result<String, TilecError> {
            if !source.exists() {
                return Err(TilecError::Missing { what, path: source.display().to_string() });
            }
            Ok(source.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default())
        };
        let name = match &executor {
            Executor::Interp { source, kernel, .. } => format!("tilec:{}:{} (interp)", file_of(source, "kernel source")?, kernel.as_deref().unwrap_or("-")),
            Executor::InterpOperator { source, operator, .. } => format!("tilec:{}:{operator} (interp, operator)", file_of(source, "operator source")?),
            Executor::Gpu { meta, .. } => {
                if !meta.exists() {
                    return Err(TilecError::Missing { what: "artifact metadata", path: meta.display().to_string() });
                }
                format!("tilec:{} (gpu)", meta.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default())
            }
        };
        Ok(TilecCandidate {
            name,
            op: op.into(),
            precision,
            executor,
            binding,
            time_limit,
            mem_limit_mb,
            backward: None,
            dir: tempfile::Builder::new().prefix("kverify-tilec-").tempdir().ok(),
            next_id: AtomicU64::new(1),
        })
    }

    /// The same candidate with `backward` computing its input gradients. Errors: the class has
    /// no reference backward, the executor is not an operator on the interpreter, or the
    /// binding's arity differs from the class's inputs plus output gradients, or from its
    /// inputs (one gradient each).
    pub fn with_backward(mut self, backward: BackwardOperator) -> Result<TilecCandidate, TilecError> {
        let o = op_by_id(&self.op).ok_or_else(|| TilecError::UnknownOp(self.op.clone()))?;
        if o.backward.is_none() {
            return Err(TilecError::Syntax(format!("operator class `{}` has no reference backward to judge a backward against", self.op)));
        }
        let Executor::InterpOperator { source, operator, .. } = &backward.executor else {
            return Err(TilecError::Syntax("a backward is judged as a multi-kernel operator on the interpreter (FILE.tile:OPERATOR)".into()));
        };
        if !source.exists() {
            return Err(TilecError::Missing { what: "backward operator source", path: source.display().to_string() });
        }
        let b = &backward.binding;
        for (what, want, names) in [("backward inputs (inputs, then output gradients)", o.inputs.len() + o.outputs.len(), &b.inputs), ("backward outputs (input gradients)", o.inputs.len(), &b.outputs)] {
            if names.len() != want {
                return Err(TilecError::BindingArity { op: self.op.clone(), what, want, got: names.len(), names: names.join(",") });
            }
        }
        if b.input_dtypes.len() != b.inputs.len() {
            return Err(TilecError::Syntax(format!("backward binding: {} input dtypes for {} inputs", b.input_dtypes.len(), b.inputs.len())));
        }
        self.name = format!("{} + backward {operator}", self.name);
        self.backward = Some(backward);
        Ok(self)
    }

    /// The address-space cap of one call, MiB (0: none). The GPU executor gets none: the CUDA
    /// driver reserves tens of GiB of virtual address space for unified addressing, so an
    /// `RLIMIT_AS` cap makes context creation fail with CUDA_ERROR_OUT_OF_MEMORY (seen on the
    /// H200). Its host memory is small (the tensors it copies), and the time limit still holds.
    pub fn address_space_limit_mb(&self) -> u64 {
        match self.executor {
            Executor::Gpu { .. } => 0,
            Executor::Interp { .. } | Executor::InterpOperator { .. } => self.mem_limit_mb,
        }
    }

    /// The command line for one call of `executor` with `binding`'s sizes.
    fn command(executor: &Executor, binding: &Binding, inputs: &Path, out: &Path) -> Command {
        let mut cmd = match executor {
            Executor::Interp { tilec, source, kernel } => {
                let mut c = Command::new(tilec);
                c.arg("run").arg("--interp").arg(source);
                if let Some(k) = kernel {
                    c.arg("--kernel").arg(k);
                }
                c
            }
            Executor::InterpOperator { tilec, source, operator, consts } => {
                let mut c = Command::new(tilec);
                c.arg("run").arg("--interp").arg(source).arg("--operator").arg(operator);
                for k in consts {
                    c.arg("--const").arg(k);
                }
                c
            }
            Executor::Gpu { tilec_run, meta } => {
                let mut c = Command::new(tilec_run);
                c.arg(meta);
                c
            }
        };
        cmd.arg("--inputs").arg(inputs).arg("--out").arg(out);
        for (k, v) in &binding.sizes {
            cmd.arg("--size").arg(format!("{k}={v}"));
        }
        cmd
    }

    /// One call of the forward: see [`TilecCandidate::call_with`].
    fn call(&self, dims: &Dims, inputs: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        self.call_with(&self.executor, &self.binding, dims, inputs)
    }

    /// One call: write `inputs` under `binding`'s names, run `executor`, read the bound outputs
    /// back (on the host: `tilec-run` copies them back).
    fn call_with(&self, executor: &Executor, binding: &Binding, dims: &Dims, inputs: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        let dir = self.dir.as_ref().ok_or_else(|| CandidateError::Io("no temporary directory".into()))?.path();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let in_path = dir.join(format!("in-{id}.safetensors"));
        let out_path = dir.join(format!("out-{id}.safetensors"));
        if inputs.len() != binding.inputs.len() {
            return Err(CandidateError::Io(format!("{} inputs for a binding of {}", inputs.len(), binding.inputs.len())));
        }
        let widened: Vec<Tensor> = inputs
            .iter()
            .zip(&binding.input_dtypes)
            .map(|(t, d)| match d {
                Some(d) if *d != t.dtype() => Tensor::from_f64(t.shape.clone(), &t.to_f64_vec(), *d),
                _ => t.clone(),
            })
            .collect();
        let mut named: Vec<(String, &Tensor)> = binding.inputs.iter().cloned().zip(&widened).collect();
        let scale = if matches!(executor, Executor::InterpOperator { .. }) { recurrence_scale(&self.op, dims) } else { None };
        if let Some(t) = &scale {
            named.push(("scale".to_string(), t));
        }
        safetensors_io::write(&in_path, &named).map_err(|e| CandidateError::Io(e.to_string()))?;
        let mut cmd = Self::command(executor, binding, &in_path, &out_path);
        // The tensors as handed over (the harness's backstop counts the same), not widened.
        let ran = run_once(&mut cmd, super::call_time_limit(self.time_limit, inputs), self.address_space_limit_mb());
        let _ = std::fs::remove_file(&in_path);
        ran.map_err(|e| match (executor, &e) {
            (Executor::Gpu { .. }, CandidateError::Exited { code, stderr_tail }) => binder_refusal(*code, stderr_tail).map_or(e, CandidateError::Refused),
            _ => e,
        })?;
        let mut tensors = safetensors_io::read(&out_path).map_err(|e| CandidateError::Protocol(e.to_string()))?;
        let _ = std::fs::remove_file(&out_path);
        let mut outputs = Vec::with_capacity(binding.outputs.len());
        for n in &binding.outputs {
            let mut have: Vec<&String> = tensors.keys().collect();
            have.sort();
            let have = have.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
            let t = tensors.remove(n).ok_or_else(|| CandidateError::Protocol(format!("kernel wrote no output `{n}` (it wrote: {have})")))?;
            outputs.push(t);
        }
        Ok(CandidateOutput { outputs, reported_mutations: vec![], reported_aliases: vec![], layouts_applied: false })
    }

    /// For a GPU candidate: `Ok(())` when `tilec-run` can reach a GPU, checked by one call at
    /// `dims` on zero inputs of the declared input dtype; `Err(message)` when it exits with
    /// [`EXIT_NO_GPU`]. Any other failure is left to the battery to report. Interpreter
    /// candidates always return `Ok(())`.
    pub fn gpu_available(&self, dims: &Dims) -> Result<(), String> {
        if !matches!(self.executor, Executor::Gpu { .. }) {
            return Ok(());
        }
        let Some(o) = op_by_id(&self.op) else { return Ok(()) };
        let inputs: Vec<Tensor> = o
            .input_shapes(dims)
            .into_iter()
            .map(|s| {
                let n: usize = s.iter().product();
                Tensor::from_f64(s, &vec![0.0; n], self.precision.input)
            })
            .collect();
        match self.call(dims, &inputs) {
            Err(CandidateError::Exited { code: EXIT_NO_GPU, stderr_tail }) => Err(format!("no GPU on this machine (tilec-run exit {EXIT_NO_GPU}): {stderr_tail}")),
            _ => Ok(()),
        }
    }
}

/// Exit status of `tilec-run` for inputs the binder refuses (and for other errors).
pub const EXIT_INPUT: i32 = 1;

/// The binder's refusal of a size, when `tilec-run` exited with `code` and this tail of stderr
/// (`None`: anything else, reported as the runtime failure it is). Only two messages of the
/// runtime's binder (`abi/src/bind.rs`), printed before anything is launched, qualify, as the
/// last line and with exit status [`EXIT_INPUT`]:
/// `tilec-run: error: size `T` = 70000 is outside the kernel's envelope (..)` and
/// `tilec-run: error: size scalar `M` = `M` evaluates to 2147483649, outside 0..=2147483647 (passed as i32)`
/// (the kernel's size scalars are i32). CMP-03 lists such a refusal past the envelope as
/// declined, like any candidate's refusal; a signal, a hang, another exit status or any other
/// message stays a runtime failure.
pub fn binder_refusal(code: i32, stderr_tail: &str) -> Option<String> {
    if code != EXIT_INPUT {
        return None;
    }
    let last = stderr_tail.rsplit(" | ").next()?.trim();
    let msg = last.strip_prefix("tilec-run: error: ")?;
    let name = |s: &str| -> Option<usize> {
        let n = s.strip_prefix('`')?.find('`')?;
        (n > 0 && s[1..=n].chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(n + 2)
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if let Some(r) = msg.strip_prefix("size scalar ") {
        // `M` = `M` evaluates to V, outside 0..=2147483647 (passed as i32)
        let n = name(r)?;
        let r = r[n..].strip_prefix(" = ")?;
        let m = name(r)?;
        let v = r[m..].strip_prefix(" evaluates to ")?.strip_suffix(", outside 0..=2147483647 (passed as i32)")?;
        return (digits(v.trim_start_matches('-'))).then(|| format!("tilec-run's binder: {msg}"));
    }
    let r = msg.strip_prefix("size ")?;
    let n = name(r)?;
    let (v, rest) = r[n..].strip_prefix(" = ")?.split_once(' ')?;
    (digits(v) && rest.starts_with("is outside the kernel's envelope (") && rest.ends_with(')')).then(|| format!("tilec-run's binder: {msg}"))
}

/// Whether `op` is a recurrence class (which passes its own scale to an operator).
fn is_recurrence(op: &str) -> bool {
    crate::references::recurrence::RECURRENCE_CLASSES.contains(&op)
}

/// The rank-0 f32 `scale` a recurrence class passes (its fixed K^-0.5), None for other classes.
fn recurrence_scale(op: &str, dims: &Dims) -> Option<Tensor> {
    is_recurrence(op).then(|| Tensor::from_f64(vec![], &[crate::references::recurrence::scale_of(dims)], DType::F32))
}

/// Run `cmd` to completion under the candidate confinement with a time limit.
/// Errors: [`CandidateError::TimedOut`] (the process group was killed),
/// [`CandidateError::Crashed`] (a signal), [`CandidateError::Exited`] (non-zero status, with
/// the tail of stderr), [`CandidateError::Io`] (could not start).
pub fn run_once(cmd: &mut Command, limit: Duration, mem_limit_mb: u64) -> Result<(), CandidateError> {
    confine(cmd, mem_limit_mb);
    cmd.stdin(std::process::Stdio::null());
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|e| CandidateError::Io(format!("cannot start `{prog}`: {e}")))?;
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let status = match child.wait_timeout(limit) {
        Ok(Some(st)) => st,
        Ok(None) => {
            super::process::kill_tree(&mut child);
            return Err(CandidateError::TimedOut { limit_s: limit.as_secs_f64() });
        }
        Err(e) => return Err(CandidateError::Io(format!("waiting for `{prog}`: {e}"))),
    };
    let _ = out.join();
    let stderr = err.join().unwrap_or_default();
    let t = tail(&stderr, 3);
    if let Some(sig) = status.signal() {
        return Err(CandidateError::Crashed(format!("killed by signal {sig} ({}){}", signal_name(sig), if t.is_empty() { String::new() } else { format!(": {t}") })));
    }
    match status.code() {
        Some(0) => Ok(()),
        code => Err(CandidateError::Exited { code: code.unwrap_or(-1), stderr_tail: t }),
    }
}

impl Candidate for TilecCandidate {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn op_id(&self) -> String {
        self.op.clone()
    }
    fn precision(&self) -> Precision {
        self.precision
    }
    fn kind(&self) -> &'static str {
        match self.executor {
            Executor::Interp { .. } | Executor::InterpOperator { .. } => "tilec-interp",
            Executor::Gpu { .. } => "tilec-gpu",
        }
    }
    fn forward(&self, dims: &Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError> {
        self.call(dims, inputs)
    }
    fn has_backward(&self) -> bool {
        self.backward.is_some()
    }
    /// The GPU executor runs on `tilec-run`'s device (ordinal 0); the interpreters on the CPU.
    fn compute_device(&self) -> crate::tensor::Device {
        match self.executor {
            Executor::Gpu { .. } => crate::tensor::Device::Cuda(0),
            Executor::Interp { .. } | Executor::InterpOperator { .. } => crate::tensor::Device::Cpu,
        }
    }
    fn memory_limit_mb(&self) -> u64 {
        self.address_space_limit_mb()
    }
    /// The backward operator on the inputs followed by the output gradients.
    fn backward(&self, dims: &Dims, inputs: &mut [Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        let b = self.backward.as_ref().ok_or(CandidateError::NoBackward)?;
        let all: Vec<Tensor> = inputs.iter().chain(grads).cloned().collect();
        self.call_with(&b.executor, &b.binding, dims, &all)
    }
    /// Every call is a fresh process already, so ORD-02's cross-process check applies.
    fn restart(&self) -> Result<bool, CandidateError> {
        Ok(true)
    }
}
