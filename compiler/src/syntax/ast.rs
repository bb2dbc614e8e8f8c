//! The abstract syntax tree. Every node carries the byte span of its source text.

use crate::diag::Span;

/// A name with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it is written.
    pub span: Span,
}

/// A whole `.tile` file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct File {
    /// Items in source order.
    pub items: Vec<Item>,
    /// Names of kernel instances refused (already reported): launches of them are not
    /// reported again.
    pub refused_instances: Vec<String>,
}

/// A top-level item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `const NAME = expr;`
    Const(ConstDecl),
    /// `kernel name(...) grid(...) { ... }`
    Kernel(KernelDecl),
    /// `import "file.tile";`
    Import(ImportDecl),
    /// `operator name(...) { buffers and launches }`
    Operator(OperatorDecl),
    /// `kernel name = base(param: elem, ...);`: a copy of a kernel of this file with some
    /// parameters' element types changed (replaced by that kernel right after parsing).
    Instance(InstanceDecl),
    /// An item that failed to parse (already reported).
    Error(Span),
}

/// A compile-time integer constant.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstDecl {
    /// Its name.
    pub name: Ident,
    /// Its value (a constant expression); for a size parameter, the default.
    pub value: Expr,
    /// `in {v, ...}`: a size parameter, which a build may set to any of these values
    /// (`tilec build --const NAME=v`); with the set's span.
    pub supported: Option<(Vec<Expr>, Span)>,
    /// The whole declaration.
    pub span: Span,
}

/// A kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelDecl {
    /// Its name.
    pub name: Ident,
    /// Parameters.
    pub params: Vec<ParamDecl>,
    /// `grid(x[, y[, z]])`: size expressions.
    pub grid: Vec<Expr>,
    /// Span of the grid clause.
    pub grid_span: Span,
    /// `threads(N)`, if given.
    pub threads: Option<Expr>,
    /// Spans of further `threads(..)` clauses (an error).
    pub repeated_threads: Vec<Span>,
    /// `contract(class)`: the kverify operator class (`matmul`, `softmax`, …) whose fp64
    /// reference judges the kernel under `tilec build --verify` (`tilec::verify::kernel`).
    pub contract: Option<Ident>,
    /// Spans of further `contract(..)` clauses (an error).
    pub repeated_contracts: Vec<Span>,
    /// Launch attributes beside `threads(..)`: `ctas_per_sm(3)`, `ctas_per_sm(sm_90a: 3)`.
    pub attrs: Vec<KernelAttr>,
    /// The body.
    pub body: Vec<Stmt>,
    /// The whole kernel.
    pub span: Span,
    /// For a kernel made by an instance item: the kernel it copies and the instance item's span.
    pub instance: Option<(String, Span)>,
    /// Input tensors an instance declares all zeros (`dk2: zeros`): not parameters of the
    /// kernel; every load of one reads 0 (`syntax::instance`).
    pub zeroed: Vec<String>,
}

/// A kernel instance: `kernel k1_bf16 = k1(dv2: bf16);` — kernel `base` of the same file under
/// another name, the listed tensor parameters of another element type, dropped (`dw: none`, an
/// output) or all zeros (`dk2: zeros`, an input) (`syntax::instance`).
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceDecl {
    /// The instance's name.
    pub name: Ident,
    /// The kernel it copies.
    pub base: Ident,
    /// (parameter, new element type) pairs.
    pub retypes: Vec<(Ident, Ident)>,
    /// The whole item.
    pub span: Span,
}

/// One clause of a kernel's head after `grid(..)`.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelHead {
    /// `threads(N)` and its span.
    Threads(Expr, Span),
    /// `contract(class)` and its span.
    Contract(Ident, Span),
    /// A launch attribute.
    Attr(KernelAttr),
}

/// A launch attribute `name([target:] value)`.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelAttr {
    /// The attribute's name.
    pub name: Ident,
    /// The target it applies to (`sm_90a: 3`); every target when absent.
    pub target: Option<Ident>,
    /// Its value.
    pub value: Expr,
}

/// `import "path";`: the kernels of another file, usable in this file's operators and built with
/// it. The path is relative to the importing file.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportDecl {
    /// The path as written (between the quotes).
    pub path: String,
    /// Span of the string literal.
    pub path_span: Span,
    /// The whole item.
    pub span: Span,
}

/// A multi-kernel operator: parameters as a kernel's, a body of intermediate buffers and launches.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorDecl {
    /// Its name.
    pub name: Ident,
    /// Parameters (inputs, `out` tensors, scalars).
    pub params: Vec<ParamDecl>,
    /// `contract(model)`: the recurrence member whose fp64 oracle judges it (`--verify`).
    pub contract: Option<Ident>,
    /// Buffers and launches in source (= launch) order.
    pub body: Vec<OpStmt>,
    /// The whole operator.
    pub span: Span,
}

/// A statement of an operator body.
#[derive(Clone, Debug, PartialEq)]
pub enum OpStmt {
    /// `let name: elem[shape];`: an intermediate buffer, allocated once per call.
    Buffer(BufferDecl),
    /// `kernel(arg, ...);`: a launch, arguments in the kernel's parameter order.
    Launch(LaunchDecl),
    /// A statement that failed to parse (already reported).
    Error(Span),
}

/// An intermediate buffer of an operator.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    /// Its name.
    pub name: Ident,
    /// Element type name.
    pub elem: Ident,
    /// Shape over the operator's sizes and constants.
    pub shape: Vec<Expr>,
    /// `= 0`: a buffer of zeros that launches may read without one writing it first.
    pub init: Option<Expr>,
    /// The whole statement.
    pub span: Span,
}

/// A kernel launch inside an operator.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchDecl {
    /// The kernel.
    pub kernel: Ident,
    /// One operator parameter or buffer per kernel parameter, in order.
    pub args: Vec<Ident>,
    /// The whole statement.
    pub span: Span,
}

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    /// Its name.
    pub name: Ident,
    /// `out` was written.
    pub output: bool,
    /// Element type name.
    pub elem: Ident,
    /// Shape (`None` for a scalar parameter).
    pub shape: Option<Vec<Expr>>,
    /// An attribute after the shape, `offsets(T)`: its name and argument.
    pub attr: Option<(Ident, Ident)>,
    /// The whole declaration.
    pub span: Span,
}

/// A memory space as written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SpaceKw {
    /// `reg`
    Reg,
    /// `smem`
    Smem,
    /// `tmem`
    Tmem,
}

/// A type annotation on `let`: `: [space] [elem [rows, cols]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeAnn {
    /// Memory space, if written.
    pub space: Option<(SpaceKw, Span)>,
    /// Element type name, if written.
    pub elem: Option<Ident>,
    /// Shape, if written.
    pub shape: Option<Vec<Expr>>,
    /// The whole annotation.
    pub span: Span,
}

/// Assignment operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`
    Add,
    /// `-=`
    Sub,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `let [mut] name [: ann] = value;`
    Let {
        /// `mut` was written.
        mutable: bool,
        /// The bound name.
        name: Ident,
        /// Type annotation.
        ann: Option<TypeAnn>,
        /// Initial value.
        value: Expr,
        /// Whole statement.
        span: Span,
    },
    /// `name op value;` or, on a view of the variable, `name[index] op value;`
    Assign {
        /// The assigned name.
        name: Ident,
        /// The view written (`x[r0..+16, :] = v`); empty for the whole variable.
        index: Vec<IndexExpr>,
        /// `=`, `+=` or `-=`.
        op: AssignOp,
        /// The value.
        value: Expr,
        /// Whole statement.
        span: Span,
    },
    /// `store tensor[index] = value;`
    Store {
        /// The tensor.
        tensor: Ident,
        /// Indices.
        index: Vec<IndexExpr>,
        /// The stored value.
        value: Expr,
        /// `where mask`: elements whose mask is false are not written.
        mask: Option<Expr>,
        /// Whole statement.
        span: Span,
    },
    /// `for var in [rev] lo..hi { body }`
    For {
        /// Induction variable.
        var: Ident,
        /// Iterate in reverse.
        reverse: bool,
        /// Lower bound.
        lo: Expr,
        /// Upper bound (exclusive).
        hi: Expr,
        /// Body.
        body: Vec<Stmt>,
        /// Whole statement.
        span: Span,
    },
    /// A statement that failed to parse (already reported).
    Error(Span),
}

/// One index of a tensor access.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexExpr {
    /// A single position.
    Point(Expr),
    /// `start..+len` with a constant `len`.
    Range {
        /// First index.
        start: Expr,
        /// Length (constant expression).
        len: Expr,
        /// Whole index.
        span: Span,
    },
    /// `:` — the whole dimension (which must be a constant).
    Full(Span),
}

/// Binary operators of expressions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `@`
    MatMul,
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
    /// `&&`
    And,
    /// `||`
    Or,
}

impl BinOp {
    /// The operator as written in source.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::MatMul => "@",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

/// Unary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x`
    Not,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// Expression trees can be arbitrarily deep while they are being parsed (a 200 000-term sum
/// before a syntax error), and the derived recursive drop overflowed the stack on them; this
/// one moves children onto a heap stack first. See also [`super::depth`].
impl Expr {
    /// The direct sub-expressions (index expressions included), for walks that must not recurse
    /// (`syntax::depth`; a deep expression would overflow the stack).
    pub fn children(&self) -> Vec<&Expr> {
        let mut out: Vec<&Expr> = vec![];
        let ix: &[IndexExpr] = match &self.kind {
            ExprKind::Binary(_, a, b) => {
                out.extend([&**a, &**b]);
                &[]
            }
            ExprKind::Unary(_, a) | ExprKind::Field(a, _) => {
                out.push(a);
                &[]
            }
            ExprKind::Call(_, args) => {
                out.extend(args.iter());
                &[]
            }
            ExprKind::Load(_, ix) => ix,
            ExprKind::Index(a, ix) => {
                out.push(a);
                ix
            }
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Name(_) | ExprKind::Error => &[],
        };
        for i in ix {
            match i {
                IndexExpr::Point(x) => out.push(x),
                IndexExpr::Range { start, len, .. } => out.extend([start, len]),
                IndexExpr::Full(_) => {}
            }
        }
        out
    }
}

impl Drop for Expr {
    fn drop(&mut self) {
        let mut stack = Vec::new();
        take_children(&mut self.kind, &mut stack);
        while let Some(mut e) = stack.pop() {
            take_children(&mut e.kind, &mut stack);
            // `e` now has no children: dropping it here does not recurse.
        }
    }
}

/// Moves the direct sub-expressions of `kind` into `out`, leaving `kind` a leaf.
fn take_children(kind: &mut ExprKind, out: &mut Vec<Expr>) {
    if matches!(kind, ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Name(_) | ExprKind::Error) {
        return;
    }
    match std::mem::replace(kind, ExprKind::Error) {
        ExprKind::Binary(_, a, b) => out.extend([*a, *b]),
        ExprKind::Unary(_, a) | ExprKind::Field(a, _) => out.push(*a),
        ExprKind::Call(_, args) => out.extend(args),
        ExprKind::Load(_, index) => push_indices(index, out),
        ExprKind::Index(a, index) => {
            out.push(*a);
            push_indices(index, out);
        }
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Name(_) | ExprKind::Error => {}
    }
}

fn push_indices(index: Vec<IndexExpr>, out: &mut Vec<Expr>) {
    for i in index {
        match i {
            IndexExpr::Point(e) => out.push(e),
            IndexExpr::Range { start, len, .. } => out.extend([start, len]),
            IndexExpr::Full(_) => {}
        }
    }
}

/// Kinds of expressions.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// Integer literal (kept as text; range-checked in semantic analysis).
    Int(String),
    /// Float literal.
    Float(String),
    /// A name.
    Name(String),
    /// Binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// Unary operation.
    Unary(UnOp, Box<Expr>),
    /// A builtin call `f(args)`.
    Call(Ident, Vec<Expr>),
    /// Postfix field: only `.T` (transpose) is defined.
    Field(Box<Expr>, Ident),
    /// `load tensor[index]`.
    Load(Ident, Vec<IndexExpr>),
    /// A view of an on-chip tile: `t[r0..+16, c0..+16]`, `t[i, :]`, `t[i, j]`.
    Index(Box<Expr>, Vec<IndexExpr>),
    /// An expression that failed to parse (already reported).
    Error,
}
