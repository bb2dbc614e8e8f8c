//! Argument binding: checks caller-supplied tensors and scalars against a kernel's metadata
//! signature, infers the symbolic sizes, and computes the launch grid.
//!
//! Sizes are inferred from tensor extents wherever a shape dimension is a bare size name
//! (`q: [B, T, H, K]` gives B, T, H, K); dimensions written as expressions (`B*T`,
//! `cdiv(T, 64)`) are then evaluated and checked. A size can also be given explicitly
//! ([`Args::sizes`]), or through an i32 scalar parameter of the same name; every source must
//! agree. An i32 scalar parameter named like a size and not supplied is filled with the size
//! (kernels take their extents as such scalars).
//!
//! Output tensors need not be supplied: they are allocated with the computed shape and zero
//! contents. If supplied, they are checked like inputs and their contents are the initial
//! device contents. Nothing here touches a GPU, so all of it is tested on CPU-only machines.

use std::collections::BTreeMap;

use half::{bf16, f16};
use thiserror::Error;

use crate::expr::{ExprError, SizeExpr};
use crate::meta::{DType, Role};
use crate::st::TensorMap;
use crate::tensor::{HostTensor, TensorError};

pub(crate) mod factors;
pub use factors::determined_sizes;
mod signature;
pub use signature::Signature;

/// Largest grid extent per axis (x, y, z) the CUDA driver accepts on sm_90 / sm_100.
pub const MAX_GRID: [i64; 3] = [(1 << 31) - 1, 65535, 65535];

/// A scalar kernel argument, passed by value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// 32-bit float.
    F32(f32),
    /// 32-bit signed integer.
    I32(i32),
    /// IEEE half.
    F16(f16),
    /// bfloat16.
    Bf16(bf16),
}

impl Scalar {
    /// The scalar's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I32(_) => DType::I32,
            Scalar::F16(_) => DType::F16,
            Scalar::Bf16(_) => DType::Bf16,
        }
    }
}

/// A scalar as the rank-0 tensor files carry it in (the inverse of the decoding in
/// [`Args::from_tensor_map`]).
impl From<Scalar> for HostTensor {
    fn from(v: Scalar) -> HostTensor {
        let bytes = match v {
            Scalar::F32(x) => x.to_le_bytes().to_vec(),
            Scalar::I32(x) => x.to_le_bytes().to_vec(),
            Scalar::F16(x) => x.to_le_bytes().to_vec(),
            Scalar::Bf16(x) => x.to_le_bytes().to_vec(),
        };
        HostTensor { dtype: v.dtype(), shape: vec![], bytes }
    }
}

/// What the caller supplies for one launch.
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// Tensor arguments by parameter name.
    pub tensors: TensorMap,
    /// Scalar arguments by parameter name.
    pub scalars: BTreeMap<String, Scalar>,
    /// Explicit size values (needed only for sizes no tensor extent reveals).
    pub sizes: BTreeMap<String, u64>,
}

impl Args {
    /// Splits a map of named tensors (e.g. read from a safetensors file) into arguments:
    /// a one-element tensor (shape `[]` or `[1]`) whose name is a scalar parameter of `sig`
    /// becomes that scalar, with the tensor's dtype; everything else stays a tensor. This is
    /// how `tilec-run` and foreign candidates pass scalars in the same file as tensors.
    pub fn from_tensor_map<'m>(sig: impl Into<Signature<'m>>, tensors: TensorMap) -> Args {
        let meta: Signature<'_> = sig.into();
        let mut args = Args::default();
        for (name, t) in tensors {
            let is_scalar_param = meta.params.iter().any(|p| p.name == name && p.shape.is_empty());
            let scalar = (is_scalar_param && t.numel() == 1 && t.check().is_ok() && t.shape.len() <= 1)
                .then(|| {
                    let b = &t.bytes;
                    match t.dtype {
                        DType::F32 => Scalar::F32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                        DType::I32 => Scalar::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                        DType::F16 => Scalar::F16(f16::from_le_bytes([b[0], b[1]])),
                        DType::Bf16 => Scalar::Bf16(bf16::from_le_bytes([b[0], b[1]])),
                    }
                });
            match scalar {
                Some(v) => {
                    args.scalars.insert(name, v);
                }
                None => {
                    args.tensors.insert(name, t);
                }
            }
        }
        args
    }
}

/// The lower-case word for a role in messages.
fn role_word(r: Role) -> &'static str {
    match r {
        Role::Input => "input",
        Role::Output => "output",
        Role::Inout => "inout",
    }
}

/// `expr = value`, or just the value when the expression is that number.
fn extent_text(expr: &str, value: i64) -> String {
    if expr.trim() == value.to_string() {
        value.to_string()
    } else {
        format!("{expr} = {value}")
    }
}

/// A tensor parameter after binding.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundTensor<'a> {
    /// Parameter name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Role from the signature.
    pub role: Role,
    /// Concrete shape (the signature's expressions evaluated).
    pub shape: Vec<usize>,
    /// The supplied contents; `None` for an output the caller did not supply (zero-filled).
    pub data: Option<&'a HostTensor>,
}

/// One kernel argument after binding, in PTX parameter order.
#[derive(Debug, Clone, PartialEq)]
pub enum BoundArg<'a> {
    /// A tensor, passed as a device pointer.
    Tensor(BoundTensor<'a>),
    /// A scalar, passed by value.
    Scalar {
        /// Parameter name.
        name: String,
        /// Value.
        value: Scalar,
    },
}

/// The result of binding: everything a launch needs, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding<'a> {
    /// Every size with a value, by name.
    pub sizes: BTreeMap<String, u64>,
    /// Grid (x, y, z) in CTAs.
    pub grid: [u32; 3],
    /// Threads per CTA (x, y, z); the metadata gives a 1-D block.
    pub block: [u32; 3],
    /// Dynamic shared memory per CTA in bytes.
    pub dynamic_smem_bytes: u32,
    /// Arguments in PTX parameter order.
    pub args: Vec<BoundArg<'a>>,
}

/// Why a set of arguments does not fit a kernel's signature. Every variant names the
/// parameter (or size) and, where it applies, the expected and the found value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BindError {
    /// A supplied tensor, scalar or size the signature does not have.
    #[error("`{kernel}` has no {kind} `{name}` (its {kind}s: {known})")]
    Unknown {
        /// Kernel name.
        kernel: String,
        /// `tensor parameter`, `scalar parameter` or `size`.
        kind: &'static str,
        /// The supplied name.
        name: String,
        /// The names the signature does have, comma-separated.
        known: String,
    },
    /// A required parameter was not supplied.
    #[error("missing {} parameter `{param}`: expected {expected}", role_word(*role))]
    Missing {
        /// Parameter name.
        param: String,
        /// Its role.
        role: Role,
        /// What it should be, e.g. `bf16 tensor [B, T, H, K]`.
        expected: String,
    },
    /// A tensor supplied for a scalar parameter or the reverse.
    #[error("parameter `{param}`: expected a {expected}, found a {found}")]
    WrongKind {
        /// Parameter name.
        param: String,
        /// `tensor` or `scalar`.
        expected: &'static str,
        /// `tensor` or `scalar`.
        found: &'static str,
    },
    /// Wrong element type.
    #[error("parameter `{param}`: expected dtype {expected:?}, found {found:?}")]
    WrongDtype {
        /// Parameter name.
        param: String,
        /// Dtype in the signature.
        expected: DType,
        /// Dtype supplied.
        found: DType,
    },
    /// Wrong number of dimensions.
    #[error("parameter `{param}`: expected rank {expected} ({shape}), found rank {found} {found_shape:?}")]
    WrongRank {
        /// Parameter name.
        param: String,
        /// Rank in the signature.
        expected: usize,
        /// The signature's shape, e.g. `[B, T, H, K]`.
        shape: String,
        /// Rank supplied.
        found: usize,
        /// Shape supplied.
        found_shape: Vec<usize>,
    },
    /// Two sources give a size different values.
    #[error("size `{size}` is inconsistent: {first} gives {first_value}, but {second} gives {second_value}")]
    InconsistentSize {
        /// Size name.
        size: String,
        /// Where the first value came from, e.g. ``parameter `q` dim 1``.
        first: String,
        /// The first value.
        first_value: u64,
        /// Where the conflicting value came from.
        second: String,
        /// The conflicting value.
        second_value: u64,
    },
    /// A dimension written as an expression does not match the supplied extent.
    #[error("parameter `{param}` dim {dim}: expected {}, found {found}", extent_text(expr, *expected))]
    WrongExtent {
        /// Parameter name.
        param: String,
        /// Dimension index.
        dim: usize,
        /// The dimension's expression.
        expr: String,
        /// Its value.
        expected: i64,
        /// The supplied extent.
        found: usize,
    },
    /// A product dimension `X * S` whose extent is not a multiple of its known factor X.
    #[error("parameter `{param}` dim {dim} (`{expr}`): {found} is not a positive multiple of {factor}")]
    NotMultiple {
        /// Parameter name.
        param: String,
        /// Dimension index.
        dim: usize,
        /// The dimension's expression.
        expr: String,
        /// The supplied extent.
        found: usize,
        /// The known factor's value.
        factor: i64,
    },
    /// No tensor extent, scalar or explicit value determines a size that is needed.
    #[error("size `{size}` (used by {used_by}) cannot be inferred from the arguments; give it explicitly with `--size {size}=<n>`")]
    UnresolvedSize {
        /// Size name.
        size: String,
        /// Where it is used.
        used_by: String,
    },
    /// A size lies outside the kernel's declared shape envelope.
    #[error("size `{size}` = {value} is outside the kernel's envelope ({bound})")]
    OutsideEnvelope {
        /// Size name.
        size: String,
        /// Its value.
        value: u64,
        /// The bound, e.g. `64 <= T <= 65536, multiple of 64`.
        bound: String,
    },
    /// A computed extent or grid dimension is out of range (negative, zero grid, too large).
    #[error("{what} = `{expr}` evaluates to {value}{given}, outside {range}")]
    OutOfRange {
        /// What was computed, e.g. `launch.grid[1]` or ``parameter `h` dim 2``.
        what: String,
        /// The expression.
        expr: String,
        /// Its value.
        value: i64,
        /// The sizes it was computed from, e.g. ` with T = 0` (empty for a bare size, which
        /// names itself).
        given: String,
        /// The legal range.
        range: String,
    },
    /// A supplied tensor's bytes do not match its own shape.
    #[error("parameter `{param}`: {source}")]
    BadTensor {
        /// Parameter name.
        param: String,
        /// The inconsistency.
        source: TensorError,
    },
    /// A tensor's byte count does not fit the address space (its element count times the
    /// element size overflows, or exceeds [`MAX_TENSOR_BYTES`]).
    #[error("parameter `{param}`: shape {shape:?} of {dtype:?} is too large ({why}); refused before any allocation")]
    TooLarge {
        /// Parameter name.
        param: String,
        /// The computed shape.
        shape: Vec<usize>,
        /// Its element type.
        dtype: DType,
        /// Overflow, or the byte count against the limit.
        why: String,
    },
    /// An expression failed to evaluate (unvalidated metadata, overflow, division by zero).
    #[error("{context}: {source}")]
    Expr {
        /// Which field.
        context: String,
        /// The failure.
        source: ExprError,
    },
}

/// Largest tensor the binder accepts, in bytes: 1 TiB, above any GPU's memory (an H200 has
/// 141 GB) and far below where `usize` arithmetic could wrap.
pub const MAX_TENSOR_BYTES: u64 = 1 << 40;

fn shape_text(shape: &[String]) -> String {
    format!("[{}]", shape.join(", "))
}

fn parse(context: impl Fn() -> String, text: &str) -> Result<SizeExpr, BindError> {
    SizeExpr::parse(text).map_err(|source| BindError::Expr { context: context(), source })
}

/// Known size values with where each came from (for error messages).
struct SizeTable(BTreeMap<String, (u64, String)>);

impl SizeTable {
    fn record(&mut self, size: &str, value: u64, source: String) -> Result<(), BindError> {
        match self.0.get(size) {
            Some((v, first)) if *v != value => Err(BindError::InconsistentSize {
                size: size.to_string(),
                first: first.clone(),
                first_value: *v,
                second: source,
                second_value: value,
            }),
            Some(_) => Ok(()),
            None => {
                self.0.insert(size.to_string(), (value, source));
                Ok(())
            }
        }
    }

    fn env(&self) -> BTreeMap<String, i64> {
        // Sizes come from usize extents or u64 given values; anything beyond i64 saturates and
        // later fails the range checks rather than wrapping.
        self.0.iter().map(|(k, (v, _))| (k.clone(), i64::try_from(*v).unwrap_or(i64::MAX))).collect()
    }
}

/// Binds `args` to the signature `sig` — a [`crate::meta::KernelMeta`] or a [`Signature`] —
/// (see the module docs for the rules).
///
/// Metadata should have passed [`crate::meta::KernelMeta::validate`]; if it has not, a
/// malformed expression is reported as [`BindError::Expr`] rather than a panic.
///
/// # Errors
/// Any [`BindError`]; checks run in a fixed order (unknown names, then each parameter in
/// signature order, then sizes, extents and grid), so the same mistake always gives the same
/// error.
pub fn bind<'a, 'm>(sig: impl Into<Signature<'m>>, args: &'a Args) -> Result<Binding<'a>, BindError> {
    let meta: &Signature<'_> = &sig.into();
    check_unknown_names(meta, args)?;
    let mut sizes = SizeTable(BTreeMap::new());
    for (name, &v) in &args.sizes {
        sizes.record(name, v, format!("the explicit value of `{name}`"))?;
    }

    // Pass 1: kinds, dtypes, ranks, and sizes from bare-name dimensions and size scalars.
    for p in meta.params {
        let expected_desc = if p.shape.is_empty() {
            format!("{:?} scalar", p.dtype).to_lowercase()
        } else {
            format!("{} tensor {}", format!("{:?}", p.dtype).to_lowercase(), shape_text(&p.shape))
        };
        if p.shape.is_empty() {
            if args.tensors.contains_key(&p.name) {
                return Err(BindError::WrongKind { param: p.name.clone(), expected: "scalar", found: "tensor" });
            }
            match args.scalars.get(&p.name) {
                Some(s) if s.dtype() != p.dtype => {
                    return Err(BindError::WrongDtype { param: p.name.clone(), expected: p.dtype, found: s.dtype() })
                }
                Some(&Scalar::I32(v)) if meta.sizes.contains(&p.name) => {
                    let v = u64::try_from(v).map_err(|_| BindError::OutOfRange {
                        what: format!("scalar `{}`", p.name),
                        expr: p.name.clone(),
                        value: i64::from(v),
                        given: String::new(),
                        range: "0.. (it is a size)".into(),
                    })?;
                    sizes.record(&p.name, v, format!("scalar `{}`", p.name))?;
                }
                Some(_) => {}
                None if p.dtype == DType::I32 && meta.sizes.contains(&p.name) => {} // filled below
                None => return Err(BindError::Missing { param: p.name.clone(), role: p.role, expected: expected_desc }),
            }
            continue;
        }
        if args.scalars.contains_key(&p.name) {
            return Err(BindError::WrongKind { param: p.name.clone(), expected: "tensor", found: "scalar" });
        }
        let Some(t) = args.tensors.get(&p.name) else {
            if p.role == Role::Output || meta.optional.contains(&p.name) {
                continue;
            }
            return Err(BindError::Missing { param: p.name.clone(), role: p.role, expected: expected_desc });
        };
        t.check().map_err(|source| BindError::BadTensor { param: p.name.clone(), source })?;
        if t.dtype != p.dtype {
            return Err(BindError::WrongDtype { param: p.name.clone(), expected: p.dtype, found: t.dtype });
        }
        if t.shape.len() != p.shape.len() {
            return Err(BindError::WrongRank {
                param: p.name.clone(),
                expected: p.shape.len(),
                shape: shape_text(&p.shape),
                found: t.shape.len(),
                found_shape: t.shape.clone(),
            });
        }
        for (d, text) in p.shape.iter().enumerate() {
            let e = parse(|| format!("parameter `{}` shape[{d}]", p.name), text)?;
            if let Some(s) = e.as_symbol() {
                sizes.record(s, t.shape[d] as u64, format!("parameter `{}` dim {d}", p.name))?;
            }
        }
    }

    // Pass 1b: unknown factors of product dimensions (GVA's `H * G`).
    factors::solve(meta, args, &mut sizes)?;

    resolve_and_check_sizes(meta, &sizes)?;
    let env = sizes.env();

    // Pass 2: evaluate every extent, check supplied tensors against it, build the arguments.
    let mut bound = Vec::with_capacity(meta.params.len());
    for p in meta.params {
        if p.shape.is_empty() {
            let value = match args.scalars.get(&p.name) {
                Some(s) => *s,
                None => {
                    let v = env.get(&p.name).copied().unwrap_or(0);
                    Scalar::I32(i32::try_from(v).map_err(|_| BindError::OutOfRange {
                        what: format!("size scalar `{}`", p.name),
                        expr: p.name.clone(),
                        value: v,
                        given: String::new(),
                        range: "0..=2147483647 (passed as i32)".into(),
                    })?)
                }
            };
            bound.push(BoundArg::Scalar { name: p.name.clone(), value });
            continue;
        }
        let mut shape = Vec::with_capacity(p.shape.len());
        for (d, text) in p.shape.iter().enumerate() {
            let what = || format!("parameter `{}` dim {d}", p.name);
            let v = parse(what, text)?.eval(&env).map_err(|source| BindError::Expr { context: what(), source })?;
            let extent = usize::try_from(v).map_err(|_| BindError::OutOfRange {
                what: what(),
                expr: text.clone(),
                value: v,
                given: String::new(),
                range: "0..".into(),
            })?;
            shape.push(extent);
        }
        // The launcher allocates `numel · size` bytes per tensor: compute it with checks here, so
        // that metadata cannot make the count wrap (a [1000, 2^61] output wrapped to 1 byte and
        // the kernel wrote out of bounds).
        let too_large = |why: String| BindError::TooLarge { param: p.name.clone(), shape: shape.clone(), dtype: p.dtype, why };
        let bytes = crate::tensor::numel(&shape).ok().and_then(|n| n.checked_mul(p.dtype.size_bytes())).ok_or_else(|| too_large("the byte count overflows".into()))?;
        if bytes as u64 > MAX_TENSOR_BYTES {
            return Err(too_large(format!("{bytes} bytes, the limit is {MAX_TENSOR_BYTES}")));
        }
        let data = args.tensors.get(&p.name);
        if let Some(t) = data {
            for (d, (&want, &got)) in shape.iter().zip(&t.shape).enumerate() {
                if want != got {
                    return Err(BindError::WrongExtent {
                        param: p.name.clone(),
                        dim: d,
                        expr: p.shape[d].clone(),
                        expected: want as i64,
                        found: got,
                    });
                }
            }
        }
        bound.push(BoundArg::Tensor(BoundTensor { name: p.name.clone(), dtype: p.dtype, role: p.role, shape, data }));
    }

    let mut grid = [1u32; 3];
    for (axis, text) in meta.grid.iter().enumerate() {
        let what = || format!("launch.grid[{axis}]");
        let e = parse(what, text)?;
        let v = e.eval(&env).map_err(|source| BindError::Expr { context: what(), source })?;
        if !(1..=MAX_GRID[axis]).contains(&v) {
            // `cdiv(T, 64)` is 0: say which size made it so (T = 0), not only the grid.
            let given = if e.as_symbol().is_some() { vec![] } else { e.symbols().into_iter().filter_map(|n| env.get(&n).map(|x| format!("{n} = {x}"))).collect() };
            return Err(BindError::OutOfRange {
                what: what(),
                expr: text.clone(),
                value: v,
                given: if given.is_empty() { String::new() } else { format!(" with {}", given.join(", ")) },
                range: format!("1..={}", MAX_GRID[axis]),
            });
        }
        grid[axis] = v as u32; // in range by the check above
    }

    Ok(Binding {
        sizes: sizes.0.iter().map(|(k, (v, _))| (k.clone(), *v)).collect(),
        grid,
        block: [meta.block_threads, 1, 1],
        dynamic_smem_bytes: meta.dynamic_smem_bytes,
        args: bound,
    })
}

fn check_unknown_names(meta: &Signature<'_>, args: &Args) -> Result<(), BindError> {
    let unknown = |kind, name: &str, known: Vec<&str>| BindError::Unknown {
        kernel: meta.kernel.to_string(),
        kind,
        name: name.to_string(),
        known: if known.is_empty() { "none".into() } else { known.join(", ") },
    };
    let tensors: Vec<&str> = meta.params.iter().filter(|p| !p.shape.is_empty()).map(|p| p.name.as_str()).collect();
    let scalars: Vec<&str> = meta.params.iter().filter(|p| p.shape.is_empty()).map(|p| p.name.as_str()).collect();
    // A name that is a parameter of the other kind is a WrongKind error, reported in pass 1.
    for name in args.tensors.keys() {
        if meta.param_index(name).is_none() {
            return Err(unknown("tensor parameter", name, tensors));
        }
    }
    for name in args.scalars.keys() {
        if meta.param_index(name).is_none() {
            return Err(unknown("scalar parameter", name, scalars));
        }
    }
    for name in args.sizes.keys() {
        if !meta.sizes.contains(name) {
            return Err(unknown("size", name, meta.sizes.iter().map(String::as_str).collect()));
        }
    }
    Ok(())
}

/// Every size a shape or the grid uses must have a value, and every value must lie inside
/// the contract's envelope.
fn resolve_and_check_sizes(meta: &Signature<'_>, sizes: &SizeTable) -> Result<(), BindError> {
    let mut uses: Vec<(String, String)> = Vec::new();
    for p in meta.params {
        for (d, text) in p.shape.iter().enumerate() {
            uses.push((format!("parameter `{}` dim {d}", p.name), text.clone()));
        }
    }
    for (axis, text) in meta.grid.iter().enumerate() {
        uses.push((format!("launch.grid[{axis}]"), text.clone()));
    }
    for (used_by, text) in &uses {
        let e = parse(|| used_by.clone(), text)?;
        if let Some(s) = e.symbols().into_iter().find(|s| !sizes.0.contains_key(s)) {
            return Err(BindError::UnresolvedSize { size: s, used_by: format!("{used_by} = `{text}`") });
        }
    }
    for b in meta.envelope {
        if let Some((v, _)) = sizes.0.get(&b.size) {
            if !b.admits(*v) {
                let mut bound = format!("{} <= {}", b.min, b.size);
                if let Some(m) = b.max {
                    bound.push_str(&format!(" <= {m}"));
                }
                if b.multiple_of > 1 {
                    bound.push_str(&format!(", multiple of {}", b.multiple_of));
                }
                return Err(BindError::OutsideEnvelope { size: b.size.clone(), value: *v, bound });
            }
        }
    }
    Ok(())
}

impl Binding<'_> {
    /// The tensor arguments whose role is `output` or `inout`, in parameter order.
    pub fn outputs(&self) -> impl Iterator<Item = &BoundTensor<'_>> {
        self.args.iter().filter_map(|a| match a {
            BoundArg::Tensor(t) if t.role != Role::Input => Some(t),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests;
