//! Run-time values of the interpreter: scalars and 2-D register tiles.
//!
//! Every element is an [`S`]: floats are kept as `f32` holding a value exactly representable in
//! the value's element type (a bf16 tile holds bf16 values widened to f32), integers as `i64`
//! inside the i32 range, predicates as `bool`. Conversions into a 16-bit float type round to
//! nearest, ties to even (the `cvt.rn` rounding of the GPU), through the `half` crate.

use tilec_abi::round::{f32_to_bf16, f32_to_f16};

use super::error::ExecError;
use crate::ir::{Elem, Type};

/// One element.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum S {
    /// A float of element type f32, f16 or bf16 (exactly representable in it).
    F(f32),
    /// An i32, widened so that arithmetic can be checked before narrowing.
    I(i64),
    /// A predicate.
    B(bool),
}

/// Rounds an f32 to `elem` (round to nearest even for bf16/f16; identity for f32).
#[inline]
pub fn round_to(elem: Elem, x: f32) -> f32 {
    match elem {
        Elem::Bf16 => f32_to_bf16(x).to_f32(),
        Elem::F16 => f32_to_f16(x).to_f32(),
        _ => x,
    }
}

/// Narrows a checked i64 result to i32.
#[inline]
pub fn fit_i32(x: i64) -> Result<i64, ExecError> {
    if i32::try_from(x).is_ok() {
        Ok(x)
    } else {
        Err(ExecError::IntegerOverflow(x.to_string()))
    }
}

impl S {
    /// Converts to `to`: floats round to nearest even; floats to i32 truncate toward zero (the
    /// GPU's `cvt.rzi`) and fail on NaN or out-of-range values; predicates become 0/1;
    /// numbers become predicates by `!= 0`.
    #[inline]
    pub fn convert(self, to: Elem) -> Result<S, ExecError> {
        Ok(match (self, to) {
            (S::B(b), Elem::Bool) => S::B(b),
            (S::F(x), Elem::Bool) => S::B(x != 0.0),
            (S::I(i), Elem::Bool) => S::B(i != 0),
            (S::B(b), Elem::I32) => S::I(i64::from(b)),
            (S::I(i), Elem::I32) => S::I(fit_i32(i)?),
            (S::F(x), Elem::I32) => {
                let t = x.trunc();
                if !t.is_finite() || t < i32::MIN as f32 || t > i32::MAX as f32 {
                    return Err(ExecError::InvalidCast { value: x });
                }
                S::I(t as i64)
            }
            // 0 and 1 are exact in every float type (not a recursive call: that kept the hot
            // float arm from being inlined).
            (S::B(b), _) => S::F(if b { 1.0 } else { 0.0 }),
            // i64 -> f32 rounds to nearest even; |i| < 2^31 so a second rounding to a 16-bit
            // type is exact except for ties, which cannot arise below 2^24 anyway.
            (S::I(i), e) => S::F(round_to(e, i as f32)),
            (S::F(x), e) => S::F(round_to(e, x)),
        })
    }

    /// The element as an f32 operand of float arithmetic (integers convert, rounding to nearest).
    #[inline]
    pub fn as_f32(self) -> Result<f32, ExecError> {
        match self {
            S::F(x) => Ok(x),
            S::I(i) => Ok(i as f32),
            S::B(_) => Err(ExecError::Malformed("predicate used as a number".into())),
        }
    }

    /// The element as an integer operand.
    #[inline]
    pub fn as_i64(self) -> Result<i64, ExecError> {
        match self {
            S::I(i) => Ok(i),
            S::F(_) => Err(ExecError::Malformed("float used where an integer is required".into())),
            S::B(_) => Err(ExecError::Malformed("predicate used as an integer".into())),
        }
    }

    /// The element as a predicate.
    #[inline]
    pub fn as_bool(self) -> Result<bool, ExecError> {
        match self {
            S::B(b) => Ok(b),
            _ => Err(ExecError::Malformed("number used as a predicate".into())),
        }
    }

    /// The element as an f64 (exact for every element kind).
    pub fn to_f64(self) -> f64 {
        match self {
            S::F(x) => f64::from(x),
            S::I(i) => i as f64,
            S::B(b) => f64::from(u8::from(b)),
        }
    }
}

/// A scalar or a tile; `shape` is `None` for scalars, which hold one element.
#[derive(Clone, Debug, PartialEq)]
pub struct Val {
    /// Element type.
    pub elem: Elem,
    /// `(rows, cols)` of a tile.
    pub shape: Option<(usize, usize)>,
    /// Row-major elements.
    pub data: Vec<S>,
}

impl Val {
    /// A scalar.
    pub fn scalar(elem: Elem, s: S) -> Val {
        Val { elem, shape: None, data: vec![s] }
    }

    /// A value of type `ty` whose element at `(r, c)` is `f(r, c)` (called once for scalars,
    /// with `(0, 0)`).
    pub fn build(ty: Type, mut f: impl FnMut(usize, usize) -> Result<S, ExecError>) -> Result<Val, ExecError> {
        let shape = ty.shape().map(|(r, c)| (r as usize, c as usize));
        let (rows, cols) = shape.unwrap_or((1, 1));
        let mut data = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                data.push(f(r, c)?);
            }
        }
        Ok(Val { elem: ty.elem(), shape, data })
    }

    /// The IR type of this value.
    pub fn ty(&self) -> Type {
        match self.shape {
            None => Type::Scalar(self.elem),
            Some((r, c)) => Type::tile(self.elem, r as u32, c as u32),
        }
    }

    /// `(rows, cols)`, with scalars as `1 x 1`.
    pub fn dims(&self) -> (usize, usize) {
        self.shape.unwrap_or((1, 1))
    }

    /// The element seen at `(r, c)` of a result of shape `to` under NumPy broadcasting:
    /// scalars and extent-1 dimensions repeat.
    ///
    /// # Errors
    /// [`ExecError::Malformed`] if this value does not broadcast to `to`.
    pub fn broadcaster(&self, to: (usize, usize)) -> Result<impl Fn(usize, usize) -> S + '_, ExecError> {
        let (rows, cols) = self.dims();
        if (rows != to.0 && rows != 1) || (cols != to.1 && cols != 1) {
            return Err(ExecError::Malformed(format!("{} does not broadcast to [{}, {}]", self.ty(), to.0, to.1)));
        }
        Ok(move |r: usize, c: usize| {
            let r = if rows == 1 { 0 } else { r };
            let c = if cols == 1 { 0 } else { c };
            self.data[r * cols + c]
        })
    }

    /// The only element of a scalar (or of a 1 x 1 tile).
    pub fn as_scalar(&self) -> Result<S, ExecError> {
        match self.data.as_slice() {
            [s] => Ok(*s),
            _ => Err(ExecError::Malformed(format!("{} used as a scalar", self.ty()))),
        }
    }

    /// Converts every element to `elem` (see [`S::convert`]).
    pub fn convert(&self, elem: Elem) -> Result<Val, ExecError> {
        let data = self.data.iter().map(|s| s.convert(elem)).collect::<Result<Vec<_>, _>>()?;
        Ok(Val { elem, shape: self.shape, data })
    }

    /// The elements as f32, row-major (for MMA operands).
    pub fn f32s(&self) -> Result<Vec<f32>, ExecError> {
        self.data.iter().map(|s| s.as_f32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_nearest_even() {
        // 1 + 2^-8 is the tie between bf16 1.0 and 1 + 2^-7: even wins.
        assert_eq!(round_to(Elem::Bf16, 1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(round_to(Elem::Bf16, 1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert_eq!(round_to(Elem::F16, 1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(round_to(Elem::F32, 0.1), 0.1);
    }

    #[test]
    fn conversions() {
        assert_eq!(S::F(-2.7).convert(Elem::I32), Ok(S::I(-2)));
        assert!(matches!(S::F(f32::NAN).convert(Elem::I32), Err(ExecError::InvalidCast { .. })));
        assert!(matches!(S::F(3e9).convert(Elem::I32), Err(ExecError::InvalidCast { .. })));
        assert_eq!(S::B(true).convert(Elem::Bf16), Ok(S::F(1.0)));
        assert_eq!(S::I(3).convert(Elem::Bool), Ok(S::B(true)));
        assert!(matches!(S::I(1 << 40).convert(Elem::I32), Err(ExecError::IntegerOverflow(_))));
    }

    #[test]
    fn broadcasting() {
        let row = Val { elem: Elem::F32, shape: Some((1, 3)), data: vec![S::F(1.0), S::F(2.0), S::F(3.0)] };
        let at = row.broadcaster((2, 3)).unwrap();
        assert_eq!(at(1, 2), S::F(3.0));
        assert!(row.broadcaster((2, 4)).is_err());
        let s = Val::scalar(Elem::I32, S::I(7));
        assert_eq!(s.broadcaster((5, 5)).unwrap()(4, 4), S::I(7));
    }
}
