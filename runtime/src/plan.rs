//! Running an operator plan (`<operator>.<target>.plan.json`) on a GPU: the one executor,
//! [`tilec_abi::plan::execute`], with a launcher whose tensors live in device memory for the
//! whole call — inputs uploaded once, buffers allocated once, nothing copied between launches,
//! outputs downloaded at the end.
//!
//! Each launch binds its kernel's metadata without host data: every tensor parameter's extents
//! follow from the sizes the routed tensors' extents give ([`tilec_abi::plan::kernel_sizes`]),
//! and the bound shape must equal the routed tensor's (an error naming the parameter otherwise).
//! With timing on, CUDA events around each launch give per-kernel times; each launch is
//! synchronised so a fault is reported at the kernel that caused it. A [`PlanRunner`] loads each
//! kernel's module once and keeps it for every later run (`tilec-run --repeat/--bench`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaSlice;
use tilec_abi::bind::{bind, Args, BoundArg, Signature};
use tilec_abi::meta::{DType, Role};
use tilec_abi::plan::{execute, kernel_sizes, LaunchArg, LaunchStep, Launcher, OperatorPlan, PlanError};
use tilec_abi::st::TensorMap;
use tilec_abi::tensor::HostTensor;

use crate::artifact::Artifact;
use crate::launch::{driver_err, guarded, CodeKind, Gpu, Kernel, RuntimeError};

/// One executed plan.
#[derive(Debug)]
pub struct PlanRun {
    /// The operator's `out` tensors.
    pub outputs: TensorMap,
    /// Per launch, in order: kernel name and its device time in ms (empty without timing).
    pub kernel_ms: Vec<(String, f32)>,
}

/// Runs one plan, any number of times, with its kernels' modules loaded once.
#[derive(Debug)]
pub struct PlanRunner<'a> {
    gpu: &'a Gpu,
    plan: &'a OperatorPlan,
    dir: &'a Path,
    code: CodeKind,
    /// Loaded kernels by name (loaded at their first launch).
    kernels: HashMap<String, Kernel>,
}

/// One call's launcher: the runner's kernels, and what this call records.
struct Device<'r, 'g> {
    gpu: &'g Gpu,
    dir: &'r Path,
    code: CodeKind,
    kernels: &'r mut HashMap<String, Kernel>,
    timed: bool,
    kernel_ms: Vec<(String, f32)>,
    error: Option<RuntimeError>,
}

impl Device<'_, '_> {
    fn keep<T>(&mut self, r: Result<T, RuntimeError>) -> Result<T, String> {
        r.map_err(|e| {
            let msg = e.to_string();
            self.error = Some(e);
            msg
        })
    }

    fn run_step(&mut self, step: &LaunchStep, args: &mut [LaunchArg<'_, CudaSlice<u8>>]) -> Result<(), RuntimeError> {
        let (gpu, timed) = (self.gpu, self.timed);
        if !self.kernels.contains_key(&step.kernel) {
            let artifact = Artifact::open(&self.dir.join(&step.meta))?;
            let k = gpu.load(&artifact, self.code)?;
            self.kernels.insert(step.kernel.clone(), k);
        }
        let kernel = &self.kernels[&step.kernel];
        // Bind without host data: every tensor as an output (so it need not be supplied), its
        // extents from the sizes the routed tensors give.
        let params: Vec<_> = kernel.meta.params.iter().cloned().map(|mut p| {
            if !p.shape.is_empty() {
                p.role = Role::Output;
            }
            p
        }).collect();
        let shapes: BTreeMap<&str, &[usize]> = args.iter().filter_map(|a| match a {
            LaunchArg::Tensor { param, shape, .. } => Some((*param, *shape)),
            LaunchArg::Scalar { .. } => None,
        }).collect();
        let mut call = Args { sizes: kernel_sizes(&kernel.meta.params, &shapes), ..Args::default() };
        for a in args.iter() {
            if let LaunchArg::Scalar { param, value } = a {
                call.scalars.insert(param.to_string(), *value);
            }
        }
        let mut sig = Signature::from(&kernel.meta);
        sig.params = &params;
        let binding = bind(sig, &call)?;
        let mut dev = vec![];
        for b in &binding.args {
            let BoundArg::Tensor(t) = b else { continue };
            let routed = args.iter().find_map(|a| match a {
                LaunchArg::Tensor { param, shape, buf, dtype } if *param == t.name => Some((*shape, &**buf, *dtype)),
                _ => None,
            });
            let Some((shape, buf, dtype)) = routed else {
                return Err(RuntimeError::Driver { op: "plan".into(), message: format!("kernel `{}`: no tensor routed to `{}`", step.kernel, t.name) });
            };
            if shape != t.shape.as_slice() || dtype != t.dtype {
                return Err(RuntimeError::Driver { op: "plan".into(), message: format!("kernel `{}` parameter `{}`: routed a {dtype:?} {shape:?} tensor, its signature gives {:?} {:?}", step.kernel, t.name, t.dtype, t.shape) });
            }
            dev.push(buf);
        }
        guarded("plan launch", || {
            let ev = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| driver_err("cuEventCreate", e));
            let (start, end) = (ev()?, ev()?);
            start.record(&gpu.stream).map_err(|e| driver_err("cuEventRecord", e))?;
            gpu.launch(kernel, &binding, &dev)?;
            end.record(&gpu.stream).map_err(|e| driver_err("cuEventRecord", e))?;
            gpu.stream.synchronize().map_err(|e| driver_err(&format!("kernel `{}` (stream synchronize)", step.kernel), e))?;
            if timed {
                let ms = start.elapsed_ms(&end).map_err(|e| driver_err("cuEventElapsedTime", e))?;
                self.kernel_ms.push((step.kernel.clone(), ms));
            }
            Ok(())
        })
    }
}

impl Launcher for Device<'_, '_> {
    type Buf = CudaSlice<u8>;

    fn upload(&mut self, t: &HostTensor) -> Result<CudaSlice<u8>, String> {
        let r = if t.bytes.is_empty() {
            self.gpu.stream.alloc_zeros::<u8>(1).map_err(|e| driver_err("cuMemAlloc", e))
        } else {
            self.gpu.stream.clone_htod(&t.bytes).map_err(|e| driver_err("cuMemcpyHtoD", e))
        };
        self.keep(r)
    }

    fn zeros(&mut self, dtype: DType, shape: &[usize]) -> Result<CudaSlice<u8>, String> {
        let n = shape.iter().product::<usize>() * dtype.size_bytes();
        let r = self.gpu.stream.alloc_zeros::<u8>(n.max(1)).map_err(|e| driver_err("cuMemAlloc", e));
        self.keep(r)
    }

    fn launch(&mut self, step: &LaunchStep, args: &mut [LaunchArg<'_, CudaSlice<u8>>]) -> Result<(), String> {
        let r = self.run_step(step, args);
        self.keep(r)
    }

    fn download(&mut self, buf: &CudaSlice<u8>, dtype: DType, shape: &[usize]) -> Result<HostTensor, String> {
        let r = (|| {
            let mut bytes = self.gpu.stream.clone_dtoh(buf).map_err(|e| driver_err("cuMemcpyDtoH", e))?;
            bytes.truncate(shape.iter().product::<usize>() * dtype.size_bytes());
            HostTensor::new(dtype, shape.to_vec(), bytes).map_err(|e| RuntimeError::Driver { op: "download".into(), message: e.to_string() })
        })();
        self.keep(r)
    }
}

impl Gpu {
    /// A runner for `plan`, whose kernels' metadata and code are in `dir`.
    pub fn plan_runner<'a>(&'a self, plan: &'a OperatorPlan, dir: &'a Path, code: CodeKind) -> PlanRunner<'a> {
        PlanRunner { gpu: self, plan, dir, code, kernels: HashMap::new() }
    }
}

impl PlanRunner<'_> {
    /// Executes the plan on `args` ([`OperatorPlan::args`]). With `timed`, each launch's device
    /// time is recorded.
    ///
    /// # Errors
    /// The plan's own errors (inputs refused before anything is copied, naming the tensor), with
    /// the GPU's error for the launch or copy that failed.
    pub fn run(&mut self, args: &Args, timed: bool) -> Result<PlanRun, (PlanError, Option<RuntimeError>)> {
        let mut d = Device { gpu: self.gpu, dir: self.dir, code: self.code, kernels: &mut self.kernels, timed, kernel_ms: vec![], error: None };
        match execute(self.plan, args, &mut d) {
            Ok(outputs) => Ok(PlanRun { outputs, kernel_ms: d.kernel_ms }),
            Err(e) => Err((e, d.error.take())),
        }
    }
}
