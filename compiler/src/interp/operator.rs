//! Running a multi-kernel operator on the interpreter: the operator's plan
//! ([`crate::artifact::operator_plan`]) executed by the one plan executor
//! ([`tilec_abi::plan::execute`]), each launch a whole-grid interpreter run of the module's kernel.

use tilec_abi::meta::DType;
use tilec_abi::plan::{execute, LaunchArg, LaunchStep, Launcher, PlanError};
use tilec_abi::st::TensorMap;
use tilec_abi::tensor::HostTensor;

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
    /// Steps left of the whole call's budget ([`Options::max_steps`] is for the operator).
    steps_left: u64,
    /// When the whole call's [`Options::time_limit`] runs out.
    deadline: Option<std::time::Instant>,
}

impl Interp<'_> {
    /// Refuses a tensor past the interpreter's element limit before allocating it.
    fn fits(&self, shape: &[usize]) -> Result<(), String> {
        let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
        match n {
            Some(n) if n <= self.opts.max_elements => Ok(()),
            _ => Err(format!("a tensor of shape {shape:?} is larger than the interpreter's limit of {} elements", self.opts.max_elements)),
        }
    }
}

impl Launcher for Interp<'_> {
    type Buf = HostTensor;

    fn upload(&mut self, t: &HostTensor) -> Result<HostTensor, String> {
        self.fits(&t.shape)?;
        Ok(t.clone())
    }

    fn zeros(&mut self, dtype: DType, shape: &[usize]) -> Result<HostTensor, String> {
        self.fits(shape)?;
        HostTensor::zeros(dtype, shape.to_vec()).map_err(|e| e.to_string())
    }

    fn launch(&mut self, step: &LaunchStep, args: &mut [LaunchArg<'_, HostTensor>]) -> Result<(), String> {
        let index = self.index;
        self.index += 1;
        let k: &Kernel = self.module.kernels.iter().find(|k| k.name == step.kernel).ok_or_else(|| format!("no kernel `{}` in the module", step.kernel))?;
        // The tensors move into the kernel's inputs and back (no copy per launch); an output
        // replaces the tensor it is bound to.
        let mut inputs = TensorMap::new();
        for a in args.iter_mut() {
            match a {
                LaunchArg::Tensor { param, buf, dtype, .. } => inputs.insert(param.to_string(), std::mem::replace(&mut **buf, HostTensor { dtype: *dtype, shape: vec![0], bytes: vec![] })),
                LaunchArg::Scalar { param, value } => inputs.insert(param.to_string(), HostTensor::from(*value)),
            };
        }
        // The step budget and the time limit are the whole call's: each launch gets what is left.
        let mut opts = self.opts.clone();
        opts.max_steps = self.steps_left;
        if let Some(d) = self.deadline {
            opts.time_limit = Some(d.saturating_duration_since(std::time::Instant::now()).max(std::time::Duration::from_millis(1)));
        }
        let (mut outputs, failure) = match run_kernel_with(k, &inputs, &opts) {
            Ok(run) => {
                self.steps_left = self.steps_left.saturating_sub(run.steps);
                (run.outputs, None)
            }
            Err(e) => (TensorMap::new(), Some(e)),
        };
        for a in args.iter_mut() {
            if let LaunchArg::Tensor { param, buf, .. } = a {
                if let Some(t) = outputs.remove(*param).or_else(|| inputs.remove(*param)) {
                    **buf = t;
                }
            }
        }
        match failure {
            None => Ok(()),
            Some(e) => {
                let msg = e.to_string();
                self.failure = Some(LaunchFailure { index, error: e });
                Err(msg)
            }
        }
    }

    fn download(&mut self, buf: &HostTensor, _: DType, _: &[usize]) -> Result<HostTensor, String> {
        Ok(buf.clone())
    }
}

/// Runs operator `op` of `module` on `inputs` (tensors and scalars by the operator's parameter
/// names, scalars as one-element tensors). Returns the operator's `out` tensors.
/// [`Options::max_steps`] and [`Options::time_limit`] bound the whole call (all launches);
/// [`Options::max_elements`] every tensor and buffer, checked before it is allocated.
///
/// # Errors
/// The executor's [`PlanError`] (inputs refused before any launch, naming the tensor; a buffer
/// that cannot be allocated; a failed launch), with the interpreter's own error for a failed
/// launch when there is one.
pub fn run_operator(module: &Module, op: &Operator, inputs: TensorMap, opts: &Options) -> Result<TensorMap, (PlanError, Option<LaunchFailure>)> {
    let plan = crate::artifact::operator_plan(op, &module.size_params, opts.target, "", &[]).map_err(|e| (PlanError::Invalid { operator: op.name.clone(), message: e.to_string() }, None))?;
    let deadline = opts.time_limit.map(|t| std::time::Instant::now() + t);
    let mut l = Interp { module, opts, index: 0, failure: None, steps_left: opts.max_steps, deadline };
    execute(&plan, &plan.args(inputs), &mut l).map_err(|e| (e, l.failure.take()))
}
