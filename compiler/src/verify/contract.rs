//! How a kernel's parameters bind to the kverify operator class its `contract(class)` names
//! (`kverify::references`: `matmul`, `softmax`, `layer_norm`, …). Sema refuses a kernel that
//! cannot bind ([`bind`] at `tilec check`); `tilec build --verify` binds it again to run it
//! ([`super::kernel`]).
//!
//! **The rule: by parameter order**, as a call. The kernel's input tensors, in declaration
//! order, are the class's inputs in the class's order (`matmul`: A[M, K], B[K, N]); its `out`
//! tensors, in order, are the class's outputs (`matmul`: one, [M, N]). Names are free. A scalar
//! parameter cannot bind (a class passes tensors only). The result is kverify's own
//! [`Binding`] — what `kverify check --tilec-kernel FILE:KERNEL --op CLASS --bind a,b:c` takes —
//! checked by kverify's [`Binding::check`] (arity, and inputs that hold the generated values
//! exactly: each input's dtype is the narrowest one, f32 or f64).
//!
//! **Shapes.** Each bound tensor has the rank of the class's tensor, and each of its
//! dimensions is a size of the kernel, a constant, or an expression over sizes: a size stands
//! for exactly one class dimension (`K` cannot be both M and K of matmul), a constant fixes
//! its class dimension (`a: bf16[M, 64]` verifies at K = 64), and every kernel size is one of
//! the class's dimensions. Found by evaluating the class's shapes at distinct probe sizes; every
//! kernel shape must then evaluate to the class's.
//!
//! **Declared precision** ([`Precision`], kverify's error model): the narrowest input dtype in,
//! f32 accumulate (every tilec reduction and MMA accumulates in f32), each output's dtype out.

use std::collections::BTreeMap;

use kverify::candidate::tilec::{Binding, TilecError};
use kverify::error_model::Precision;
use kverify::references::{DimKind, Dims, Op};
use kverify::tensor::DType;

use super::roundings::kverify_dtype;
use crate::diag::{Code, Span};
use crate::ir::{Kernel, Param, ParamKind, SizeExpr, SizeVar};

/// Where a class dimension's size comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DimSource {
    /// A kernel size (the first of the kernel's sizes that stands for it).
    Size(SizeVar),
    /// A constant extent of a bound tensor.
    Fixed(i64),
    /// Nothing in the kernel names it alone (only derived extents, or no tensor at all).
    Free,
}

/// A kernel bound to its contract's class.
#[derive(Clone, Debug)]
pub struct KernelBinding {
    /// The class, with its fp64 reference and error profile.
    pub class: Op,
    /// kverify's binding: the kernel's parameter names in the class's input and output order.
    pub binding: Binding,
    /// The declared precision; `output` is the first output's dtype ([`KernelBinding::outputs`]
    /// has each one's).
    pub precision: Precision,
    /// The input parameters, in the class's input order, with their dtypes.
    pub inputs: Vec<(Param, DType)>,
    /// The output parameters, in the class's output order, with their dtypes.
    pub outputs: Vec<(Param, DType)>,
    /// Per class dimension (`class.dims` order), where its size comes from.
    pub dims: Vec<DimSource>,
    /// Per kernel size, the class dimension it stands for (an index into `class.dims`).
    pub size_dims: BTreeMap<SizeVar, usize>,
}

/// Why a kernel cannot bind: a diagnostic's code, span, message and label.
#[derive(Clone, Debug, PartialEq)]
pub struct BindError {
    /// Diagnostic code.
    pub code: Code,
    /// Where: the parameter at fault, or the `contract(..)` clause.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// The label at `span`.
    pub label: String,
    /// The help line, when [`signature`] is not the one that helps.
    pub help: Option<String>,
}

/// Probe size of class dimension `i`: distinct, and unlike any extent a kernel writes. A
/// dimension of kind Fixed (a window, a head size) probes below every other one, so a derived
/// extent (conv1d's `L + 1 - Kw`) stays positive and unlike any probe.
fn probe(class: &Op, i: usize) -> usize {
    if class.dims[i].kind == DimKind::Fixed {
        509 + 37 * i
    } else {
        1009 + 37 * i
    }
}

/// The class's dims with every dimension at its probe size, then `fixed` applied.
fn probe_dims(class: &Op, fixed: &BTreeMap<usize, i64>) -> Dims {
    Dims(class.dims.iter().enumerate().map(|(i, d)| (d.name.to_string(), fixed.get(&i).map_or(probe(class, i), |&c| c as usize))).collect())
}

/// A class shape with probe sizes written as their dimension names (`[M, K]`).
fn shape_text(class: &Op, shape: &[usize]) -> String {
    let dim = |v: usize| (0..class.dims.len()).find(|&i| probe(class, i) == v).map_or_else(|| v.to_string(), |i| class.dims[i].name.to_string());
    format!("[{}]", shape.iter().map(|&v| dim(v)).collect::<Vec<_>>().join(", "))
}

/// `matmul` (C[M,N] = A[M,K] @ B[K,N]) takes A[M, K], B[K, N] and returns [M, N]: the help line
/// of every binding diagnostic.
pub fn signature(class: &Op) -> String {
    let dims = probe_dims(class, &BTreeMap::new());
    let ins: Vec<String> = class.inputs.iter().map(|i| format!("{}{}", i.name, shape_text(class, &(i.shape)(&dims)))).collect();
    let outs: Vec<String> = class.output_shapes(&dims).iter().map(|s| shape_text(class, s)).collect();
    format!(
        "`{}` ({}) takes {} and returns {}: the kernel's input tensors bind to its inputs in order, its `out` tensors to its outputs",
        class.id,
        class.summary,
        ins.join(", "),
        outs.join(", ")
    )
}

/// Binds `kernel`'s parameters to `class` (module doc); `contract` is the clause's span.
///
/// # Errors
/// A [`BindError`] naming the first parameter that cannot bind, or the clause for a count
/// that differs from the class's.
pub fn bind(kernel: &Kernel, class: &Op, contract: Span) -> Result<KernelBinding, BindError> {
    let err = |code: Code, span: Span, message: String, label: &str| BindError { code, span, message, label: label.to_string(), help: None };
    let (mut inputs, mut outputs) = (vec![], vec![]);
    for (p, d) in kernel.params.iter() {
        let ParamKind::Tensor { elem, output, .. } = &d.kind else {
            return Err(err(Code::BadArguments, d.span, format!("scalar parameter `{}` cannot bind to `contract({})`: the class passes tensors only", d.name, class.id), "a scalar"));
        };
        // A float class: its inputs are generated, and its reference compared, in floats.
        let what = if *output { "judges float outputs" } else { "generates float inputs" };
        let dt = kverify_dtype(*elem).filter(|t| !t.is_integer()).ok_or_else(|| err(Code::TypeMismatch, d.span, format!("`{}` is {elem}: `contract({})` {what}", d.name, class.id), "not a float"))?;
        if *output { outputs.push((p, dt)) } else { inputs.push((p, dt)) }
    }
    // The narrowest input dtype is the one the class's inputs are generated in.
    let input = inputs.iter().map(|(_, t)| *t).max_by(|a, b| a.unit_roundoff().total_cmp(&b.unit_roundoff())).unwrap_or(DType::F32);
    let output = outputs.first().map_or(DType::F32, |(_, t)| *t);
    let precision = Precision::new(input, DType::F32, output);
    let name = |p: Param| kernel.params[p].name.clone();
    let binding = Binding {
        inputs: inputs.iter().map(|(p, _)| name(*p)).collect(),
        input_dtypes: inputs.iter().map(|(_, t)| (*t != input).then_some(*t)).collect(),
        outputs: outputs.iter().map(|(p, _)| name(*p)).collect(),
        sizes: BTreeMap::new(),
    };
    binding.check(class.id, &precision).map_err(|e| match e {
        TilecError::BindingArity { .. } => err(Code::BadArguments, contract, format!("kernel `{}` cannot bind to `contract({})`: {e}", kernel.name, class.id), "parameters bound by order"),
        _ => BindError {
            help: Some(format!("the class's inputs are generated in {0} (the narrowest input dtype) and must reach every input parameter exactly: declare each input {0} or f32", input.name())),
            ..err(Code::TypeMismatch, contract, format!("kernel `{}` cannot bind to `contract({})`: {e}", kernel.name, class.id), "the declared precision")
        },
    })?;
    // The bound pairs: (kernel parameter, class shape at the probe sizes).
    let bound = |fixed: &BTreeMap<usize, i64>| -> Vec<(Param, Vec<usize>)> {
        let dims = probe_dims(class, fixed);
        let shapes = class.input_shapes(&dims).into_iter().chain(class.output_shapes(&dims));
        inputs.iter().chain(&outputs).map(|(p, _)| *p).zip(shapes).collect()
    };
    let shape_of = |p: Param| match &kernel.params[p].kind {
        ParamKind::Tensor { shape, .. } => shape.clone(),
        ParamKind::Scalar(_) => vec![],
    };
    let (mut size_dims, mut fixed) = (BTreeMap::<SizeVar, usize>::new(), BTreeMap::<usize, i64>::new());
    for (p, want) in bound(&fixed) {
        let (d, shape) = (&kernel.params[p], shape_of(p));
        if shape.len() != want.len() {
            return Err(err(Code::ShapeMismatch, d.span, format!("`{}` has rank {}; `{}` binds it to {} (rank {})", d.name, shape.len(), class.id, shape_text(class, &want), want.len()), "rank differs"));
        }
        for (e, &v) in shape.iter().zip(&want) {
            let Some(i) = (0..class.dims.len()).find(|&i| probe(class, i) == v) else { continue };
            match e {
                SizeExpr::Sym(s) => match size_dims.insert(*s, i) {
                    Some(j) if j != i => {
                        let s = &kernel.sizes[*s];
                        return Err(err(Code::ShapeMismatch, d.span, format!("size `{s}` would be both {} and {} of `{}`", class.dims[j].name, class.dims[i].name, class.id), &format!("`{s}` here is {}", class.dims[i].name)));
                    }
                    _ => {}
                },
                SizeExpr::Const(c) => match fixed.insert(i, *c) {
                    Some(c0) if c0 != *c => {
                        return Err(err(Code::ShapeMismatch, d.span, format!("{} of `{}` would be both {c0} and {c}", class.dims[i].name, class.id), "a second constant extent"));
                    }
                    _ => {}
                },
                SizeExpr::Bin(..) => {}
            }
        }
    }
    if let Some((s, name)) = kernel.sizes.iter().find(|(s, _)| !size_dims.contains_key(s)) {
        let at = kernel.params.values().find(|d| matches!(&d.kind, ParamKind::Tensor { shape, .. } if shape.iter().any(|e| e.mentions(s)))).map_or(contract, |d| d.span);
        return Err(err(Code::ShapeMismatch, at, format!("size `{name}` of kernel `{}` is none of `{}`'s dimensions", kernel.name, class.id), "binds no dimension alone"));
    }
    // A constant extent must be one the class can be judged at: within its dimension's range.
    for (&i, &c) in &fixed {
        let spec = &class.dims[i];
        if c < spec.min as i64 || c > spec.max as i64 {
            let at = bound(&fixed).into_iter().find(|(p, _)| shape_of(*p).contains(&SizeExpr::Const(c))).map_or(contract, |(p, _)| kernel.params[p].span);
            return Err(err(Code::ShapeMismatch, at, format!("{} = {c} is outside `{}`'s range for {} [{}, {}]", spec.name, class.id, spec.name, spec.min, spec.max), "a constant extent out of range"));
        }
    }
    let dims = probe_dims(class, &fixed);
    // Every bound shape must now evaluate to the class's (a product, a transposed tensor).
    let env: BTreeMap<String, i64> = size_dims.iter().map(|(s, &i)| (kernel.sizes[*s].clone(), dims.get(class.dims[i].name) as i64)).collect();
    for (p, want) in bound(&fixed) {
        let d = &kernel.params[p];
        let got: Vec<Option<i64>> = shape_of(p).iter().map(|e| crate::interp::bind::eval_size(kernel, e, &env).ok()).collect();
        if got.iter().zip(&want).any(|(g, &w)| *g != Some(w as i64)) {
            let text = shape_of(p).iter().map(|e| kernel.size_text(e)).collect::<Vec<_>>().join(", ");
            return Err(err(Code::ShapeMismatch, d.span, format!("`{}` is [{text}]; `{}` binds it to {}", d.name, class.id, shape_text(class, &want)), "shape differs"));
        }
    }
    let dims = (0..class.dims.len())
        .map(|i| match (fixed.get(&i), size_dims.iter().find(|(_, &j)| j == i)) {
            (Some(&c), _) => DimSource::Fixed(c),
            (None, Some((s, _))) => DimSource::Size(*s),
            (None, None) => DimSource::Free,
        })
        .collect();
    Ok(KernelBinding { class: class.clone(), binding, precision, inputs, outputs, dims, size_dims })
}

