//! Pass 1b of [`super::bind`]: a dimension `X * S` whose factor S no bare dimension, scalar or
//! explicit value gave, while X is known, binds S = extent / X — repeated while that binds
//! something (GVA: v's heads `H * G` give G once q gave H). An extent that is not a positive
//! multiple of X is [`BindError::NotMultiple`], naming the tensor. One implementation for both
//! binders: [`super::bind`] (with tensors) and [`crate::plan::kernel_sizes`] (extents only), and
//! its rule without values, [`determined_sizes`], for the compiler's check that every size of an
//! operator can be bound.

use std::collections::{BTreeMap, BTreeSet};

use crate::expr::SizeExpr;

use super::{parse, Args, BindError, Signature, SizeTable};
use crate::meta::ParamMeta;

/// Binds what product dimensions determine (see the module docs).
pub(super) fn solve(meta: &Signature<'_>, args: &Args, sizes: &mut SizeTable) -> Result<(), BindError> {
    let shapes: BTreeMap<&str, &[usize]> = args.tensors.iter().map(|(n, t)| (n.as_str(), t.shape.as_slice())).collect();
    loop {
        let found = solve_round(meta.params, &shapes, &sizes.env())?;
        if found.is_empty() {
            return Ok(());
        }
        for (size, value, source) in found {
            sizes.record(&size, value, source)?;
        }
    }
}

/// One round over every parameter whose extents `shapes` gives: the sizes its product
/// dimensions determine given the known sizes `env`, as `(size, value, source)`.
///
/// # Errors
/// [`BindError::NotMultiple`], or a malformed dimension expression.
pub(crate) fn solve_round(params: &[ParamMeta], shapes: &BTreeMap<&str, &[usize]>, env: &BTreeMap<String, i64>) -> Result<Vec<(String, u64, String)>, BindError> {
    let mut found: Vec<(String, u64, String)> = vec![];
    for p in params {
        let Some(shape) = shapes.get(p.name.as_str()).filter(|_| !p.shape.is_empty()) else { continue };
        for (d, (text, &extent)) in p.shape.iter().zip(shape.iter()).enumerate() {
            let e = parse(|| format!("parameter `{}` shape[{d}]", p.name), text)?;
            match e.solve_factor(extent as i64, env) {
                Some(Ok((s, v))) if !found.iter().any(|f| f.0 == s) => found.push((s, v as u64, format!("parameter `{}` dim {d} (`{text}`)", p.name))),
                Some(Ok(_)) => {}
                Some(Err(factor)) => return Err(BindError::NotMultiple { param: p.name.clone(), dim: d, expr: text.clone(), found: extent, factor }),
                None => {}
            }
        }
    }
    Ok(found)
}

/// The sizes that extents of dimensions `dims` (an operator's input shapes) determine, as the
/// binder determines them: every bare dimension, then — repeated while that adds one — the
/// unknown factor of a product whose other factor is known ([`SizeExpr::unknown_factor`]).
pub fn determined_sizes(dims: &[SizeExpr]) -> BTreeSet<String> {
    let mut known: BTreeSet<String> = dims.iter().filter_map(|d| d.as_symbol().map(str::to_string)).collect();
    loop {
        let found: Vec<String> = dims.iter().filter_map(|d| d.unknown_factor(&|s| known.contains(s)).map(str::to_string)).collect();
        if found.is_empty() {
            return known;
        }
        known.extend(found);
    }
}
