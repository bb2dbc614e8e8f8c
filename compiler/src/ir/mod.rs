//! The tile IR.
//!
//! A [`Module`] holds kernels. A [`Kernel`] is *structured*: its body is a [`Block`], an ordered
//! list of instructions, and a `for` instruction owns its body block. There is no CFG and no phi:
//!
//! * **Values** ([`Value`]) are SSA scalars and immutable register tiles. A value defined inside a
//!   loop body is visible only in that body (and blocks nested in it).
//! * **Variables** ([`Var`]) are mutable tile slots in one memory space ([`Space`]): registers,
//!   shared memory or tensor memory. Loop-carried state (an accumulator, the state gradient dS
//!   of a reverse scan) is a variable. Every TMEM buffer the planner places is a TMEM variable.
//! * **Instructions** ([`Inst`]) have at most one result.
//!
//! Program order is the pre-order walk of the body: a loop instruction comes before the
//! instructions of its body. Program points ([`ProgramPoints`]) number instructions in that order;
//! liveness and the TMEM planner work on those numbers.
//!
//! Ownership follows Cranelift: `PrimaryMap`s own data, `SecondaryMap`s hold side facts (spans).
//! The text form is produced by [`write::write_module`] and is deterministic.

pub mod builder;
pub mod exp2;
mod entities;
pub mod ranges;
pub mod read;
mod types;
pub mod validate;
pub mod write;

use cranelift_entity::{PrimaryMap, SecondaryMap};

pub use entities::{Block, Inst, Param, SizeVar, Value, Var};
pub mod operator;
pub use operator::{Buffer, KernelContract, Launch, Operator};
pub use types::{broadcast, broadcasts_to, tmem_columns, Elem, SizeExpr, SizeOp, Space, Type};

use crate::diag::Span;

/// A compilation unit: the kernels and operators of one `.tile` file (with the kernels of the
/// files it imports).
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Kernels in source order.
    pub kernels: Vec<Kernel>,
    /// Operators in source order.
    pub operators: Vec<Operator>,
    /// The file's size parameters (`const K = 128 in {64, 128};`), with this build's values.
    pub size_params: Vec<SizeParam>,
}

/// A size parameter: a constant a build may set (`--const NAME=v`) to any of its supported sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeParam {
    /// Its name.
    pub name: String,
    /// This build's value.
    pub value: i64,
    /// The value without `--const`.
    pub default: i64,
    /// The sizes the author supports, in declaration order.
    pub supported: Vec<i64>,
    /// Span of its name.
    pub span: Span,
    /// The file that declares it (`None` for a source text without a file).
    pub file: Option<String>,
}

/// One GPU kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Kernel name (the PTX entry symbol).
    pub name: String,
    /// Span of the kernel's name.
    pub span: Span,
    /// Symbolic sizes, in order of first appearance in parameter shapes. Each becomes an `i32`
    /// kernel argument after the declared parameters.
    pub sizes: PrimaryMap<SizeVar, String>,
    /// Declared parameters.
    pub params: PrimaryMap<Param, ParamData>,
    /// Launch grid (x, y, z) over the symbolic sizes.
    pub grid: [SizeExpr; 3],
    /// Threads per CTA. Tensor-memory accesses are made by warps `0..threads/32`; warp `w`
    /// touches lanes `32*(w%4)..32*(w%4)+31` (blackwell.md §1.3).
    pub threads: u32,
    /// `ctas_per_sm([target:] N)`: per target, the CTAs per SM the kernel is built to keep
    /// resident, and where it is written ([`Kernel::residency`]). That target's shared-memory
    /// plan must allow N side by side (E0405 otherwise), and its back end passes N to ptxas as
    /// launch bounds (`.maxntid threads`, `.minnctapersm N`), which then fits the registers of
    /// N CTAs: 65,536 / (N · threads) per thread.
    pub ctas_per_sm: Vec<(crate::target::Target, u32, Span)>,
    /// Variables (mutable tile slots).
    pub vars: PrimaryMap<Var, VarData>,
    /// SSA values.
    pub values: PrimaryMap<Value, ValueData>,
    /// Instructions.
    pub insts: PrimaryMap<Inst, InstData>,
    /// Blocks.
    pub blocks: PrimaryMap<Block, BlockData>,
    /// The kernel's top-level block.
    pub body: Block,
    /// Source span of each instruction (missing spans are the default, empty span).
    pub inst_spans: SecondaryMap<Inst, Span>,
    /// Source names of immutable `let` bindings, in program order (a value may have several
    /// names, a name several values when shadowed). Debug information only: no pass reads it;
    /// the interpreter's `--dump` does ([`crate::interp::Options::dump`]).
    pub bindings: Vec<(String, Value)>,
    /// `contract(class)`: the kverify operator class whose fp64 reference judges the kernel
    /// (`tilec build --verify`, [`crate::verify::kernel`]); no effect on code generation.
    pub contract: Option<KernelContract>,
}

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamData {
    /// Source name.
    pub name: String,
    /// Tensor or scalar.
    pub kind: ParamKind,
    /// Declaration span.
    pub span: Span,
    /// What an access past the tensor's edge means (`edge(zeros)`, or an error).
    pub edge: Edge,
}

/// What a load or store of a tensor element past the tensor's edge means, as the program
/// declares it on the parameter (docs/language.md, "What happens out of bounds").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Edge {
    /// Nothing declared: an access past the edge is a mistake. The interpreter stops on it
    /// (E0601); the generated code executes `trap` (`backend::edge`).
    #[default]
    Error,
    /// `edge(zeros)`: the tensor is zero-padded past its edge — reads there give 0, writes
    /// there are dropped (partial tiles at a run-time edge; TMA's zero fill).
    Zeros,
}

/// Kind of a parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    /// A dense, row-major global tensor.
    Tensor {
        /// Element type.
        elem: Elem,
        /// Shape over symbolic sizes and constants.
        shape: Vec<SizeExpr>,
        /// Whether the kernel writes it.
        output: bool,
    },
    /// A scalar passed by value.
    Scalar(Elem),
}

impl ParamKind {
    /// The element type: a tensor's elements, or the scalar's type.
    pub fn elem(&self) -> Elem {
        match self {
            ParamKind::Tensor { elem, .. } => *elem,
            ParamKind::Scalar(e) => *e,
        }
    }

    /// A tensor's element type; `None` for a scalar.
    pub fn tensor_elem(&self) -> Option<Elem> {
        match self {
            ParamKind::Tensor { elem, .. } => Some(*elem),
            ParamKind::Scalar(_) => None,
        }
    }
}

/// A variable: a mutable tile slot.
#[derive(Clone, Debug, PartialEq)]
pub struct VarData {
    /// Source name, or a compiler-made name (starting with `%`) for temporaries.
    pub name: String,
    /// Memory space.
    pub space: Space,
    /// Tile type (always a tile).
    pub ty: Type,
    /// Declaration span.
    pub span: Span,
}

/// An SSA value.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// Type.
    pub ty: Type,
    /// Where it is defined.
    pub def: ValueDef,
}

/// Definition site of a value.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ValueDef {
    /// The result of an instruction.
    Result(Inst),
    /// The induction variable of a `for` instruction.
    LoopIndex(Inst),
}

/// A block: an ordered list of instructions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockData {
    /// Instructions in program order.
    pub insts: Vec<Inst>,
}

/// An instruction and its result.
#[derive(Clone, Debug, PartialEq)]
pub struct InstData {
    /// The operation.
    pub op: Op,
    /// The result value, if the operation produces one.
    pub result: Option<Value>,
}

/// Elementwise unary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `exp2(x)`, fp32: the fixed operation sequence of [`exp2::exp2`] (not PTX `ex2.approx`).
    Exp2,
    /// `log2(x)`
    Log2,
    /// `exp(x)` = exp2(x * log2(e))
    Exp,
    /// `abs(x)`
    Abs,
    /// `sqrt(x)`
    Sqrt,
    /// `!x` on predicates
    Not,
}

/// The kernel's integer `cdiv(x, y)` (`BinOp::Cdiv`) for any signs: ⌈x / y⌉, the truncated
/// quotient one up where the exact quotient is positive and inexact (`cdiv(-4, 2) = -2`,
/// `cdiv(-5, 2) = -2`, `cdiv(5, 2) = 3`). The interpreter and the constant folder compute it here;
/// the back end emits the same steps (backend/elementwise.rs). Size expressions keep their own
/// `(a + b − 1) / b` (docs/metadata.md), which equals it for `a ≥ 0, b > 0`. `y` must not be 0.
pub fn int_cdiv(x: i64, y: i64) -> i64 {
    let q = x / y;
    if x % y != 0 && ((x > 0) == (y > 0)) {
        q + 1
    } else {
        q
    }
}

/// Elementwise binary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates; indices are non-negative)
    Div,
    /// `%`. Integers: the remainder of truncating division (signed). Floats: the
    /// truncated-quotient remainder as the GPU computes it, `fma(−trunc(x / y), y, x)` with
    /// `x / y` rounded to f32 (`div.rn`, `cvt.rzi`, `fma.rn`: LLVM's NVPTX lowering of `frem`,
    /// emitted explicitly by the back end and followed by the interpreter), and `x` where `y` is
    /// ±inf. Not C's exact `fmod`: where the rounded quotient reaches the next integer the two
    /// differ (`7.0 % 0.1` is −1.04e-7; fmod gives 0.0999999).
    Rem,
    /// `min(a, b)`: IEEE 754-2019 `minimum` on floats — NaN if either operand is NaN, and
    /// −0 < +0 (PTX `min.NaN.f32`; what PyTorch's `torch.minimum` does).
    Min,
    /// `max(a, b)`: IEEE 754-2019 `maximum` on floats (NaN-propagating, PTX `max.NaN.f32`).
    Max,
    /// `fmin(a, b)`: IEEE 754-2008 `minNum` — a NaN operand is ignored (PTX `min.f32`). Floats only.
    FMin,
    /// `fmax(a, b)`: IEEE 754-2008 `maxNum` (NaN-ignoring, PTX `max.f32`). Floats only.
    FMax,
    /// `cdiv(a, b)` (integers only)
    Cdiv,
    /// `&&` on predicates
    And,
    /// `||` on predicates
    Or,
}

/// Comparison operators (result `bool`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Reduction operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (fp32 accumulation).
    Sum,
    /// Maximum, NaN-propagating on floats (as [`BinOp::Max`]).
    Max,
    /// Minimum, NaN-propagating on floats (as [`BinOp::Min`]).
    Min,
}

/// Tile axis.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Along rows: the result has one value per row (`[R, 1]`).
    Row,
    /// Along columns: the result has one value per column (`[1, C]`).
    Col,
}

/// Triangular masks over `(row, col)` of a tile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TriMask {
    /// `col < row`
    StrictLower,
    /// `col <= row`
    Lower,
}

/// One index of a global tensor access.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Index {
    /// A single position (an `i32` scalar value).
    Point(Value),
    /// `start .. start + len`: a tile dimension of constant length.
    Range {
        /// First index (an `i32` scalar value).
        start: Value,
        /// Constant length.
        len: u32,
    },
}

/// An MMA operand: a shared- or tensor-memory variable, possibly read transposed.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MmaOperand {
    /// The variable holding the operand.
    pub var: Var,
    /// Whether the operand is used transposed.
    pub transposed: bool,
}

/// Operations.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Integer constant (scalar i32).
    ConstInt(i64),
    /// Float constant (scalar f32).
    ConstFloat(f64),
    /// `program_id(axis)`: this CTA's index in the grid (scalar i32).
    ProgramId(u8),
    /// The value of a symbolic size (scalar i32).
    Size(SizeVar),
    /// The value of a scalar parameter.
    ScalarParam(Param),
    /// Elementwise unary operation.
    Unary(UnOp, Value),
    /// Elementwise binary operation with broadcasting.
    Binary(BinOp, Value, Value),
    /// Elementwise comparison with broadcasting.
    Cmp(CmpOp, Value, Value),
    /// `select(cond, a, b)` with broadcasting.
    Select(Value, Value, Value),
    /// Conversion; float narrowing rounds to nearest even (an explicit rounding point).
    Cast(Value, Elem),
    /// A tile filled with a scalar.
    Splat(Value),
    /// Row (`Axis::Row`) or column (`Axis::Col`) indices of a tile, as i32.
    Iota(Axis),
    /// A triangular predicate tile.
    Mask(TriMask),
    /// Reduction along an axis.
    Reduce(ReduceOp, Axis, Value),
    /// Transpose of a register tile.
    Transpose(Value),
    /// A view of a tile: element `(r, c)` of the result is element `(row + r, col + c)` of `src`
    /// (`row`, `col`: i32 scalars). The result type gives the view's extents; a scalar result
    /// is the single element `(row, col)`. A view that does not lie inside `src` is an error at
    /// run time (the interpreter stops; compiled code executes `trap`), never a masked read.
    Slice {
        /// The viewed tile.
        src: Value,
        /// First row of the view.
        row: Value,
        /// First column of the view.
        col: Value,
    },
    /// A gather from a tile: element `(r, c)` of the result is element `(row[r, c], col[r, c])`
    /// of `src`, where `row` and `col` are i32 scalars or tiles broadcast to the result's shape
    /// (NumPy's integer-array indexing, `src[row, col]`). The source `t[:, ib - d]` of a row's
    /// own column, or `t[(row_index(C, 1) / 16) * 16 + s, :]` of a row per block of 16. An
    /// index outside `src` is an error at run time (the interpreter stops; compiled code
    /// executes `trap`), never a masked read.
    Gather {
        /// The tile read.
        src: Value,
        /// Row of `src` per element (i32 scalar or tile).
        row: Value,
        /// Column of `src` per element (i32 scalar or tile).
        col: Value,
    },
    /// `base` with the `rows x cols` block at `(row, col)` replaced by `value` (a tile of that
    /// shape, or anything that broadcasts to it): the write `x[r0..+R, c0..+C] = value`. The
    /// result has `base`'s type. A block outside `base` is an error at run time, as for
    /// [`Op::Slice`].
    Insert {
        /// The tile written into.
        base: Value,
        /// The block's new contents.
        value: Value,
        /// First row of the block.
        row: Value,
        /// First column of the block.
        col: Value,
        /// Block rows.
        rows: u32,
        /// Block columns.
        cols: u32,
    },
    /// Cumulative sum down each column (along the rows) of a tile, in f32 (i32 for i32 tiles):
    /// row `r` holds `Σ_{s ≤ r}` (forward) or `Σ_{s ≥ r}` (reverse), added one row at a time
    /// in that order (a deterministic fold; gdn-math.md §3.1, §4 B6).
    Scan {
        /// The tile.
        src: Value,
        /// Accumulate from the last row up (`rev_cumsum`).
        reverse: bool,
    },
    /// Load from a global tensor. Elements outside the tensor are 0 (masked partial tiles).
    Load {
        /// The tensor parameter.
        src: Param,
        /// One index per tensor dimension.
        index: Vec<Index>,
    },
    /// Store to a global tensor. Elements outside the tensor are skipped.
    Store {
        /// The tensor parameter.
        dst: Param,
        /// One index per tensor dimension.
        index: Vec<Index>,
        /// The tile (or scalar) to store; converted to the tensor's element type.
        value: Value,
        /// `where mask`: only elements whose (broadcast) mask is true are written.
        mask: Option<Value>,
    },
    /// Read a variable's current contents.
    ReadVar(Var),
    /// Overwrite a variable.
    WriteVar(Var, Value),
    /// Matrix multiply-accumulate: `dst = (negate ? -1 : 1) * a @ b (+ dst if accumulate)`.
    Mma {
        /// Accumulator (TMEM on sm_100a; registers on sm_90a).
        dst: Var,
        /// Left operand (`M x K` after transposition).
        a: MmaOperand,
        /// Right operand (`K x N` after transposition).
        b: MmaOperand,
        /// Add to the previous contents of `dst`.
        accumulate: bool,
        /// Subtract the product instead of adding it.
        negate: bool,
    },
    /// Counted loop over `lo..hi` (i32), in reverse order when `reverse`.
    For {
        /// Lower bound (inclusive).
        lo: Value,
        /// Upper bound (exclusive).
        hi: Value,
        /// Iterate `hi-1` down to `lo`.
        reverse: bool,
        /// Loop body.
        body: Block,
    },
    /// `tcgen05.alloc` of `columns` TMEM columns (inserted by the TMEM planner).
    TmemAlloc {
        /// Power of two in 32..=512.
        columns: u32,
    },
    /// `tcgen05.relinquish_alloc_permit` (inserted by the TMEM planner).
    TmemRelinquish,
    /// `tcgen05.dealloc` of `columns` TMEM columns (inserted by the TMEM planner).
    TmemDealloc {
        /// Same as the allocation.
        columns: u32,
    },
}

impl Op {
    /// Whether the operation computes each element of its tile result from the same element
    /// (row/column broadcast aside) of its operands, with no memory access: the operations
    /// elementwise fusion may evaluate inside a consumer. Exhaustive, so a new op must decide.
    pub fn is_elementwise(&self) -> bool {
        match self {
            Op::Unary(..)
            | Op::Binary(..)
            | Op::Cmp(..)
            | Op::Select(..)
            | Op::Cast(..)
            | Op::Splat(_)
            | Op::Iota(_)
            | Op::Mask(_)
            | Op::Transpose(_)
            | Op::Slice { .. }
            | Op::Gather { .. }
            | Op::Insert { .. } => true,
            Op::ConstInt(_)
            | Op::Scan { .. }
            | Op::ConstFloat(_)
            | Op::ProgramId(_)
            | Op::Size(_)
            | Op::ScalarParam(_)
            | Op::Reduce(..)
            | Op::Load { .. }
            | Op::Store { .. }
            | Op::ReadVar(_)
            | Op::WriteVar(..)
            | Op::Mma { .. }
            | Op::For { .. }
            | Op::TmemAlloc { .. }
            | Op::TmemRelinquish
            | Op::TmemDealloc { .. } => false,
        }
    }
}

impl Kernel {
    /// An empty kernel named `name`.
    pub fn new(name: &str, span: Span) -> Kernel {
        let mut blocks = PrimaryMap::new();
        let body = blocks.push(BlockData::default());
        Kernel {
            name: name.to_string(),
            span,
            sizes: PrimaryMap::new(),
            params: PrimaryMap::new(),
            grid: [SizeExpr::Const(1), SizeExpr::Const(1), SizeExpr::Const(1)],
            threads: 128,
            ctas_per_sm: vec![],
            vars: PrimaryMap::new(),
            values: PrimaryMap::new(),
            insts: PrimaryMap::new(),
            blocks,
            body,
            inst_spans: SecondaryMap::new(),
            bindings: vec![],
            contract: None,
        }
    }

    /// The declared residency on `target` (`ctas_per_sm`) and where it is written.
    pub fn residency(&self, target: crate::target::Target) -> Option<(u32, Span)> {
        self.ctas_per_sm.iter().find(|(t, _, _)| *t == target).map(|&(_, n, s)| (n, s))
    }

    /// The size named `name`.
    pub fn size_named(&self, name: &str) -> Option<SizeVar> {
        size_named(&self.sizes, name)
    }

    /// The size named `name`, declared if new (sizes are numbered in order of first use).
    pub fn declare_size(&mut self, name: &str) -> SizeVar {
        declare_size(&mut self.sizes, name)
    }

    /// The text of a size expression with this kernel's size names (the metadata syntax).
    pub fn size_text(&self, e: &SizeExpr) -> String {
        e.display(&self.sizes).to_string()
    }

    /// Type of a value.
    pub fn value_type(&self, v: Value) -> Type {
        self.values[v].ty
    }

    /// Visits every instruction in program order (pre-order: a loop before its body).
    pub fn walk(&self, mut f: impl FnMut(Inst)) {
        fn go(k: &Kernel, b: Block, f: &mut dyn FnMut(Inst)) {
            for &i in &k.blocks[b].insts {
                f(i);
                if let Op::For { body, .. } = k.insts[i].op {
                    go(k, body, f);
                }
            }
        }
        go(self, self.body, &mut f);
    }

    /// Values an instruction reads.
    pub fn inst_args(&self, i: Inst) -> Vec<Value> {
        match &self.insts[i].op {
            Op::ConstInt(_)
            | Op::ConstFloat(_)
            | Op::ProgramId(_)
            | Op::Size(_)
            | Op::ScalarParam(_)
            | Op::Iota(_)
            | Op::Mask(_)
            | Op::ReadVar(_)
            | Op::Mma { .. }
            | Op::TmemAlloc { .. }
            | Op::TmemRelinquish
            | Op::TmemDealloc { .. } => vec![],
            Op::Unary(_, a) | Op::Cast(a, _) | Op::Splat(a) | Op::Reduce(_, _, a) | Op::Transpose(a) | Op::Scan { src: a, .. } => {
                vec![*a]
            }
            Op::Slice { src, row, col } | Op::Gather { src, row, col } => vec![*src, *row, *col],
            Op::Insert { base, value, row, col, .. } => vec![*base, *value, *row, *col],
            Op::WriteVar(_, a) => vec![*a],
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) => vec![*a, *b],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            Op::Load { index, .. } => index_values(index),
            Op::Store { index, value, mask, .. } => {
                let mut v = index_values(index);
                v.push(*value);
                v.extend(mask);
                v
            }
            Op::For { lo, hi, .. } => vec![*lo, *hi],
        }
    }

    /// `(v, t, index)` when instruction `w` is `WriteVar(v, load t[index])`: a global tile copied
    /// into a variable (what the pipelining and TMA passes move ahead).
    pub fn written_load(&self, w: Inst) -> Option<(Var, Param, &[Index])> {
        let Op::WriteVar(v, x) = self.insts[w].op else { return None };
        let ValueDef::Result(d) = self.values[x].def else { return None };
        match &self.insts[d].op {
            Op::Load { src, index } => Some((v, *src, index)),
            _ => None,
        }
    }

    /// Variables an instruction reads and writes: `(reads, writes)`.
    pub fn inst_vars(&self, i: Inst) -> (Vec<Var>, Vec<Var>) {
        match &self.insts[i].op {
            Op::ReadVar(v) => (vec![*v], vec![]),
            Op::WriteVar(v, _) => (vec![], vec![*v]),
            Op::Mma { dst, a, b, accumulate, .. } => {
                let mut reads = vec![a.var, b.var];
                if *accumulate {
                    reads.push(*dst);
                }
                (reads, vec![*dst])
            }
            _ => (vec![], vec![]),
        }
    }
}

/// The size named `name` in a kernel's size table.
pub fn size_named(sizes: &PrimaryMap<SizeVar, String>, name: &str) -> Option<SizeVar> {
    sizes.iter().find(|(_, n)| n.as_str() == name).map(|(s, _)| s)
}

/// The size named `name` in a size table, declared if new (for code that holds the table
/// while the kernel is borrowed elsewhere, as the IR reader and sema do).
pub fn declare_size(sizes: &mut PrimaryMap<SizeVar, String>, name: &str) -> SizeVar {
    size_named(sizes, name).unwrap_or_else(|| sizes.push(name.to_string()))
}

/// Whether a tile access's columns run along the tensor's last dimension (two ranges, the last
/// index one of them): only then are a row's columns adjacent in memory (tensors are dense and
/// row-major).
pub fn columns_are_last(index: &[Index]) -> bool {
    index.iter().filter(|ix| matches!(ix, Index::Range { .. })).count() >= 2 && matches!(index.last(), Some(Index::Range { .. }))
}

fn index_values(index: &[Index]) -> Vec<Value> {
    index
        .iter()
        .map(|ix| match ix {
            Index::Point(v) | Index::Range { start: v, .. } => *v,
        })
        .collect()
}

/// Program points: the pre-order number of every instruction, and the extent of every loop.
#[derive(Clone, Debug)]
pub struct ProgramPoints {
    /// Program point of each instruction.
    pub point: SecondaryMap<Inst, u32>,
    /// For each `for` instruction: the last program point inside its body (inclusive).
    pub loop_end: SecondaryMap<Inst, u32>,
    /// Enclosing loops of each instruction, innermost last.
    pub enclosing: SecondaryMap<Inst, Vec<Inst>>,
    /// Number of program points.
    pub len: u32,
}

impl ProgramPoints {
    /// The outermost loop that encloses `use_inst` but not the definition point `def` (`None`:
    /// a definition outside every loop, e.g. a variable's contents that persist between
    /// iterations). A definition at a loop's own point (its induction variable) is inside it.
    fn outer_loop_without(&self, use_inst: Inst, def: Option<u32>) -> Option<Inst> {
        // `enclosing` lists the outermost loop first.
        self.enclosing[use_inst].iter().copied().find(|&l| !def.is_some_and(|d| d >= self.point[l] && d <= self.loop_end[l]))
    }

    /// The last point at which something defined at `def` must stay live because of a use at
    /// `use_inst`: the end of the outermost loop around the use that does not contain the
    /// definition (the next iteration reads it again), else the use itself.
    pub fn live_end(&self, use_inst: Inst, def: Option<u32>) -> u32 {
        self.outer_loop_without(use_inst, def).map_or(self.point[use_inst], |l| self.loop_end[l].max(self.point[use_inst]))
    }

    /// The first point of the same extension: the start of that loop, else the use itself.
    pub fn live_start(&self, use_inst: Inst, def: Option<u32>) -> u32 {
        self.outer_loop_without(use_inst, def).map_or(self.point[use_inst], |l| self.point[l].min(self.point[use_inst]))
    }

    /// Numbers the instructions of `k` in program order.
    pub fn compute(k: &Kernel) -> ProgramPoints {
        let mut pp = ProgramPoints {
            point: SecondaryMap::new(),
            loop_end: SecondaryMap::new(),
            enclosing: SecondaryMap::new(),
            len: 0,
        };
        fn go(k: &Kernel, b: Block, stack: &mut Vec<Inst>, pp: &mut ProgramPoints) {
            for &i in &k.blocks[b].insts {
                pp.point[i] = pp.len;
                pp.enclosing[i] = stack.clone();
                pp.len += 1;
                if let Op::For { body, .. } = k.insts[i].op {
                    stack.push(i);
                    go(k, body, stack, pp);
                    stack.pop();
                    pp.loop_end[i] = pp.len.saturating_sub(1).max(pp.point[i]);
                }
            }
        }
        go(k, k.body, &mut Vec::new(), &mut pp);
        pp
    }
}
