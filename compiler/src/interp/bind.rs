//! Binding host tensors to a kernel's parameters: symbolic sizes, the grid, global memory.
//!
//! Sizes are inferred the way the runtime's binder does it (`runtime/src/bind.rs`): walking the
//! tensor parameters in declaration order, a dimension whose expression is a bare symbol binds
//! that symbol to the given tensor's extent the first time it is seen; afterwards every
//! dimension of every tensor (compound expressions such as `cdiv(T, 64)` included) is
//! evaluated and must equal the extent. Output tensors not given as inputs start as zeros with
//! the evaluated shape.

use std::collections::BTreeMap;

use cranelift_entity::SecondaryMap;
use tilec_runtime::meta::DType;
use tilec_runtime::tensor::HostTensor;

use super::error::InterpError;
use super::value::S;
use crate::ir::{Elem, Kernel, Param, ParamKind, SizeExpr};

/// A global tensor during a run: shape, element type and row-major elements.
#[derive(Clone, Debug)]
pub struct Global {
    /// Element type (the parameter's).
    pub elem: Elem,
    /// Extents, outermost first.
    pub shape: Vec<usize>,
    /// Row-major elements, each exactly representable in `elem`.
    pub data: Vec<S>,
}

/// Everything a kernel reads from the host.
#[derive(Debug)]
pub struct Bound {
    /// Values of [`Kernel::sizes`], in order.
    pub sizes: Vec<i64>,
    /// Grid extents (x, y, z).
    pub grid: [i64; 3],
    /// Tensor parameters.
    pub tensors: SecondaryMap<Param, Option<Global>>,
    /// Scalar parameters.
    pub scalars: SecondaryMap<Param, Option<S>>,
}

/// The dtype that carries element type `e` in host tensors (`None` for predicates).
pub fn dtype_of(e: Elem) -> Option<DType> {
    match e {
        Elem::F16 => Some(DType::F16),
        Elem::Bf16 => Some(DType::Bf16),
        Elem::F32 => Some(DType::F32),
        Elem::I32 => Some(DType::I32),
        Elem::Bool => None,
    }
}

/// Evaluates a size expression under `env`.
///
/// # Errors
/// [`InterpError::UnboundSize`] for a symbol not in `env`; [`InterpError::BadSizeExpr`] on
/// division by zero, overflow or a negative result.
pub fn eval_size(e: &SizeExpr, env: &BTreeMap<String, i64>) -> Result<i64, InterpError> {
    let v = match e {
        SizeExpr::Const(c) => Some(*c),
        SizeExpr::Sym(s) => Some(*env.get(s).ok_or_else(|| InterpError::UnboundSize { name: s.clone() })?),
        SizeExpr::Bin(op, a, b) => op.apply(eval_size(a, env)?, eval_size(b, env)?),
    };
    match v {
        Some(v) if v >= 0 => Ok(v),
        _ => Err(InterpError::BadSizeExpr { expr: e.to_string() }),
    }
}

fn to_elems(t: &HostTensor, elem: Elem) -> Vec<S> {
    match elem {
        Elem::I32 => t.to_f64().into_iter().map(|x| S::I(x as i64)).collect(),
        // bf16/f16/f32 widen to f32 exactly.
        _ => t.to_f32().into_iter().map(S::F).collect(),
    }
}

/// Binds `inputs` to `k`'s parameters. `given` fixes sizes explicitly (needed only when an
/// output's extent is not determined by any input).
///
/// # Errors
/// Missing or unknown inputs, wrong dtype or rank, inconsistent extents, unbound sizes, and
/// tensors or grids above `max_elements`.
pub fn bind(
    k: &Kernel,
    inputs: &BTreeMap<String, HostTensor>,
    given: &BTreeMap<String, i64>,
    max_elements: u64,
) -> Result<Bound, InterpError> {
    for name in inputs.keys() {
        if !k.params.values().any(|p| &p.name == name) {
            return Err(InterpError::UnknownInput { name: name.clone(), kernel: k.name.clone() });
        }
    }
    if let Some(name) = given.keys().find(|n| !k.sizes.contains(n)) {
        return Err(InterpError::UnknownSize { name: name.clone(), kernel: k.name.clone(), known: k.sizes.iter().cloned().collect::<Vec<_>>().join(", ") });
    }
    for p in k.params.values() {
        let is_output = matches!(p.kind, ParamKind::Tensor { output: true, .. });
        if !is_output && !inputs.contains_key(&p.name) {
            return Err(InterpError::MissingInput { name: p.name.clone() });
        }
    }
    let mut env: BTreeMap<String, i64> = given.clone();
    // Pass 1: dtypes, ranks, and bare-symbol dimensions.
    for p in k.params.values() {
        let Some(t) = inputs.get(&p.name) else { continue };
        let (elem, rank) = match &p.kind {
            ParamKind::Tensor { elem, shape, .. } => (*elem, shape.len()),
            ParamKind::Scalar(elem) => (*elem, 0),
        };
        if dtype_of(elem) != Some(t.dtype) {
            return Err(InterpError::WrongDtype { name: p.name.clone(), expected: elem, found: t.dtype });
        }
        // A scalar may come as rank 0 or as a one-element vector (some writers cannot store
        // rank-0 tensors).
        let scalar_ok = rank == 0 && (t.shape.is_empty() || t.shape == [1]);
        if t.shape.len() != rank && !scalar_ok {
            return Err(InterpError::WrongRank { name: p.name.clone(), expected: rank, found: t.shape.clone() });
        }
        t.check().map_err(|source| InterpError::Tensor { name: p.name.clone(), source })?;
        if let ParamKind::Tensor { shape, .. } = &p.kind {
            for (e, &n) in shape.iter().zip(&t.shape) {
                if let SizeExpr::Sym(s) = e {
                    env.entry(s.clone()).or_insert(n as i64);
                }
            }
        }
    }
    let sizes = k
        .sizes
        .iter()
        .map(|s| env.get(s).copied().ok_or_else(|| InterpError::UnboundSize { name: s.clone() }))
        .collect::<Result<Vec<_>, _>>()?;
    // Pass 2: check every extent, build global memory.
    let mut tensors = SecondaryMap::new();
    let mut scalars = SecondaryMap::new();
    for (pid, p) in k.params.iter() {
        match &p.kind {
            ParamKind::Scalar(elem) => {
                let t = inputs.get(&p.name).ok_or_else(|| InterpError::MissingInput { name: p.name.clone() })?;
                scalars[pid] = to_elems(t, *elem).first().copied();
            }
            ParamKind::Tensor { elem, shape, output } => {
                let dims = shape.iter().map(|e| eval_size(e, &env)).collect::<Result<Vec<_>, _>>()?;
                let numel = dims.iter().fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
                if numel > u128::from(max_elements) {
                    return Err(InterpError::TooLarge { what: format!("tensor `{}`", p.name), elements: numel, limit: max_elements });
                }
                let shape_us: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
                let data = match inputs.get(&p.name) {
                    Some(t) => {
                        for (dim, ((e, &want), &found)) in shape.iter().zip(&dims).zip(&t.shape).enumerate() {
                            if want != found as i64 {
                                return Err(InterpError::ShapeMismatch {
                                    name: p.name.clone(),
                                    dim,
                                    expr: e.to_string(),
                                    expected: want,
                                    found,
                                });
                            }
                        }
                        to_elems(t, *elem)
                    }
                    None if *output => {
                        let zero = if *elem == Elem::I32 { S::I(0) } else { S::F(0.0) };
                        vec![zero; numel as usize]
                    }
                    None => return Err(InterpError::MissingInput { name: p.name.clone() }),
                };
                tensors[pid] = Some(Global { elem: *elem, shape: shape_us, data });
            }
        }
    }
    let mut grid = [0i64; 3];
    for (g, e) in grid.iter_mut().zip(&k.grid) {
        *g = eval_size(e, &env)?;
    }
    let ctas = grid.iter().fold(1u128, |acc, &g| acc.saturating_mul(g as u128));
    if ctas > u128::from(max_elements) {
        return Err(InterpError::TooLarge { what: "the grid".into(), elements: ctas, limit: max_elements });
    }
    Ok(Bound { sizes, grid, tensors, scalars })
}

/// Converts a global tensor back to a host tensor (exact: every element is representable).
///
/// # Errors
/// [`InterpError::Tensor`] (cannot happen for tensors built by [`bind`]).
pub fn to_host(name: &str, g: &Global) -> Result<HostTensor, InterpError> {
    let dtype = dtype_of(g.elem).unwrap_or(DType::F32);
    let vals: Vec<f64> = g.data.iter().map(|s| s.to_f64()).collect();
    HostTensor::from_f64(dtype, g.shape.clone(), &vals).map_err(|source| InterpError::Tensor { name: name.to_string(), source })
}
