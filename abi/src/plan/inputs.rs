//! What a plan knows about its inputs beyond dtypes and shapes: the size parameters it was built
//! with (`const K = 128 in {64, 128};`, `--const K=64`) and its offset tables (`cu_seqlens:
//! i32[NP] offsets(T)`), both schema version 2, and the inputs a caller may leave out (`s0:
//! f32[B, H, K, V] optional(zeros)`, version 3). All are checked when a plan is read, and the
//! caller's tensors against them before any launch (docs/metadata.md, "Operator plans").

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{OperatorPlan, PlanError};
use crate::bind::{self, BindError, BoundArg};
use crate::meta::{DType, Role};

/// An i32 parameter holding boundaries into a size: `[0, …, total]`, nondecreasing (fla's
/// cu_seqlens over T).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsetsMeta {
    /// The parameter.
    pub param: String,
    /// The size its last entry must equal.
    pub total: String,
}

/// A size parameter of the build: the value used and the values the source supports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeParamMeta {
    /// Its name (`K`).
    pub name: String,
    /// The value this plan's kernels were built with.
    pub value: i64,
    /// Every value the source declares (a rebuild with `--const NAME=v` gives another plan).
    pub supported: Vec<i64>,
    /// The parameter dimensions it sets, as `param[dim]` (`k[3]`).
    pub dims: Vec<String>,
}

/// What to do about a caller's extent `found` for size parameter `sp`.
pub(super) fn size_help(sp: &SizeParamMeta, found: usize) -> String {
    let list = sp.supported.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if sp.supported.iter().any(|&s| usize::try_from(s) == Ok(found)) {
        format!("{} = {found} needs `--const {}={found}` (a build, or `tilec run --interp`, with it)", sp.name, sp.name)
    } else {
        format!("{} = {found} is not supported (the source supports {} ∈ {{{list}}})", sp.name, sp.name)
    }
}

impl OperatorPlan {
    /// Checks `size_params` and `offsets` against the parameters (part of [`OperatorPlan::validate`]).
    pub(super) fn validate_inputs(&self) -> Result<(), PlanError> {
        let invalid = |message: String| PlanError::Invalid { operator: self.operator.clone(), message };
        if self.schema_version == 1 && !(self.size_params.is_empty() && self.offsets.is_empty()) {
            return Err(invalid("a schema version 1 plan cannot have `size_params` or `offsets` (added in version 2)".into()));
        }
        for sp in &self.size_params {
            let wrong = |why: &str| invalid(format!("size parameter `{}`: {why}", sp.name));
            if sp.supported.is_empty() || sp.supported.iter().any(|&v| v <= 0) || sp.supported.iter().collect::<BTreeSet<_>>().len() != sp.supported.len() {
                return Err(wrong("`supported` must list distinct positive sizes"));
            }
            if !sp.supported.contains(&sp.value) {
                return Err(wrong("its `value` is not one of `supported`"));
            }
            if self.sizes.contains(&sp.name) {
                return Err(wrong("it is also a symbolic size of the plan"));
            }
            for d in &sp.dims {
                let param_dim = d.strip_suffix(']').and_then(|x| x.split_once('[')).and_then(|(p, i)| Some((p, i.parse::<usize>().ok()?)));
                let ok = param_dim.and_then(|(p, i)| self.params.iter().find(|q| q.name == p).and_then(|q| q.shape.get(i))).is_some_and(|e| e == &sp.value.to_string());
                if !ok {
                    return Err(wrong(&format!("`{d}` is not a dimension of extent {} of a parameter", sp.value)));
                }
            }
        }
        for o in &self.offsets {
            if !self.params.iter().any(|p| p.name == o.param && p.dtype == DType::I32 && p.shape.len() == 1) || !self.sizes.contains(&o.total) {
                return Err(invalid(format!("offsets `{}` over `{}`: not an i32 vector parameter over one of the sizes", o.param, o.total)));
            }
        }
        if self.schema_version < 3 && !self.optional.is_empty() {
            return Err(invalid("a plan before schema version 3 cannot have `optional` inputs (added in version 3)".into()));
        }
        for name in &self.optional {
            let input = self.params.iter().any(|p| &p.name == name && p.role == Role::Input && !p.shape.is_empty());
            // An offset table is the sequences' layout: zeros would be one empty sequence per
            // entry, never what a caller who left it out meant.
            if !input || self.offsets.iter().any(|o| &o.param == name) {
                return Err(invalid(format!("optional `{name}`: not an input tensor (or an offset table) of the plan")));
            }
            if self.optional.iter().filter(|n| *n == name).count() > 1 {
                return Err(invalid(format!("optional `{name}` listed twice")));
            }
        }
        Ok(())
    }

    /// Refuses an offset table in host memory whose entries are not `0 = o[0] ≤ o[1] ≤ … ≤
    /// o[n−1] = total` (a table only on the device is the caller's to get right: reading it back
    /// would synchronise).
    pub(super) fn check_offsets(&self, bound: &bind::Binding<'_>) -> Result<(), PlanError> {
        for o in &self.offsets {
            let Some(data) = bound.args.iter().find_map(|a| match a {
                BoundArg::Tensor(t) if t.name == o.param => t.data,
                _ => None,
            }) else {
                continue;
            };
            let total = bound.sizes.get(&o.total).copied().unwrap_or(0);
            let bad = |message: String| PlanError::BadOffsets { operator: self.operator.clone(), param: o.param.clone(), total: o.total.clone(), value: total, message };
            let v = data.to_f64();
            if v.is_empty() {
                return Err(bad("the table is empty (it needs at least the entry 0)".into()));
            }
            // The first wrong entry, in index order.
            for (i, &x) in v.iter().enumerate() {
                let last = i + 1 == v.len();
                let why = if i == 0 && x != 0.0 {
                    Some(format!("entry 0 is {x}, not 0"))
                } else if i > 0 && x < v[i - 1] {
                    Some(format!("entry {i} ({x}) is less than entry {} ({}): sequences cannot have negative length", i - 1, v[i - 1]))
                } else if x > total as f64 {
                    Some(format!("entry {i} ({x}) is past {} = {total}", o.total))
                } else if last && x != total as f64 {
                    Some(format!("the last entry (index {i}) is {x}, not {total}"))
                } else {
                    None
                };
                if let Some(message) = why {
                    return Err(bad(message));
                }
            }
        }
        Ok(())
    }

    /// A binder error as the caller should read it: a dimension that a size parameter sets
    /// (`K`) and the caller's tensor does not have names the parameter and the sizes the source
    /// supports, since the fix is another build (`--const K=64`) or no build at all.
    pub(super) fn bind_error(&self, source: BindError) -> PlanError {
        let hit = match &source {
            BindError::WrongExtent { param, dim, found, .. } => self.size_params.iter().find(|sp| sp.dims.contains(&format!("{param}[{dim}]"))).map(|sp| (sp.clone(), *found)),
            _ => None,
        };
        if let Some((size, found)) = hit {
            return PlanError::UnsupportedSize { operator: self.operator.clone(), source: Box::new(source), size: Box::new(size), found };
        }
        PlanError::Bind { operator: self.operator.clone(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{plan, Host};
    use super::super::{execute, ArgBinding, PlanError, TensorMap};
    use crate::bind::{BindError, Scalar};
    use crate::meta::DType;
    use crate::tensor::HostTensor;

    /// `y = x + s` with x optional: left out, x is allocated zero-filled with the extent the
    /// caller's y gives (N = 3), so y = s everywhere; the same call without the declaration is
    /// refused naming x, before anything is allocated.
    #[test]
    fn an_optional_input_left_out_is_zeros_and_a_required_one_is_refused() {
        let mut p = plan();
        p.launches[0].args.push(ArgBinding { param: "c".into(), value: "s".into() });
        let y = HostTensor::from_f32(DType::F32, vec![3], &[9.0, 9.0, 9.0]).unwrap();
        let call = TensorMap::from([("y".into(), y), ("s".into(), HostTensor::from(Scalar::F32(0.5)))]);
        let mut l = Host(vec![]);
        let refused = execute(&p, &p.args(call.clone()), &mut l);
        assert!(matches!(refused, Err(PlanError::Bind { source: BindError::Missing { ref param, .. }, .. }) if param == "x"), "{refused:?}");
        assert!(l.0.is_empty(), "nothing allocated or launched: {:?}", l.0);
        p.optional = vec!["x".into()];
        let out = execute(&p, &p.args(call), &mut l).unwrap();
        assert_eq!(out["y"].to_f32(), [0.5, 0.5, 0.5]);
        assert_eq!(l.0, ["zeros [3]", "zeros [6]", "k"], "x zero-filled, then the buffer, then the launch");
    }

    /// `optional` may name only input tensors that are not offset tables, once, from schema
    /// version 3 on.
    #[test]
    fn optional_names_an_input_tensor_once() {
        let with = |names: &[&str], version: u32| {
            let mut p = plan();
            p.schema_version = version;
            p.optional = names.iter().map(|n| n.to_string()).collect();
            p.validate()
        };
        assert!(with(&["x"], 3).is_ok());
        for (names, version) in [(&["y"][..], 3), (&["s"], 3), (&["nope"], 3), (&["x", "x"], 3), (&["x"], 2)] {
            assert!(matches!(with(names, version), Err(PlanError::Invalid { .. })), "{names:?} v{version}");
        }
    }
}
