//! Operator plans: `<operator>.<target>.plan.json`, a fixed sequence of kernel launches over the
//! operator's parameters and intermediate buffers (`docs/metadata.md`, "Operator plans"), and
//! [`execute`], the one executor of a plan. `tilec run --interp` executes a plan on the IR
//! interpreter and `tilec-run` on a GPU; both go through [`execute`] with their own
//! [`Launcher`], so binding, buffer allocation and argument routing cannot drift between them.
//!
//! Execution: the caller's tensors are bound against the operator's parameters with the kernel
//! binder ([`crate::bind`]): every dtype, rank and extent is checked and the sizes inferred
//! before the first launch, and an error names the tensor. Each buffer is then allocated once,
//! zero-filled, with its shape evaluated; the launches run in order, each receiving, per kernel
//! parameter, the tensor of the operator parameter or buffer bound to it and returning the
//! kernel's outputs, which replace those tensors. The result holds the operator's `out`
//! parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::bind::{self, Args, BindError, BoundArg, Scalar, Signature};
use crate::expr::{ExprError, SizeExpr};
use crate::meta::{CompilerInfo, DType, ParamMeta, Role, SourceInfo};
use crate::st::TensorMap;
use crate::tensor::{HostTensor, TensorError};

/// Version of the plan schema; readers refuse other versions.
pub const PLAN_SCHEMA_VERSION: u32 = 1;

/// An operator plan (`<operator>.<target>.plan.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorPlan {
    /// Always [`PLAN_SCHEMA_VERSION`] for files this crate writes.
    pub schema_version: u32,
    /// Operator name.
    pub operator: String,
    /// Target of its kernels (`sm_90a`, `sm_100a`).
    pub target: String,
    /// The compiler that wrote it.
    pub compiler: CompilerInfo,
    /// The source the operator was declared in.
    pub source: SourceInfo,
    /// Symbolic sizes of the parameters' shapes.
    pub sizes: Vec<String>,
    /// Parameters in order, as kernel parameters are recorded (`out` tensors are
    /// [`Role::Output`]; scalars have an empty shape).
    pub params: Vec<ParamMeta>,
    /// Intermediate buffers, allocated zero-filled once per call.
    pub buffers: Vec<BufferMeta>,
    /// Launches in order.
    pub launches: Vec<LaunchStep>,
}

/// An intermediate buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferMeta {
    /// Name (unique among parameters and buffers).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape as size expressions over [`OperatorPlan::sizes`].
    pub shape: Vec<String>,
}

/// One launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchStep {
    /// Kernel name.
    pub kernel: String,
    /// The kernel's metadata file, beside the plan (`<kernel>.<target>.meta.json`).
    pub meta: String,
    /// Per kernel parameter, in its order: the parameter and the operator parameter or buffer
    /// passed to it.
    pub args: Vec<ArgBinding>,
}

/// What one kernel parameter receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgBinding {
    /// The kernel's parameter.
    pub param: String,
    /// The operator parameter or buffer.
    pub value: String,
}

/// Why a plan could not be read or executed.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The JSON does not parse or has another schema version.
    #[error("plan: {0}")]
    Schema(String),
    /// The plan is inconsistent (a launch names something that is not a parameter or buffer).
    #[error("plan `{operator}`: {message}")]
    Invalid {
        /// Operator name.
        operator: String,
        /// What is wrong.
        message: String,
    },
    /// The caller's tensors do not fit the operator's parameters (nothing was launched).
    #[error("operator `{operator}`: {source}")]
    Bind {
        /// Operator name.
        operator: String,
        /// The binder's error (it names the tensor).
        source: BindError,
    },
    /// A buffer's shape could not be evaluated.
    #[error("operator `{operator}`: buffer `{buffer}`: {source}")]
    BufferShape {
        /// Operator name.
        operator: String,
        /// Buffer name.
        buffer: String,
        /// The evaluator's error.
        source: ExprError,
    },
    /// A buffer could not be allocated.
    #[error("operator `{operator}`: buffer `{buffer}`: {source}")]
    Alloc {
        /// Operator name.
        operator: String,
        /// Buffer name.
        buffer: String,
        /// Why.
        source: TensorError,
    },
    /// A launch failed; earlier launches ran.
    #[error("operator `{operator}`, launch {index} (`{kernel}`): {message}")]
    Launch {
        /// Operator name.
        operator: String,
        /// Position of the launch (0-based).
        index: usize,
        /// Kernel name.
        kernel: String,
        /// The launcher's error.
        message: String,
    },
}

impl OperatorPlan {
    /// Parses and checks a plan file's text.
    ///
    /// # Errors
    /// [`PlanError::Schema`] for bad JSON or another schema version; [`PlanError::Invalid`] when
    /// a launch names an unknown value.
    pub fn from_json(text: &str) -> Result<OperatorPlan, PlanError> {
        let plan: OperatorPlan = serde_json::from_str(text).map_err(|e| PlanError::Schema(e.to_string()))?;
        if plan.schema_version != PLAN_SCHEMA_VERSION {
            return Err(PlanError::Schema(format!("schema version {} (this reader knows {PLAN_SCHEMA_VERSION})", plan.schema_version)));
        }
        plan.validate()?;
        Ok(plan)
    }

    /// The plan as pretty JSON.
    ///
    /// # Errors
    /// Serialisation failure (not expected for a well-formed plan).
    pub fn to_json_string(&self) -> Result<String, PlanError> {
        serde_json::to_string_pretty(self).map_err(|e| PlanError::Schema(e.to_string()))
    }

    /// Checks that names are unique and every launch argument is a parameter or buffer.
    ///
    /// # Errors
    /// [`PlanError::Invalid`] naming the first problem.
    pub fn validate(&self) -> Result<(), PlanError> {
        let invalid = |message: String| PlanError::Invalid { operator: self.operator.clone(), message };
        let mut names = std::collections::BTreeSet::new();
        for n in self.params.iter().map(|p| &p.name).chain(self.buffers.iter().map(|b| &b.name)) {
            if !names.insert(n) {
                return Err(invalid(format!("`{n}` is declared twice")));
            }
        }
        for (i, l) in self.launches.iter().enumerate() {
            for a in &l.args {
                if !names.contains(&a.value) {
                    return Err(invalid(format!("launch {i} (`{}`) passes `{}`, which is neither a parameter nor a buffer", l.kernel, a.value)));
                }
            }
        }
        Ok(())
    }

    /// The parameters as a binder signature (no grid of its own).
    fn signature<'a>(&'a self, grid: &'a [String; 3]) -> Signature<'a> {
        Signature { kernel: &self.operator, sizes: &self.sizes, params: &self.params, grid, block_threads: 32, dynamic_smem_bytes: 0, envelope: &[] }
    }
}

/// One argument of a launch, in the kernel's parameter order.
#[derive(Debug)]
pub enum LaunchArg<'b, B> {
    /// A tensor: the operator parameter or buffer's memory, with its dtype and shape.
    Tensor {
        /// The kernel's parameter.
        param: &'b str,
        /// Element type.
        dtype: DType,
        /// Extents.
        shape: &'b [usize],
        /// Its memory (the launch may write it).
        buf: &'b mut B,
    },
    /// A scalar operator parameter.
    Scalar {
        /// The kernel's parameter.
        param: &'b str,
        /// Its value.
        value: Scalar,
    },
}

/// Where a plan's tensors live and how its kernels run: host memory and the interpreter, or
/// device memory and a GPU. [`execute`] owns the order of everything; a launcher only moves
/// bytes and launches.
pub trait Launcher {
    /// One tensor's memory.
    type Buf;
    /// Copies a caller's tensor in.
    ///
    /// # Errors
    /// As text; the executor adds the tensor's name.
    fn upload(&mut self, t: &HostTensor) -> Result<Self::Buf, String>;
    /// Allocates a zero-filled tensor.
    ///
    /// # Errors
    /// As text.
    fn zeros(&mut self, dtype: DType, shape: &[usize]) -> Result<Self::Buf, String>;
    /// Launches `step` with `args` (in the kernel's parameter order); returns when its outputs
    /// are in the buffers.
    ///
    /// # Errors
    /// Anything that stops the launch, as text (the executor adds the launch and kernel).
    fn launch(&mut self, step: &LaunchStep, args: &mut [LaunchArg<'_, Self::Buf>]) -> Result<(), String>;
    /// Copies a tensor out.
    ///
    /// # Errors
    /// As text.
    fn download(&mut self, buf: &Self::Buf, dtype: DType, shape: &[usize]) -> Result<HostTensor, String>;
}

/// The values of a kernel's bare-name size dimensions, read from the extents of the tensors
/// passed to it (`shapes`: kernel parameter → extents). A launcher that binds a kernel without
/// host tensors passes these as explicit sizes.
pub fn kernel_sizes(params: &[ParamMeta], shapes: &BTreeMap<&str, &[usize]>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for p in params {
        let Some(shape) = shapes.get(p.name.as_str()) else { continue };
        for (text, &extent) in p.shape.iter().zip(shape.iter()) {
            if let Ok(e) = SizeExpr::parse(text) {
                if let Some(s) = e.as_symbol() {
                    out.entry(s.to_string()).or_insert(extent as u64);
                }
            }
        }
    }
    out
}

/// Checks `inputs` against the operator's parameters (what [`execute`] does before anything
/// else), without a launcher: for callers that want argument mistakes reported before they
/// acquire a GPU.
///
/// # Errors
/// [`PlanError::Bind`] naming the tensor, or an invalid plan.
pub fn check_inputs(plan: &OperatorPlan, inputs: &TensorMap) -> Result<(), PlanError> {
    plan.validate()?;
    let grid = ["1".to_string(), "1".to_string(), "1".to_string()];
    let sig = plan.signature(&grid);
    let args = Args::from_tensor_map(sig, inputs.clone());
    bind::bind(sig, &args).map(|_| ()).map_err(|source| PlanError::Bind { operator: plan.operator.clone(), source })
}

/// A tensor during execution: its dtype, extents and the launcher's memory.
type Value<B> = (DType, Vec<usize>, B);

/// Executes `plan` on `inputs` (tensors and scalars by operator parameter name, scalars as
/// one-element tensors; `out` parameters may be left out). Returns every `out` parameter.
///
/// # Errors
/// [`PlanError::Bind`] before anything is copied or launched when the inputs do not fit
/// (naming the tensor); buffer errors; [`PlanError::Launch`] for a failed launch.
pub fn execute<L: Launcher>(plan: &OperatorPlan, inputs: TensorMap, launcher: &mut L) -> Result<TensorMap, PlanError> {
    plan.validate()?;
    let op = || plan.operator.clone();
    let grid = ["1".to_string(), "1".to_string(), "1".to_string()];
    let sig = plan.signature(&grid);
    let args = Args::from_tensor_map(sig, inputs);
    let bound = bind::bind(sig, &args).map_err(|source| PlanError::Bind { operator: op(), source })?;
    let env: BTreeMap<String, i64> = bound.sizes.iter().map(|(k, v)| (k.clone(), i64::try_from(*v).unwrap_or(i64::MAX))).collect();
    let mut scalars: BTreeMap<String, Scalar> = BTreeMap::new();
    // Every tensor value: (dtype, shape, memory).
    let mut values: BTreeMap<String, Value<L::Buf>> = BTreeMap::new();
    let alloc_err = |buffer: &str, message: String| PlanError::Launch { operator: op(), index: 0, kernel: format!("(allocating `{buffer}`)"), message };
    for a in &bound.args {
        match a {
            BoundArg::Scalar { name, value } => {
                scalars.insert(name.clone(), *value);
            }
            BoundArg::Tensor(t) => {
                let buf = match t.data {
                    Some(h) => launcher.upload(h),
                    None => launcher.zeros(t.dtype, &t.shape),
                }
                .map_err(|m| alloc_err(&t.name, m))?;
                values.insert(t.name.clone(), (t.dtype, t.shape.clone(), buf));
            }
        }
    }
    for b in &plan.buffers {
        let mut shape = vec![];
        for d in &b.shape {
            let v = SizeExpr::parse(d).and_then(|e| e.eval(&env)).map_err(|source| PlanError::BufferShape { operator: op(), buffer: b.name.clone(), source })?;
            shape.push(usize::try_from(v).map_err(|_| PlanError::Invalid { operator: op(), message: format!("buffer `{}`: extent `{d}` = {v} is negative", b.name) })?);
        }
        crate::tensor::numel(&shape).map_err(|source| PlanError::Alloc { operator: op(), buffer: b.name.clone(), source })?;
        let buf = launcher.zeros(b.dtype, &shape).map_err(|m| alloc_err(&b.name, m))?;
        values.insert(b.name.clone(), (b.dtype, shape, buf));
    }
    for (index, step) in plan.launches.iter().enumerate() {
        let fail = |message: String| PlanError::Launch { operator: op(), index, kernel: step.kernel.clone(), message };
        // Take each tensor out of the table for the launch (a value passed twice is refused:
        // the launch would alias it), then put them all back.
        let mut taken: Vec<(String, Value<L::Buf>)> = vec![];
        for a in &step.args {
            if let Some(v) = values.remove(&a.value) {
                taken.push((a.value.clone(), v));
            } else if !scalars.contains_key(&a.value) {
                let e = fail(format!("`{}` is passed twice (or is not a value of the plan)", a.value));
                values.extend(taken);
                return Err(e);
            }
        }
        let result = {
            let mut args: Vec<LaunchArg<'_, L::Buf>> = vec![];
            let mut slots: BTreeMap<&str, &mut Value<L::Buf>> = taken.iter_mut().map(|(n, v)| (n.as_str(), v)).collect();
            for a in &step.args {
                if let Some(v) = scalars.get(&a.value) {
                    args.push(LaunchArg::Scalar { param: &a.param, value: *v });
                } else if let Some(slot) = slots.remove(a.value.as_str()) {
                    let (dtype, shape, buf) = slot;
                    args.push(LaunchArg::Tensor { param: &a.param, dtype: *dtype, shape, buf });
                }
            }
            launcher.launch(step, &mut args)
        };
        values.extend(taken);
        result.map_err(fail)?;
    }
    let mut out = TensorMap::new();
    for p in plan.params.iter().filter(|p| p.role != Role::Input) {
        if let Some((dtype, shape, buf)) = values.get(&p.name) {
            let t = launcher.download(buf, *dtype, shape).map_err(|m| PlanError::Launch { operator: op(), index: plan.launches.len(), kernel: format!("(reading `{}`)", p.name), message: m })?;
            out.insert(p.name.clone(), t);
        }
    }
    Ok(out)
}
