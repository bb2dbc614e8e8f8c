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

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::bind::{self, Args, BindError, BoundArg, Scalar, Signature};
use crate::expr::{ExprError, SizeExpr};
use crate::meta::{CompilerInfo, DType, ParamMeta, Role, SourceInfo};
use crate::st::TensorMap;
use crate::tensor::HostTensor;

mod inputs;
pub use inputs::{OffsetsMeta, SizeParamMeta};

/// Version of the plan schema written. Version 2 added [`OperatorPlan::size_params`] and
/// [`OperatorPlan::offsets`], version 3 [`OperatorPlan::optional`]; older files (none recorded)
/// are read as before. Readers refuse every other version.
pub const PLAN_SCHEMA_VERSION: u32 = 3;

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
    /// The size parameters the operator was built with (`const K = 128 in {64, 128};` and
    /// `tilec build --const K=64`); absent in schema version 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub size_params: Vec<SizeParamMeta>,
    /// Offset tables among the parameters (`cu_seqlens: i32[NP] offsets(T)`), checked before
    /// any launch when in host memory; absent in schema version 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offsets: Vec<OffsetsMeta>,
    /// Input tensors the caller may leave out (`s0: f32[B, H, K, V] optional(zeros)`): an
    /// absent one is allocated zero-filled with the extents the other parameters give, as fla
    /// treats `initial_state=None` and `dht=None`. Absent before schema version 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional: Vec<String>,
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
    /// A tensor's dimension set by a size parameter has another size than this plan was built
    /// for (nothing was launched).
    #[error("operator `{operator}`: {source}: it is compiled with {} = {}; {}", size.name, size.value, inputs::size_help(size, *found))]
    UnsupportedSize {
        /// Operator name.
        operator: String,
        /// The binder's error (it names the tensor and dimension).
        source: Box<BindError>,
        /// The size parameter.
        size: Box<SizeParamMeta>,
        /// The caller's extent.
        found: usize,
    },
    /// An offset table (`offsets(T)`) whose values are not boundaries into its size (nothing
    /// was launched).
    #[error("operator `{operator}`: `{param}` is not an offset table into {total} = {value}: {message}")]
    BadOffsets {
        /// Operator name.
        operator: String,
        /// The parameter.
        param: String,
        /// The size it indexes.
        total: String,
        /// The size's value.
        value: u64,
        /// The first entry that is wrong, and why.
        message: String,
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
    /// A tensor or buffer could not be allocated, copied in or copied out.
    #[error("operator `{operator}`: tensor `{tensor}`: {message}")]
    Memory {
        /// Operator name.
        operator: String,
        /// The parameter or buffer.
        tensor: String,
        /// Why (the launcher's or the shape check's message).
        message: String,
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
        if !(1..=PLAN_SCHEMA_VERSION).contains(&plan.schema_version) {
            return Err(PlanError::Schema(format!("schema version {} (this reader knows 1..={PLAN_SCHEMA_VERSION})", plan.schema_version)));
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
        self.validate_inputs()?;
        let scalars: BTreeSet<&String> = self.params.iter().filter(|p| p.shape.is_empty()).map(|p| &p.name).collect();
        for (i, l) in self.launches.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for a in &l.args {
                if !names.contains(&a.value) {
                    return Err(invalid(format!("launch {i} (`{}`) passes `{}`, which is neither a parameter nor a buffer", l.kernel, a.value)));
                }
                // A kernel's tensor parameters never alias (a scalar may be passed twice).
                if !scalars.contains(&a.value) && !seen.insert(&a.value) {
                    return Err(invalid(format!("launch {i} (`{}`) passes tensor `{}` twice", l.kernel, a.value)));
                }
            }
        }
        Ok(())
    }

    /// The caller's tensors as binder arguments: a one-element tensor named like a scalar
    /// parameter becomes that scalar (how files carry scalars).
    pub fn args(&self, tensors: TensorMap) -> Args {
        Args::from_tensor_map(self.signature(&grid_of_one()), tensors)
    }

    /// Binds `args` against the parameters: dtypes, ranks and extents checked, sizes inferred.
    fn bind<'a>(&self, args: &'a Args) -> Result<bind::Binding<'a>, PlanError> {
        let bound = bind::bind(self.signature(&grid_of_one()), args).map_err(|source| self.bind_error(source))?;
        self.check_offsets(&bound)?;
        Ok(bound)
    }

    /// The parameters as a binder signature (an operator has no grid of its own).
    fn signature<'a>(&'a self, grid: &'a [String; 3]) -> Signature<'a> {
        Signature { kernel: &self.operator, sizes: &self.sizes, params: &self.params, grid, block_threads: 32, dynamic_smem_bytes: 0, envelope: &[], optional: &self.optional }
    }
}

/// The grid `[1, 1, 1]` of an operator's signature.
fn grid_of_one() -> [String; 3] {
    ["1".to_string(), "1".to_string(), "1".to_string()]
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
/// passed to it (`shapes`: kernel parameter → extents), then the unknown factors of product
/// dimensions (`H * G`: G = extent / H). A launcher that binds a kernel without host tensors
/// passes these as explicit sizes.
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
    // Then the unknown factors of product dimensions (GVA's `H * G`), as the binder solves them
    // (a non-multiple was refused when the plan's arguments were bound).
    loop {
        let env: BTreeMap<String, i64> = out.iter().map(|(k, &v)| (k.clone(), i64::try_from(v).unwrap_or(i64::MAX))).collect();
        let found = bind::factors::solve_round(params, shapes, &env).unwrap_or_default();
        if found.is_empty() {
            return out;
        }
        out.extend(found.into_iter().map(|(s, v, _)| (s, v)));
    }
}

/// Checks `args` ([`OperatorPlan::args`]) against the operator's parameters — what [`execute`]
/// does before anything else — without a launcher: for callers that want argument mistakes
/// reported before they acquire a GPU.
///
/// # Errors
/// [`PlanError::Bind`] naming the tensor, or an invalid plan.
pub fn check_inputs(plan: &OperatorPlan, args: &Args) -> Result<(), PlanError> {
    plan.validate()?;
    plan.bind(args).map(|_| ())
}

/// A tensor during execution: its dtype, extents and the launcher's memory.
type Value<B> = (DType, Vec<usize>, B);

/// Executes `plan` on `args` ([`OperatorPlan::args`]: tensors and scalars by operator parameter
/// name; `out` parameters may be left out). Returns every `out` parameter. The caller's tensors
/// are read, not copied, until the launcher uploads them.
///
/// # Errors
/// [`PlanError::Bind`] before anything is copied or launched when the inputs do not fit
/// (naming the tensor); [`PlanError::Memory`] for a tensor that cannot be allocated or copied;
/// [`PlanError::Launch`] for a failed launch.
pub fn execute<L: Launcher>(plan: &OperatorPlan, args: &Args, launcher: &mut L) -> Result<TensorMap, PlanError> {
    plan.validate()?;
    let op = || plan.operator.clone();
    let bound = plan.bind(args)?;
    let env: BTreeMap<String, i64> = bound.sizes.iter().map(|(k, v)| (k.clone(), i64::try_from(*v).unwrap_or(i64::MAX))).collect();
    let memory = |tensor: &str, message: String| PlanError::Memory { operator: op(), tensor: tensor.to_string(), message };
    let mut scalars: BTreeMap<String, Scalar> = BTreeMap::new();
    let mut values: BTreeMap<String, Value<L::Buf>> = BTreeMap::new();
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
                .map_err(|m| memory(&t.name, m))?;
                values.insert(t.name.clone(), (t.dtype, t.shape.clone(), buf));
            }
        }
    }
    for b in &plan.buffers {
        let mut shape = vec![];
        for d in &b.shape {
            let v = SizeExpr::parse(d).and_then(|e| e.eval(&env)).map_err(|source| PlanError::BufferShape { operator: op(), buffer: b.name.clone(), source })?;
            shape.push(usize::try_from(v).map_err(|_| memory(&b.name, format!("extent `{d}` = {v} is negative")))?);
        }
        crate::tensor::numel(&shape).map_err(|e| memory(&b.name, e.to_string()))?;
        let buf = launcher.zeros(b.dtype, &shape).map_err(|m| memory(&b.name, m))?;
        values.insert(b.name.clone(), (b.dtype, shape, buf));
    }
    for (index, step) in plan.launches.iter().enumerate() {
        // Take each tensor out of the table for the launch (validate() refused a tensor passed
        // twice, so each is taken once), then put them all back.
        let mut taken: Vec<(&str, Value<L::Buf>)> = step.args.iter().filter_map(|a| values.remove(&a.value).map(|v| (a.value.as_str(), v))).collect();
        let result = {
            let mut slots: BTreeMap<&str, &mut Value<L::Buf>> = taken.iter_mut().map(|(n, v)| (*n, v)).collect();
            let mut args: Vec<LaunchArg<'_, L::Buf>> = vec![];
            for a in &step.args {
                if let Some(v) = scalars.get(&a.value) {
                    args.push(LaunchArg::Scalar { param: &a.param, value: *v });
                } else if let Some((dtype, shape, buf)) = slots.remove(a.value.as_str()) {
                    args.push(LaunchArg::Tensor { param: &a.param, dtype: *dtype, shape, buf });
                }
            }
            launcher.launch(step, &mut args)
        };
        values.extend(taken.into_iter().map(|(n, v)| (n.to_string(), v)));
        result.map_err(|message| PlanError::Launch { operator: op(), index, kernel: step.kernel.clone(), message })?;
    }
    let mut out = TensorMap::new();
    for p in plan.params.iter().filter(|p| p.role != Role::Input) {
        if let Some((dtype, shape, buf)) = values.get(&p.name) {
            out.insert(p.name.clone(), launcher.download(buf, *dtype, shape).map_err(|m| memory(&p.name, m))?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn plan() -> OperatorPlan {
        let t = |name: &str, role| ParamMeta { name: name.into(), dtype: DType::F32, shape: vec!["N".into()], role };
        OperatorPlan {
            schema_version: PLAN_SCHEMA_VERSION,
            operator: "op".into(),
            target: "sm_90a".into(),
            compiler: CompilerInfo { name: "tilec".into(), version: "0".into() },
            source: SourceInfo { path: "x.tile".into(), hash: "0".into() },
            sizes: vec!["N".into()],
            params: vec![t("x", Role::Input), ParamMeta { name: "s".into(), dtype: DType::F32, shape: vec![], role: Role::Input }, t("y", Role::Output)],
            buffers: vec![BufferMeta { name: "t".into(), dtype: DType::F32, shape: vec!["2 * N".into()] }],
            launches: vec![LaunchStep { kernel: "k".into(), meta: "k.sm_90a.meta.json".into(), args: vec![ArgBinding { param: "a".into(), value: "x".into() }, ArgBinding { param: "b".into(), value: "y".into() }] }],
            size_params: vec![],
            offsets: vec![],
            optional: vec![],
        }
    }

    /// A launcher without host tensors gets every size a kernel's tensors determine: bare
    /// dimensions, then the unknown factor of a product (GVA: G = 6 / H with H = 3 from q).
    #[test]
    fn kernel_sizes_solve_product_dimensions() {
        let p = |name: &str, shape: &[&str]| ParamMeta { name: name.into(), dtype: DType::F32, shape: shape.iter().map(|s| s.to_string()).collect(), role: Role::Input };
        let params = [p("v", &["B", "(H * G)"]), p("q", &["B", "H"])];
        let shapes: BTreeMap<&str, &[usize]> = BTreeMap::from([("v", &[2usize, 6][..]), ("q", &[2usize, 3][..])]);
        let got = kernel_sizes(&params, &shapes);
        assert_eq!(got, BTreeMap::from([("B".to_string(), 2), ("H".to_string(), 3), ("G".to_string(), 2)]));
    }

    #[test]
    fn validation_refuses_aliases_and_unknown_values_but_not_a_repeated_scalar() {
        assert!(plan().validate().is_ok());
        let mut p = plan();
        p.launches[0].args.push(ArgBinding { param: "c".into(), value: "x".into() });
        assert!(matches!(p.validate(), Err(PlanError::Invalid { message, .. }) if message.contains("passes tensor `x` twice")));
        let mut p = plan();
        p.launches[0].args.extend([ArgBinding { param: "c".into(), value: "s".into() }, ArgBinding { param: "d".into(), value: "s".into() }]);
        assert!(p.validate().is_ok());
        let mut p = plan();
        p.launches[0].args[1].value = "nothing".into();
        assert!(matches!(p.validate(), Err(PlanError::Invalid { message, .. }) if message.contains("neither a parameter nor a buffer")));
        // Versions 1 and 2 (before size parameters, before optional inputs) still read; a later
        // version is refused.
        let json = plan().to_json_string().unwrap();
        assert!(json.contains("\"schema_version\": 3") && !json.contains("size_params") && !json.contains("optional"), "empty lists are omitted");
        for old in [1, 2] {
            assert!(OperatorPlan::from_json(&json.replace("\"schema_version\": 3", &format!("\"schema_version\": {old}"))).is_ok());
        }
        let json4 = json.replace("\"schema_version\": 3", "\"schema_version\": 4");
        assert!(matches!(OperatorPlan::from_json(&json4), Err(PlanError::Schema(m)) if m.contains("schema version 4")));
    }

    /// Hand-edited size parameters and offsets are refused when the plan is read: dimensions
    /// that are not the parameter's extent, a value outside the set, an empty or repeated set,
    /// a version 1 plan with version 2 fields.
    #[test]
    fn size_params_and_offsets_are_validated() {
        let with = |dims: &[&str], value: i64, supported: &[i64]| {
            let mut p = plan();
            p.params[0].shape = vec!["N".into(), "64".into()];
            p.size_params = vec![SizeParamMeta { name: "K".into(), value, supported: supported.to_vec(), dims: dims.iter().map(|d| d.to_string()).collect() }];
            p.validate()
        };
        assert!(with(&["x[1]"], 64, &[64, 128]).is_ok());
        for (dims, value, supported) in [(&["x[0]"][..], 64, &[64, 128][..]), (&["x[5]"], 64, &[64, 128]), (&["nope[1]"], 64, &[64, 128]), (&["x"], 64, &[64, 128]), (&["x[1]"], 96, &[64, 128]), (&["x[1]"], 64, &[]), (&["x[1]"], 64, &[64, 64])] {
            assert!(matches!(with(dims, value, supported), Err(PlanError::Invalid { .. })), "{dims:?} {value} {supported:?}");
        }
        let mut p = plan();
        p.schema_version = 1;
        p.offsets = vec![OffsetsMeta { param: "x".into(), total: "N".into() }];
        assert!(matches!(p.validate(), Err(PlanError::Invalid { message, .. }) if message.contains("version 1")));
    }

    /// A launcher on host memory that records what it is given: y = x + s, and t's shape.
    pub(super) struct Host(pub(super) Vec<String>);

    impl Launcher for Host {
        type Buf = Vec<f32>;
        fn upload(&mut self, t: &HostTensor) -> Result<Vec<f32>, String> {
            Ok(t.to_f32())
        }
        fn zeros(&mut self, _: DType, shape: &[usize]) -> Result<Vec<f32>, String> {
            self.0.push(format!("zeros {shape:?}"));
            Ok(vec![0.0; shape.iter().product()])
        }
        fn launch(&mut self, step: &LaunchStep, args: &mut [LaunchArg<'_, Vec<f32>>]) -> Result<(), String> {
            self.0.push(step.kernel.clone());
            let x = match &args[0] {
                LaunchArg::Tensor { buf, .. } => (*buf).clone(),
                LaunchArg::Scalar { .. } => return Err("x is a tensor".into()),
            };
            let LaunchArg::Scalar { value: Scalar::F32(s), .. } = args[2] else { return Err("s is an f32 scalar".into()) };
            let LaunchArg::Tensor { buf, .. } = &mut args[1] else { return Err("y is a tensor".into()) };
            **buf = x.iter().map(|v| v + s).collect();
            Ok(())
        }
        fn download(&mut self, buf: &Vec<f32>, dtype: DType, shape: &[usize]) -> Result<HostTensor, String> {
            HostTensor::from_f32(dtype, shape.to_vec(), buf).map_err(|e| e.to_string())
        }
    }

    #[test]
    fn execution_binds_allocates_routes_and_returns_the_outputs() {
        let mut p = plan();
        p.launches[0].args.push(ArgBinding { param: "c".into(), value: "s".into() });
        let x = HostTensor::from_f32(DType::F32, vec![3], &[1.0, 2.0, 3.0]).unwrap();
        let args = p.args(TensorMap::from([("x".into(), x), ("s".into(), HostTensor::from(Scalar::F32(0.5)))]));
        let mut l = Host(vec![]);
        let out = execute(&p, &args, &mut l).unwrap();
        assert_eq!(out.keys().collect::<Vec<_>>(), ["y"]);
        assert_eq!(out["y"].to_f32(), [1.5, 2.5, 3.5]);
        // y allocated with the bound N = 3, the buffer with its expression 2 * N, then one launch.
        assert_eq!(l.0, ["zeros [3]", "zeros [6]", "k"]);
        // A wrong dtype is refused before anything is allocated, naming the tensor.
        let bad = HostTensor::from_f32(DType::Bf16, vec![3], &[1.0, 2.0, 3.0]).unwrap();
        let mut l = Host(vec![]);
        let e = execute(&p, &p.args(TensorMap::from([("x".into(), bad), ("s".into(), HostTensor::from(Scalar::F32(0.5)))])), &mut l).unwrap_err();
        assert!(matches!(&e, PlanError::Bind { .. }) && e.to_string().contains("`x`"), "{e}");
        assert!(l.0.is_empty());
    }
}
