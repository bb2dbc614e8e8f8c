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

use crate::bind::{self, Args, BindError, Signature};
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

/// Runs one launch of a plan: receives the kernel's arguments by parameter name (scalars as
/// one-element tensors) and returns its `out` tensors by parameter name.
pub trait Launcher {
    /// Launches `step` with `args`.
    ///
    /// # Errors
    /// Anything that stops the launch, as text (the executor adds the launch and kernel).
    fn launch(&mut self, step: &LaunchStep, args: TensorMap) -> Result<TensorMap, String>;
}

/// Executes `plan` on `inputs` (tensors and scalars by operator parameter name, scalars as
/// one-element tensors; `out` parameters may be left out). Returns every `out` parameter.
///
/// # Errors
/// [`PlanError::Bind`] before any launch when the inputs do not fit (naming the tensor); buffer
/// errors; [`PlanError::Launch`] for a failed launch.
pub fn execute(plan: &OperatorPlan, inputs: TensorMap, launcher: &mut dyn Launcher) -> Result<TensorMap, PlanError> {
    plan.validate()?;
    let grid = ["1".to_string(), "1".to_string(), "1".to_string()];
    let sig = plan.signature(&grid);
    let args = Args::from_tensor_map(sig, inputs.clone());
    let bound = bind::bind(sig, &args).map_err(|source| PlanError::Bind { operator: plan.operator.clone(), source })?;
    let env: BTreeMap<String, i64> = bound.sizes.iter().map(|(k, v)| (k.clone(), i64::try_from(*v).unwrap_or(i64::MAX))).collect();
    let mut values: TensorMap = inputs;
    for t in bound.outputs() {
        if t.data.is_none() {
            let z = HostTensor::zeros(t.dtype, t.shape.clone()).map_err(|source| PlanError::Alloc { operator: plan.operator.clone(), buffer: t.name.clone(), source })?;
            values.insert(t.name.clone(), z);
        }
    }
    for b in &plan.buffers {
        let mut shape = vec![];
        for d in &b.shape {
            let v = SizeExpr::parse(d).and_then(|e| e.eval(&env)).map_err(|source| PlanError::BufferShape { operator: plan.operator.clone(), buffer: b.name.clone(), source })?;
            shape.push(usize::try_from(v).unwrap_or(0));
        }
        let z = HostTensor::zeros(b.dtype, shape).map_err(|source| PlanError::Alloc { operator: plan.operator.clone(), buffer: b.name.clone(), source })?;
        values.insert(b.name.clone(), z);
    }
    for (index, step) in plan.launches.iter().enumerate() {
        let mut args = TensorMap::new();
        for a in &step.args {
            if let Some(t) = values.get(&a.value) {
                args.insert(a.param.clone(), t.clone());
            }
        }
        let outs = launcher.launch(step, args).map_err(|message| PlanError::Launch { operator: plan.operator.clone(), index, kernel: step.kernel.clone(), message })?;
        for (param, t) in outs {
            if let Some(a) = step.args.iter().find(|a| a.param == param) {
                values.insert(a.value.clone(), t);
            }
        }
    }
    Ok(plan.params.iter().filter(|p| p.role != Role::Input).filter_map(|p| values.remove(&p.name).map(|t| (p.name.clone(), t))).collect())
}
