//! Running a multi-kernel operator on the interpreter: the operator's plan
//! ([`crate::artifact::operator_plan`]) executed by the one plan executor
//! ([`tilec_abi::plan::execute`]), each launch a whole-grid interpreter run of the module's kernel.

use tilec_abi::plan::{execute, LaunchStep, Launcher, PlanError};
use tilec_abi::st::TensorMap;

use super::{run_kernel_with, InterpError, Options};
use crate::ir::{Kernel, Module, Operator};

/// A run-time failure inside one launch, kept whole so a caller can point at the statement.
#[derive(Debug)]
pub struct LaunchFailure {
    /// Position of the launch in the operator.
    pub index: usize,
    /// The interpreter's error.
    pub error: InterpError,
}

struct Interp<'a> {
    module: &'a Module,
    opts: &'a Options,
    index: usize,
    failure: Option<LaunchFailure>,
}

impl Launcher for Interp<'_> {
    fn launch(&mut self, step: &LaunchStep, args: TensorMap) -> Result<TensorMap, String> {
        let index = self.index;
        self.index += 1;
        let k: &Kernel = self.module.kernels.iter().find(|k| k.name == step.kernel).ok_or_else(|| format!("no kernel `{}` in the module", step.kernel))?;
        match run_kernel_with(k, &args, self.opts) {
            Ok(run) => Ok(run.outputs),
            Err(e) => {
                let msg = e.to_string();
                self.failure = Some(LaunchFailure { index, error: e });
                Err(msg)
            }
        }
    }
}

/// Runs operator `op` of `module` on `inputs` (tensors and scalars by the operator's parameter
/// names, scalars as one-element tensors). Returns the operator's `out` tensors.
///
/// # Errors
/// The executor's [`PlanError`] (inputs refused before any launch, naming the tensor; a buffer
/// that cannot be allocated; a failed launch), with the interpreter's own error for a failed
/// launch when there is one.
pub fn run_operator(module: &Module, op: &Operator, inputs: TensorMap, opts: &Options) -> Result<TensorMap, (PlanError, Option<LaunchFailure>)> {
    let plan = crate::artifact::operator_plan(op, opts.target, "", &[]).map_err(|e| (PlanError::Invalid { operator: op.name.clone(), message: e.to_string() }, None))?;
    let mut l = Interp { module, opts, index: 0, failure: None };
    execute(&plan, inputs, &mut l).map_err(|e| (e, l.failure.take()))
}
