//! Errors of the IR interpreter.
//!
//! Two levels: [`InterpError`] for the whole run (inputs, sizes, grid, budget) and
//! [`ExecError`] for one instruction of one CTA, wrapped with its location in
//! [`InterpError::Exec`]. Nothing the user controls (inputs, sizes, the IR) may panic.

use crate::ir::{Elem, Inst};
use crate::ir::validate::ValidateError;
use tilec_runtime::meta::DType;
use tilec_runtime::tensor::TensorError;

/// A failure of [`super::run_kernel`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// The kernel does not pass the IR validator; the interpreter only runs valid IR.
    #[error("kernel `{kernel}` is not valid IR: {}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// Kernel name.
        kernel: String,
        /// The validator's findings.
        errors: Vec<ValidateError>,
    },
    /// An input parameter (not an output) has no tensor.
    #[error("missing input `{name}`")]
    MissingInput {
        /// Parameter name.
        name: String,
    },
    /// A tensor was given that names no parameter of the kernel.
    #[error("input `{name}` is not a parameter of kernel `{kernel}`")]
    UnknownInput {
        /// Tensor name.
        name: String,
        /// Kernel name.
        kernel: String,
    },
    /// An explicit size (`--size NAME=V`) names no symbolic size of the kernel: a typo that
    /// would otherwise be ignored silently.
    #[error("size `{name}` given, but kernel `{kernel}` has no symbolic size of that name (it has: {known})")]
    UnknownSize {
        /// The given name.
        name: String,
        /// Kernel name.
        kernel: String,
        /// The kernel's symbolic sizes, comma-separated.
        known: String,
    },
    /// A tensor's dtype differs from the parameter's element type.
    #[error("input `{name}` has dtype {found:?}, the parameter is {expected}")]
    WrongDtype {
        /// Parameter name.
        name: String,
        /// Declared element type.
        expected: Elem,
        /// The tensor's dtype.
        found: DType,
    },
    /// A tensor's rank differs from the parameter's.
    #[error("input `{name}` has shape {found:?}, the parameter has rank {expected}")]
    WrongRank {
        /// Parameter name.
        name: String,
        /// Declared rank (0 for a scalar parameter).
        expected: usize,
        /// The tensor's shape.
        found: Vec<usize>,
    },
    /// A tensor's extent contradicts the sizes bound so far.
    #[error("input `{name}` has extent {found} in dimension {dim}, but `{expr}` = {expected}")]
    ShapeMismatch {
        /// Parameter name.
        name: String,
        /// Dimension index.
        dim: usize,
        /// The size expression of that dimension.
        expr: String,
        /// Its value under the bound sizes.
        expected: i64,
        /// The tensor's extent.
        found: usize,
    },
    /// A symbolic size could not be inferred from the inputs and was not given.
    #[error("size `{name}` is not determined by the inputs; give it explicitly with `--size {name}=<n>`")]
    UnboundSize {
        /// Size name.
        name: String,
    },
    /// A size expression divides by zero, overflows or is negative.
    #[error("size expression `{expr}` has no valid value (division by zero, overflow or negative)")]
    BadSizeExpr {
        /// The expression.
        expr: String,
    },
    /// A tensor or tile exceeds [`super::Options::max_elements`].
    #[error("{what} has {elements} elements, more than the limit of {limit}")]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its element count.
        elements: u128,
        /// The limit.
        limit: u64,
    },
    /// A host tensor could not be built.
    #[error("tensor `{name}`: {source}")]
    Tensor {
        /// Tensor name.
        name: String,
        /// The problem.
        source: TensorError,
    },
    /// The instruction budget ran out (a runaway loop, or a problem too big to interpret).
    #[error("instruction budget of {limit} steps exhausted")]
    StepLimit {
        /// The budget.
        limit: u64,
    },
    /// An instruction failed.
    #[error("kernel `{kernel}`, CTA {cta:?}, {inst}: {source}")]
    Exec {
        /// Kernel name.
        kernel: String,
        /// `program_id` (x, y, z) of the failing CTA.
        cta: [i64; 3],
        /// The failing instruction.
        inst: Inst,
        /// What went wrong.
        source: ExecError,
    },
}

/// A failure of one instruction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// A variable was read (by `read` or as an MMA operand) before any write in this CTA.
    #[error("variable `{var}` read before write")]
    ReadBeforeWrite {
        /// Variable name.
        var: String,
    },
    /// Integer division or remainder by zero.
    #[error("integer division by zero")]
    DivisionByZero,
    /// Integer arithmetic left the i32 range.
    #[error("integer overflow: {0} does not fit in i32")]
    IntegerOverflow(String),
    /// A float converted to i32 is NaN, infinite or out of range.
    #[error("cannot convert {value} to i32")]
    InvalidCast {
        /// The value.
        value: f32,
    },
    /// A tile exceeds the element limit.
    #[error("tile of {elements} elements exceeds the limit of {limit}")]
    TileTooLarge {
        /// Element count.
        elements: u64,
        /// The limit.
        limit: u64,
    },
    /// The instruction budget ran out inside this instruction.
    #[error("instruction budget of {limit} steps exhausted")]
    StepLimit {
        /// The budget.
        limit: u64,
    },
    /// The IR is inconsistent in a way the validator does not catch (an operand of the wrong
    /// kind for the operation, a shape that does not broadcast at run time).
    #[error("malformed instruction: {0}")]
    Malformed(String),
}
