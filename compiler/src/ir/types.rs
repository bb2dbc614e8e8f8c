//! Types of the tile IR: element types, tile shapes, memory spaces and size expressions.

use std::fmt;

use cranelift_entity::PrimaryMap;

use super::entities::SizeVar;

/// Element (scalar) type.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Elem {
    /// 1-bit predicate (results of comparisons and masks).
    Bool,
    /// 32-bit signed integer (indices, sizes).
    I32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bf16,
    /// IEEE binary32.
    F32,
}

impl Elem {
    /// Storage size in bytes (Bool counts as 1 byte; it never lives in memory).
    pub fn size_bytes(self) -> u32 {
        match self {
            Elem::Bool => 1,
            Elem::F16 | Elem::Bf16 => 2,
            Elem::I32 | Elem::F32 => 4,
        }
    }
    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::Bf16 | Elem::F32)
    }
    /// Source spelling (`bf16`, `f32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Elem::Bool => "bool",
            Elem::I32 => "i32",
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
            Elem::F32 => "f32",
        }
    }
    /// The dtype that carries this element type in host tensors and metadata (`None` for a
    /// predicate, which has none).
    pub fn host_dtype(self) -> Option<tilec_abi::meta::DType> {
        use tilec_abi::meta::DType;
        Some(match self {
            Elem::F16 => DType::F16,
            Elem::Bf16 => DType::Bf16,
            Elem::F32 => DType::F32,
            Elem::I32 => DType::I32,
            Elem::Bool => return None,
        })
    }
    /// Parses a source spelling.
    pub fn from_name(s: &str) -> Option<Elem> {
        Some(match s {
            "bool" => Elem::Bool,
            "i32" => Elem::I32,
            "f16" => Elem::F16,
            "bf16" => Elem::Bf16,
            "f32" => Elem::F32,
            _ => return None,
        })
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a tile lives.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Space {
    /// Per-thread registers (distributed over the CTA's threads).
    Reg,
    /// CTA shared memory.
    Smem,
    /// Blackwell tensor memory (128 lanes x 512 columns of 32-bit cells per SM).
    Tmem,
}

impl Space {
    /// Source spelling.
    pub fn name(self) -> &'static str {
        match self {
            Space::Reg => "reg",
            Space::Smem => "smem",
            Space::Tmem => "tmem",
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Type of an SSA value or a variable: a scalar or a 2-D tile with constant shape.
///
/// Vectors are tiles with one dimension 1: a per-row vector is `[R, 1]`, a per-column vector
/// `[1, C]`. Binary operations broadcast a dimension of extent 1 (and scalars) against the other
/// operand, as NumPy does for 2-D arrays.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Type {
    /// A scalar, uniform across the CTA.
    Scalar(Elem),
    /// A `rows x cols` tile.
    Tile {
        /// Element type.
        elem: Elem,
        /// Number of rows.
        rows: u32,
        /// Number of columns.
        cols: u32,
    },
}

impl Type {
    /// Element type of a scalar or tile.
    pub fn elem(self) -> Elem {
        match self {
            Type::Scalar(e) | Type::Tile { elem: e, .. } => e,
        }
    }
    /// `(rows, cols)` of a tile; `None` for scalars.
    pub fn shape(self) -> Option<(u32, u32)> {
        match self {
            Type::Scalar(_) => None,
            Type::Tile { rows, cols, .. } => Some((rows, cols)),
        }
    }
    /// The same shape with another element type.
    pub fn with_elem(self, elem: Elem) -> Type {
        match self {
            Type::Scalar(_) => Type::Scalar(elem),
            Type::Tile { rows, cols, .. } => Type::Tile { elem, rows, cols },
        }
    }
    /// Shorthand for a tile type.
    pub fn tile(elem: Elem, rows: u32, cols: u32) -> Type {
        Type::Tile { elem, rows, cols }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar(e) => write!(f, "{e}"),
            Type::Tile { elem, rows, cols } => write!(f, "{elem}[{rows}, {cols}]"),
        }
    }
}

/// A size expression over the kernel's symbolic sizes (shapes of global tensors, the grid).
///
/// Printed in the syntax the runtime's evaluator reads (`docs/metadata.md`): `B`, `T * H`,
/// `cdiv(V, 64)`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum SizeExpr {
    /// A constant.
    Const(i64),
    /// A symbolic size of the kernel.
    Sym(SizeVar),
    /// Binary arithmetic.
    Bin(SizeOp, Box<SizeExpr>, Box<SizeExpr>),
}

/// Operators of [`SizeExpr`]: the ABI's size operators themselves ([`tilec_abi::expr::Op`]), so
/// the compiler, the runtime and the interpreter share one operator set and one arithmetic
/// ([`tilec_abi::expr::apply`]: truncating division, as `div.s32`).
pub use tilec_abi::expr::Op as SizeOp;

impl SizeExpr {
    /// The constant value, when the expression has no symbols.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            SizeExpr::Const(c) => Some(*c),
            SizeExpr::Sym(_) => None,
            SizeExpr::Bin(op, a, b) => {
                let (a, b) = (a.as_const()?, b.as_const()?);
                tilec_abi::expr::apply(*op, a, b).ok()
            }
        }
    }

    /// Whether the expression mentions size `s`.
    pub fn mentions(&self, s: SizeVar) -> bool {
        match self {
            SizeExpr::Const(_) => false,
            SizeExpr::Sym(v) => *v == s,
            SizeExpr::Bin(_, a, b) => a.mentions(s) || b.mentions(s),
        }
    }
}

impl SizeExpr {
    /// Displays the expression in the metadata syntax, naming sizes from `names` (a size with
    /// no name prints as its entity, `size3`).
    pub fn display<'a>(&'a self, names: &'a PrimaryMap<SizeVar, String>) -> SizeDisplay<'a> {
        SizeDisplay { e: self, names }
    }
}

/// [`SizeExpr::display`].
pub struct SizeDisplay<'a> {
    e: &'a SizeExpr,
    names: &'a PrimaryMap<SizeVar, String>,
}

impl fmt::Display for SizeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sub = |e| SizeDisplay { e, names: self.names };
        match self.e {
            SizeExpr::Const(c) => write!(f, "{c}"),
            SizeExpr::Sym(s) => match self.names.get(*s) {
                Some(n) => f.write_str(n),
                None => write!(f, "{s}"),
            },
            SizeExpr::Bin(op, a, b) => {
                let (a, b) = (sub(a), sub(b));
                let name = match op {
                    SizeOp::Add => "+",
                    SizeOp::Sub => "-",
                    SizeOp::Mul => "*",
                    SizeOp::Div => "/",
                    SizeOp::Rem => "%",
                    SizeOp::Cdiv => return write!(f, "cdiv({a}, {b})"),
                    SizeOp::Min => return write!(f, "min({a}, {b})"),
                    SizeOp::Max => return write!(f, "max({a}, {b})"),
                };
                write!(f, "({a} {name} {b})")
            }
        }
    }
}

/// The shape two operands broadcast to: scalars broadcast to anything, and a tile dimension of
/// extent 1 broadcasts against any extent (NumPy rules restricted to 2-D).
///
/// Returns `Ok(None)` when both are scalars, `Ok(Some((rows, cols)))` for a tile result and
/// `Err(())` when the shapes are incompatible.
#[allow(clippy::result_unit_err)]
pub fn broadcast(a: Type, b: Type) -> Result<Option<(u32, u32)>, ()> {
    match (a.shape(), b.shape()) {
        (None, None) => Ok(None),
        (Some(s), None) | (None, Some(s)) => Ok(Some(s)),
        (Some((r1, c1)), Some((r2, c2))) => {
            let dim = |x: u32, y: u32| if x == y || y == 1 { Ok(x) } else if x == 1 { Ok(y) } else { Err(()) };
            Ok(Some((dim(r1, r2)?, dim(c1, c2)?)))
        }
    }
}

/// Whether a value of type `t` broadcasts to exactly a `shape` tile (NumPy rules, without
/// growing it): a scalar always does, a tile when each dimension equals or is 1.
pub fn broadcasts_to(t: Type, shape: (u32, u32)) -> bool {
    broadcast(t, Type::tile(t.elem(), shape.0, shape.1)) == Ok(Some(shape))
}

/// TMEM columns a `rows x cols` tile of `elem` occupies: one 32-bit cell per element for 32-bit
/// types, two 16-bit elements packed per cell otherwise (blackwell.md §1.1, §4.1).
pub fn tmem_columns(elem: Elem, cols: u32) -> u32 {
    if elem.size_bytes() >= 4 {
        cols
    } else {
        cols.div_ceil(4 / elem.size_bytes())
    }
}
