//! The catalogue of operator classes with fp64 references.

use super::linear::{bmm, gemm_bias_act, matmul, Act};
use super::normalize::{layer_norm, log_softmax, rms_norm, softmax};
use super::reduce::{cumsum, row_reduce, RowReduce};
use super::index::{arg_reduce, ArgReduce};
use super::{attention::sdpa, conv, Op};

/// Every operator class, in a fixed order: the reductions, products and normalisations, then
/// the index reductions, then the elementwise classes.
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
    v
}

/// Look an operator class up by id.
pub fn op_by_id(id: &str) -> Option<Op> {
    all_ops().into_iter().find(|o| o.id == id)
}
