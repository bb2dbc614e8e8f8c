//! Errors of the IR interpreter.
//!
//! Two levels: [`InterpError`] for the whole run (inputs, sizes, grid, budget) and
//! [`ExecError`] for one instruction of one CTA, wrapped with its location in
//! [`InterpError::Exec`]. Nothing the user controls (inputs, sizes, the IR) may panic.

use crate::ir::{Elem, Inst};
use crate::ir::validate::ValidateError;
use tilec_abi::bind::BindError;
use tilec_abi::tensor::TensorError;

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
    /// The inputs do not fit the kernel's signature (missing, unknown, dtype, rank, extent,
    /// inconsistent or unresolved size, size expression out of range). The binder is the
    /// runtime's ([`tilec_abi::bind`]), so the interpreter accepts exactly what a launch does.
    #[error("{0}")]
    Bind(#[from] BindError),
    /// A parameter whose element type host tensors cannot carry (a predicate).
    #[error("parameter `{name}` has element type {elem}, which no input tensor can carry")]
    UnsupportedParam {
        /// Parameter name.
        name: String,
        /// Its element type.
        elem: Elem,
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
    /// A `--dump` name cannot be dumped ([`super::Options::dump`]).
    #[error("cannot dump `{name}` of kernel `{kernel}`: {reason}")]
    BadDump {
        /// Kernel name.
        kernel: String,
        /// The name asked for.
        name: String,
        /// Why (unknown name, with the closest one; two types under one name).
        reason: String,
    },
    /// The CTA chosen for `--dump` is outside the grid.
    #[error("the dump CTA {cta:?} is outside the grid {grid:?}")]
    DumpCtaOutsideGrid {
        /// The CTA asked for.
        cta: [i64; 3],
        /// The grid.
        grid: [i64; 3],
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
    /// A variable was read (by `read` or as an MMA operand) before any write in this CTA. The
    /// validator refuses IR whose first access of a variable reads it, so this is a guard.
    #[error("variable `{var}` read before write")]
    ReadBeforeWrite {
        /// Variable name.
        var: String,
    },
    /// A view `t[r0..+R, c0..+C]` (read, or the block of a write) that does not lie inside the
    /// tile.
    #[error("the view [{row}..+{rows}, {col}..+{cols}] is outside the {tile_rows}x{tile_cols} tile")]
    ViewOutOfBounds {
        /// First row.
        row: i64,
        /// First column.
        col: i64,
        /// View rows.
        rows: usize,
        /// View columns.
        cols: usize,
        /// The tile's rows.
        tile_rows: usize,
        /// The tile's columns.
        tile_cols: usize,
    },
    /// A gather `t[rows, cols]` whose index at one element of its result lies outside the tile.
    #[error("the gather's element ({at_row}, {at_col}) reads ({row}, {col}), outside the {tile_rows}x{tile_cols} tile")]
    GatherOutOfBounds {
        /// Row of the gather's result.
        at_row: usize,
        /// Column of the gather's result.
        at_col: usize,
        /// The row index there.
        row: i64,
        /// The column index there.
        col: i64,
        /// The tile's rows.
        tile_rows: usize,
        /// The tile's columns.
        tile_cols: usize,
    },
    /// Two CTAs of one launch wrote the same element of an output tensor: on a GPU the result
    /// depends on which runs last (a write race), even when both happen to write the same value.
    #[error("element {index:?} of `{tensor}` was already written by CTA {other:?} in this launch (a write race between CTAs)")]
    WriteRace {
        /// The tensor.
        tensor: String,
        /// The element's index.
        index: Vec<usize>,
        /// The CTA that wrote it first.
        other: [i64; 3],
    },
    /// A load or store reached an element past the edge of a tensor not declared
    /// `edge(zeros)` (docs/language.md, "What happens out of bounds").
    #[error("{} element {index:?} of `{tensor}`, past its edge (shape {shape:?})", if *.store { "store to" } else { "load of" })]
    PastEdge {
        /// The tensor.
        tensor: String,
        /// The element's index (a position may be negative).
        index: Vec<i64>,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// A store (else a load).
        store: bool,
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
    /// The wall-clock limit ran out inside this instruction (a runaway loop).
    #[error("stopped after {seconds} s and {steps} steps (the time limit; a runaway loop, or a problem too large to interpret)")]
    TimeLimit {
        /// The limit, seconds.
        seconds: f64,
        /// Steps taken.
        steps: u64,
    },
    /// The IR is inconsistent in a way the validator does not catch (an operand of the wrong
    /// kind for the operation, a shape that does not broadcast at run time).
    #[error("malformed instruction: {0}")]
    Malformed(String),
}

impl InterpError {
    /// The failed instruction's `help:` line, when it has one ([`ExecError::help`]).
    pub fn help(&self) -> Option<String> {
        match self {
            InterpError::Exec { source, .. } => source.help(),
            _ => None,
        }
    }

    /// The message, and [`InterpError::help`] on a line of its own: for reports that carry the
    /// error as text (`tilec build --verify`).
    pub fn with_help(&self) -> String {
        self.help().map_or_else(|| self.to_string(), |h| format!("{self}\n  = {h}"))
    }
}

impl ExecError {
    /// A `help:` line for the error's diagnostic, where one says what to change.
    pub fn help(&self) -> Option<String> {
        match self {
            ExecError::PastEdge { tensor, .. } => Some(format!(
                "help: if `{tensor}`'s tiles may run past its extent (a partial tile), declare the parameter `{tensor}: ...[...] edge(zeros)` — loads there read 0, stores there are dropped; otherwise the index is wrong"
            )),
            _ => None,
        }
    }
}
