//! Binding host tensors to a kernel's parameters: symbolic sizes, the grid, global memory.
//!
//! The interpreter has no binder of its own: it describes the IR kernel with the metadata
//! schema's parameter records ([`signature_params`]: the same dtypes and size-expression texts
//! `tilec build` writes into `*.meta.json`) and hands them to [`tilec_abi::bind`], the binder
//! `tilec-run` uses. Sizes, extents and the grid are therefore inferred, checked and evaluated
//! exactly as for a launch — including the kernels' truncating division in size expressions —
//! and the interpreter cannot drift from the runtime. What stays here is the interpreter's own
//! business: element limits and converting bytes to interpreter values.

use std::collections::BTreeMap;

use cranelift_entity::SecondaryMap;
use tilec_abi::bind::{Args, BindError, BoundArg, Scalar, Signature};
use tilec_abi::expr::ExprError;
use tilec_abi::meta::{DType, ParamMeta};
use tilec_abi::tensor::HostTensor;

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
    /// For an output: which CTA wrote each element in this launch (its linear index + 1; 0 for
    /// none), so that a second CTA writing it is reported as a race.
    pub writers: Vec<u32>,
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

/// The dtype that carries element type `e` in host tensors (`None` for predicates):
/// [`Elem::host_dtype`].
pub fn dtype_of(e: Elem) -> Option<DType> {
    e.host_dtype()
}

/// Evaluates a size expression of kernel `k` under `env` (size name → value) with the ABI's
/// semantics, through the very text the metadata carries for it ([`Kernel::size_text`]).
///
/// # Errors
/// The evaluator's: an unknown symbol, division by zero, overflow.
pub fn eval_size(k: &Kernel, e: &SizeExpr, env: &BTreeMap<String, i64>) -> Result<i64, ExprError> {
    tilec_abi::expr::SizeExpr::parse(&k.size_text(e))?.eval(env)
}

/// The kernel's parameters as metadata records, in IR order: tensors with their shape texts,
/// scalars with an empty shape. Every `out` tensor is [`Role::Output`], so the binder lets the
/// caller leave it out (it starts as zeros) or pass its initial contents.
///
/// # Errors
/// [`InterpError::UnsupportedParam`] for a predicate parameter.
pub fn signature_params(k: &Kernel) -> Result<Vec<ParamMeta>, InterpError> {
    k.params
        .values()
        .map(|p| {
            crate::artifact::param_record(p, |e| k.size_text(e)).ok_or_else(|| InterpError::UnsupportedParam {
                name: p.name.clone(),
                elem: match &p.kind {
                    ParamKind::Tensor { elem, .. } | ParamKind::Scalar(elem) => *elem,
                },
            })
        })
        .collect()
}

fn to_elems(t: &HostTensor, elem: Elem) -> Vec<S> {
    match elem {
        Elem::I32 => t.to_f64().into_iter().map(|x| S::I(x as i64)).collect(),
        // bf16/f16/f32 widen to f32 exactly.
        _ => t.to_f32().into_iter().map(S::F).collect(),
    }
}

fn scalar_value(s: Scalar) -> S {
    match s {
        Scalar::I32(v) => S::I(i64::from(v)),
        Scalar::F32(v) => S::F(v),
        Scalar::F16(v) => S::F(v.to_f32()),
        Scalar::Bf16(v) => S::F(v.to_f32()),
    }
}

/// Binds `inputs` to `k`'s parameters. Scalars come as rank-0 (or `[1]`) tensors; `given`
/// fixes sizes explicitly (needed only when no input's extent determines them).
///
/// # Errors
/// [`InterpError::Bind`] for anything the runtime's binder refuses (missing or unknown inputs,
/// wrong dtype or rank, inconsistent extents, unresolved sizes, negative extents, an empty
/// grid); [`InterpError::TooLarge`] for tensors or grids above `max_elements`.
pub fn bind(k: &Kernel, inputs: &BTreeMap<String, HostTensor>, given: &BTreeMap<String, i64>, max_elements: u64) -> Result<Bound, InterpError> {
    let params = signature_params(k)?;
    let grid_text = k.grid.clone().map(|g| k.size_text(&g));
    let size_names: Vec<String> = k.sizes.values().cloned().collect();
    let sig = Signature {
        kernel: &k.name,
        sizes: &size_names,
        params: &params,
        grid: &grid_text,
        block_threads: k.threads,
        dynamic_smem_bytes: 0,
        envelope: &[],
        optional: &[],
    };
    let mut args = Args::from_tensor_map(sig, inputs.clone());
    for (name, &v) in given {
        let value = u64::try_from(v).map_err(|_| BindError::OutOfRange {
            what: format!("the explicit value of size `{name}`"),
            expr: name.clone(),
            value: v,
            given: String::new(),
            range: "0..".into(),
        })?;
        args.sizes.insert(name.clone(), value);
    }
    let binding = tilec_abi::bind::bind(sig, &args)?;

    let mut tensors = SecondaryMap::new();
    let mut scalars = SecondaryMap::new();
    // The binding lists the signature's parameters, which are `k.params` in order.
    for ((pid, p), arg) in k.params.iter().zip(&binding.args) {
        let elem = match &p.kind {
            ParamKind::Tensor { elem, .. } | ParamKind::Scalar(elem) => *elem,
        };
        match arg {
            BoundArg::Scalar { value, .. } => scalars[pid] = Some(scalar_value(*value)),
            BoundArg::Tensor(t) => {
                let numel = t.shape.iter().fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
                if numel > u128::from(max_elements) {
                    return Err(InterpError::TooLarge { what: format!("tensor `{}`", p.name), elements: numel, limit: max_elements });
                }
                let data = match t.data {
                    Some(h) => to_elems(h, elem),
                    None => vec![if elem == Elem::I32 { S::I(0) } else { S::F(0.0) }; numel as usize],
                };
                let output = matches!(p.kind, ParamKind::Tensor { output: true, .. });
                let writers = if output { vec![0; data.len()] } else { vec![] };
                tensors[pid] = Some(Global { elem, shape: t.shape.clone(), data, writers });
            }
        }
    }
    let grid = binding.grid.map(i64::from);
    let ctas = grid.iter().fold(1u128, |acc, &g| acc.saturating_mul(g as u128));
    // CTAs are numbered in a u32 for the write-race record (Global::writers), 0 meaning none.
    let limit = max_elements.min(u64::from(u32::MAX - 1));
    if ctas > u128::from(limit) {
        return Err(InterpError::TooLarge { what: "the grid".into(), elements: ctas, limit });
    }
    // The binder resolves every size a shape or the grid uses; a size only the body reads
    // must be given explicitly rather than silently read as 0.
    let sizes = k
        .sizes
        .values()
        .map(|s| match binding.sizes.get(s) {
            Some(&v) => Ok(v as i64), // from a usize extent or a value checked against i64 above
            None => Err(BindError::UnresolvedSize { size: s.clone(), used_by: "the kernel body".into() }),
        })
        .collect::<Result<_, _>>()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::SizeOp;

    fn bin(op: SizeOp, a: SizeExpr, b: SizeExpr) -> SizeExpr {
        SizeExpr::Bin(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn size_evaluation_is_the_kernels() {
        // (T - 100) / 64 + 1 at T = 50: div.s32(-50, 64) + 1 = 1. The old evaluator refused
        // the negative intermediate; floor division would give 0.
        let mut k = Kernel::new("k", crate::diag::Span::default());
        let t = SizeExpr::Sym(k.declare_size("T"));
        let e = bin(SizeOp::Add, bin(SizeOp::Div, bin(SizeOp::Sub, t, SizeExpr::Const(100)), SizeExpr::Const(64)), SizeExpr::Const(1));
        let env = BTreeMap::from([("T".to_string(), 50)]);
        assert_eq!(eval_size(&k, &e, &env), Ok(1));
    }
}
