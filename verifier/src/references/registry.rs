//! The catalogue of operator classes with fp64 references.

use super::linear::{bmm, gemm_bias_act, matmul, Act};
use super::normalize::{layer_norm, log_softmax, rms_norm, softmax};
use super::reduce::{cumsum, row_reduce, RowReduce};
use super::index::{arg_reduce, ArgReduce};
use super::{attention::sdpa, conv, Op};

/// Every operator class, in a fixed order: the reductions, products and normalisations, then
/// the index reductions, then the elementwise classes, then the gated-recurrence family
/// (`gdn`, `kda`, `gla`, `ssd`, `la`; [`super::recurrence`]).
pub fn all_ops() -> Vec<Op> {
    let mut v = vec![
        matmul(),
        bmm(),
        softmax(),
        log_softmax(),
        layer_norm(),
        rms_norm(),
        row_reduce(RowReduce::Sum),
        row_reduce(RowReduce::Mean),
        row_reduce(RowReduce::Max),
        cumsum(),
        conv::conv1d(),
        conv::conv2d(),
        sdpa(false),
        sdpa(true),
        gemm_bias_act(Act::Relu),
        gemm_bias_act(Act::Gelu),
        gemm_bias_act(Act::Silu),
        arg_reduce(ArgReduce::Max),
        arg_reduce(ArgReduce::Min),
    ];
    v.extend(super::elementwise::all());
    v.extend(super::recurrence::all());
    v
}

/// Look an operator class up by id.
pub fn op_by_id(id: &str) -> Option<Op> {
    all_ops().into_iter().find(|o| o.id == id)
}

/// A hint for an id that names no class but whose stem does, as `gdn_bwd` or `sdpa_fwd`: every
/// class covers its forward and its backward, so the id is the stem (the candidate declares the
/// backward). Empty for any other id.
pub fn op_hint(id: &str) -> String {
    let stem = id.strip_suffix("_bwd").or_else(|| id.strip_suffix("_fwd")).or_else(|| id.strip_suffix("_backward")).or_else(|| id.strip_suffix("_forward"));
    match stem {
        Some(s) if op_by_id(s).is_some() => {
            format!(" (the class `{s}` covers the forward and the backward: use `{s}`, and declare a backward for the gradients)")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fwd_or_bwd_suffix_points_at_the_class() {
        assert!(op_by_id("gdn_bwd").is_none());
        assert!(op_hint("gdn_bwd").contains("use `gdn`"), "{}", op_hint("gdn_bwd"));
        assert!(op_hint("sdpa_fwd").contains("use `sdpa`"));
        assert_eq!(op_hint("nope_bwd"), "");
        assert_eq!(op_hint("gdn"), "");
    }
}
