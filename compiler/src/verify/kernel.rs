//! Verify-on-compile for kernels (`tilec build FILE --verify`): every kernel that declares
//! `contract(class)` naming a kverify operator class runs on the interpreter at the
//! [`cases`] shapes, and each output is judged against kverify's fp64 reference of that class,
//! in-process, with kverify's own machinery end to end:
//!
//! * inputs: `kverify::gates::inputs::generate` (standard normal, the class's input rule,
//!   rounded to the declared input dtype before the reference sees them: input rounding is
//!   never charged), bound to the kernel's parameters by [`super::contract::bind`];
//! * reference and error profile: the class's `Op::forward` (fp64, with the profile's depth n
//!   and per-element scale — matmul: n = K, scale = |A||B|);
//! * comparison: `kverify::gates::compare::compare` under the deterministic bound of
//!   `kverify::error_model` (CMP-01's): per element
//!   `γ(n, u_acc) scale_i + u_out |ref_i| + n η_acc`, at the kernel's declared precision
//!   (narrowest input dtype in, f32 accumulate, the output's dtype out).
//!
//! Per output the report is kverify's: the error and the bound at the element nearest its
//! bound, the margin (bound / error there) and the verdict (every element within its bound).

use std::collections::BTreeMap;

use kverify::error_model::{BoundKind, Precision};
use kverify::gates::compare::{compare, ValueReport};
use kverify::gates::inputs::{gate_seed, generate, Dist, Inputs};
use kverify::references::{Dims, RefOutput};
use kverify::tensor::{DType, Tensor};
use tilec_abi::tensor::HostTensor;

use super::contract::{bind, DimSource, KernelBinding};
use super::{Runner, VerifyError};
use crate::interp::{run_kernel_with, Options};
use crate::ir::{Index, Kernel, Op, ParamKind, SizeExpr, SizeVar};

/// The shapes a kernel is verified at, per class dimension from the kernel's tile extent t
/// along it (the longest `a..+t` range any load or store takes over a dimension of that size):
///
/// | case | size | reaches |
/// |---|---|---|
/// | whole tiles | 3t | three full tiles: three CTAs along every grid dimension over it, three trips of every loop over it |
/// | partial tiles | 2t + 1 | three tiles, the last of one element, in every dimension at once |
/// | under one tile | t / 2 + 1 | one partial tile smaller than the tile, in every dimension |
///
/// A dimension the kernel does not tile (point loads only) takes t = ⌈native / 2⌉ from the
/// class's native size, so that its cases reach past the native size (1.5× and native + 1): a
/// loop capped at the native extent is caught. One a constant extent fixes keeps it. Sizes are
/// clamped to the class's legal range; a case the class refuses (or one equal to an earlier
/// case) is not run.
pub const RECIPES: [(&str, fn(usize) -> usize); 3] = [("whole tiles", |t| 3 * t), ("partial tiles", |t| 2 * t + 1), ("under one tile", |t| t / 2 + 1)];

/// One verification shape of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCase {
    /// Its name in the report (`partial tiles M=129,K=65,N=257`).
    pub name: String,
    /// The class's dims.
    pub dims: Dims,
}

/// The verdict on one output at one shape.
#[derive(Clone, Debug)]
pub struct KernelJudgement {
    /// The case.
    pub case: String,
    /// The output parameter.
    pub output: String,
    /// The reference's reduction depth n for this output (its error profile's).
    pub depth: usize,
    /// The declared precision this output was judged at.
    pub precision: Precision,
    /// kverify's comparison: the worst element's error, bound and ratio.
    pub report: ValueReport,
}

impl KernelJudgement {
    /// Every compared element within its bound (kverify's verdict; a NaN or ±Inf where the
    /// reference is finite is an infinite error).
    pub fn ok(&self) -> bool {
        self.report.passed()
    }
}

/// What [`verify_kernel`] judged, and which cases it could not run.
#[derive(Clone, Debug, Default)]
pub struct KernelVerdict {
    /// One per output and case run.
    pub judgements: Vec<KernelJudgement>,
    /// Cases not run, with why.
    pub not_run: Vec<String>,
}

/// The tile extent t of each kernel size: the longest range any load or store takes over a
/// tensor dimension that is exactly that size.
pub fn tile_extents(kernel: &Kernel) -> BTreeMap<SizeVar, u32> {
    let mut tiles = BTreeMap::new();
    kernel.walk(|i| {
        let (Op::Load { src: p, index } | Op::Store { dst: p, index, .. }) = &kernel.insts[i].op else { return };
        let ParamKind::Tensor { shape, .. } = &kernel.params[*p].kind else { return };
        for (e, ix) in shape.iter().zip(index) {
            if let (SizeExpr::Sym(s), Index::Range { len, .. }) = (e, ix) {
                let t = tiles.entry(*s).or_insert(0);
                *t = (*t).max(*len);
            }
        }
    });
    tiles
}

/// The [`RECIPES`] shapes of a bound kernel (module doc), and the cases not run with why.
pub fn cases(kernel: &Kernel, b: &KernelBinding) -> (Vec<KernelCase>, Vec<String>) {
    let tiles = tile_extents(kernel);
    // A class dimension's tile: the longest of the kernel sizes that stand for it.
    let tile_of = |i: usize| b.size_dims.iter().filter(|(_, &j)| j == i).filter_map(|(s, _)| tiles.get(s)).max().map(|&t| t as usize);
    let (mut run, mut not_run) = (Vec::<KernelCase>::new(), vec![]);
    for (recipe, size) in RECIPES {
        let dims = Dims(
            b.class
                .dims
                .iter()
                .zip(&b.dims)
                .enumerate()
                .map(|(i, (d, src))| {
                    let v = match (src, tile_of(i)) {
                        (DimSource::Fixed(c), _) => *c as usize,
                        (_, Some(t)) => size(t),
                        (_, None) => size(d.native.div_ceil(2).max(1)),
                    };
                    (d.name.to_string(), v.clamp(d.min, d.max))
                })
                .collect(),
        );
        let name = format!("{recipe} {dims}");
        if run.iter().any(|c| c.dims == dims) {
            not_run.push(format!("{name}: the same shape as an earlier case"));
        } else if let Err(e) = b.class.check_dims(&dims) {
            not_run.push(format!("{name}: {e}"));
        } else {
            run.push(KernelCase { name, dims });
        }
    }
    (run, not_run)
}

/// The inputs of case `n` (the `n`-th case run): kverify's standard-normal generator under
/// the class's input rule, seeded by `gate_seed("tilec-verify", n)`, rounded to the declared
/// input dtype; `reference` holds them in f64 for the class's reference.
pub fn case_inputs(b: &KernelBinding, n: usize, case: &KernelCase) -> Inputs {
    generate(&b.class, &case.dims, Dist::Normal, gate_seed("tilec-verify", n as u64), b.precision.input)
}

/// Verifies `kernel` (which must declare a contract) at every [`cases`] shape on the
/// interpreter.
///
/// # Errors
/// [`VerifyError`] when the kernel cannot be bound, run or compared (a shape that differs from
/// the reference's); violations are judgements with `ok() == false`, not errors.
pub fn verify_kernel(kernel: &Kernel, opts: &Options) -> Result<KernelVerdict, VerifyError> {
    verify_kernel_on(kernel, &mut |inputs| run_kernel_with(kernel, &inputs, opts).map(|g| g.outputs).map_err(|e| VerifyError::Run(e.with_help())))
}

/// As [`verify_kernel`], with the kernel run by `run` on each case's inputs (named after its
/// parameters; sizes follow from their shapes): the interpreter, or the built sm_90a artifact
/// on a GPU ([`super::gpu::runner`] over `<kernel>.sm_90a.meta.json`, `--verify=gpu`).
///
/// # Errors
/// As [`verify_kernel`]; [`VerifyError::NoGpu`] from a GPU runner that found none.
pub fn verify_kernel_on(kernel: &Kernel, run_kernel: &mut Runner<'_>) -> Result<KernelVerdict, VerifyError> {
    let sig = |message: String| VerifyError::Run(format!("kernel `{}`: {message}", kernel.name));
    let contract = kernel.contract.as_ref().ok_or_else(|| sig("declares no contract".into()))?;
    let class = kverify::references::op_by_id(&contract.class).ok_or_else(|| sig(format!("no kverify operator class `{}`", contract.class)))?;
    let b = bind(kernel, &class, contract.span).map_err(|e| sig(e.message))?;
    let (run, not_run) = cases(kernel, &b);
    let mut out = KernelVerdict { judgements: vec![], not_run };
    for (n, case) in run.iter().enumerate() {
        let oracle = |e: kverify::references::RefError| sig(format!("at {}: {e}", case.name));
        let inp = case_inputs(&b, n, case);
        let want = b.class.forward(&case.dims, &inp.reference).map_err(oracle)?;
        // The generated values, exact in every bound parameter's dtype (contract::bind).
        let mut inputs = BTreeMap::new();
        for ((p, _), t) in b.inputs.iter().zip(&inp.reference) {
            let d = &kernel.params[*p];
            let ParamKind::Tensor { elem, .. } = d.kind else { continue };
            let dt = crate::interp::bind::dtype_of(elem).ok_or_else(|| sig(format!("`{}` has no host dtype", d.name)))?;
            inputs.insert(d.name.clone(), HostTensor::from_f64(dt, t.shape.clone(), &t.to_f64_vec()).map_err(|e| sig(format!("`{}`: {e}", d.name)))?);
        }
        let got = run_kernel(inputs).map_err(|e| match e {
            VerifyError::Run(m) => sig(format!("at {}: {m}", case.name)),
            other => other,
        })?;
        for (j, (p, dt)) in b.outputs.iter().enumerate() {
            let name = &kernel.params[*p].name;
            let t = got.get(name).ok_or_else(|| sig(format!("output `{name}` missing")))?;
            let reference = RefOutput { outputs: vec![want.outputs[j].clone()], profiles: vec![want.profiles[j].clone()] };
            let precision = Precision::new(b.precision.input, DType::F32, *dt);
            let report = compare(&reference, &[Tensor::f64(t.shape.clone(), t.to_f64())], &precision, BoundKind::Deterministic);
            if let Some(s) = &report.structural {
                return Err(sig(format!("at {}: output `{name}`: {s}", case.name)));
            }
            out.judgements.push(KernelJudgement { case: case.name.clone(), output: name.clone(), depth: want.profiles[j].depth, precision, report });
        }
    }
    Ok(out)
}
