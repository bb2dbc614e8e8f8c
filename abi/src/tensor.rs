//! Host tensors: dense, row-major, little-endian element bytes plus a dtype and a shape.
//!
//! This is the exchange format between safetensors files, the argument binder and the
//! device copies. Conversions from wider types round once to nearest, ties to even — the
//! rounding the GPU's `cvt.rn` instructions apply — through [`crate::round`], so a tensor built
//! here from f32 or f64 data holds exactly the values a kernel storing the same numbers would
//! hold.

use half::{bf16, f16};
use thiserror::Error;

use crate::meta::DType;
use crate::round::{f32_to_bf16, f32_to_f16, f64_to_bf16, f64_to_f16};

/// Errors from building or converting host tensors.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TensorError {
    /// The byte or value count does not match the shape.
    #[error("tensor of shape {shape:?} and dtype {dtype:?} needs {expected} {unit}, found {found}")]
    SizeMismatch {
        /// The shape.
        shape: Vec<usize>,
        /// The dtype.
        dtype: DType,
        /// Required count.
        expected: usize,
        /// Given count.
        found: usize,
        /// `bytes` or `values`.
        unit: &'static str,
    },
    /// The element count overflows `usize`.
    #[error("tensor shape {shape:?} has too many elements")]
    TooLarge {
        /// The shape.
        shape: Vec<usize>,
    },
    /// A value cannot be stored as i32 (not an integer, or out of range).
    #[error("value {value} at flat index {index} is not representable as i32")]
    NotAnInteger {
        /// The value.
        value: f64,
        /// Its flat (row-major) index.
        index: usize,
    },
}

/// A dense row-major host tensor. `bytes` holds `shape.iter().product()` elements of `dtype`,
/// little-endian. A rank-0 tensor (empty shape) holds one element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Extents, outermost first.
    pub shape: Vec<usize>,
    /// Element bytes, little-endian, row-major.
    pub bytes: Vec<u8>,
}

/// Number of elements of `shape`, or an error if it overflows.
pub fn numel(shape: &[usize]) -> Result<usize, TensorError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| TensorError::TooLarge { shape: shape.to_vec() })
}

impl HostTensor {
    /// Wraps existing bytes, checking their length against `dtype` and `shape`.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] or [`TensorError::TooLarge`].
    pub fn new(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Result<HostTensor, TensorError> {
        let t = HostTensor { dtype, shape, bytes };
        t.check()?;
        Ok(t)
    }

    /// Checks that `bytes` matches `dtype` and `shape` (the fields are public, so a tensor
    /// built by hand may be inconsistent).
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] or [`TensorError::TooLarge`].
    pub fn check(&self) -> Result<(), TensorError> {
        let n = numel(&self.shape)?;
        let expected =
            n.checked_mul(self.dtype.size_bytes()).ok_or_else(|| TensorError::TooLarge { shape: self.shape.clone() })?;
        if self.bytes.len() != expected {
            return Err(TensorError::SizeMismatch {
                shape: self.shape.clone(),
                dtype: self.dtype,
                expected,
                found: self.bytes.len(),
                unit: "bytes",
            });
        }
        Ok(())
    }

    /// A tensor of zeros (all-zero bytes are +0.0 / 0 in every supported dtype).
    ///
    /// # Errors
    /// [`TensorError::TooLarge`].
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<HostTensor, TensorError> {
        let n = numel(&shape)?;
        let len = n.checked_mul(dtype.size_bytes()).ok_or_else(|| TensorError::TooLarge { shape: shape.clone() })?;
        Ok(HostTensor { dtype, shape, bytes: vec![0; len] })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes()
    }

    fn check_count(dtype: DType, shape: &[usize], found: usize) -> Result<(), TensorError> {
        let expected = numel(shape)?;
        if expected != found {
            return Err(TensorError::SizeMismatch { shape: shape.to_vec(), dtype, expected, found, unit: "values" });
        }
        Ok(())
    }

    /// Builds a tensor of `dtype` from f32 values, rounding to nearest even when narrowing.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`] if `values.len()` differs from the shape's element count;
    /// [`TensorError::NotAnInteger`] for `DType::I32` and a non-integral or out-of-range value.
    pub fn from_f32(dtype: DType, shape: Vec<usize>, values: &[f32]) -> Result<HostTensor, TensorError> {
        Self::check_count(dtype, &shape, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for (index, &v) in values.iter().enumerate() {
            match dtype {
                DType::F32 => bytes.extend_from_slice(&v.to_le_bytes()),
                DType::Bf16 => bytes.extend_from_slice(&f32_to_bf16(v).to_le_bytes()),
                DType::F16 => bytes.extend_from_slice(&f32_to_f16(v).to_le_bytes()),
                DType::I32 => bytes.extend_from_slice(&to_i32(f64::from(v), index)?.to_le_bytes()),
            }
        }
        Ok(HostTensor { dtype, shape, bytes })
    }

    /// Builds a tensor of `dtype` from f64 values with one correct rounding to nearest even.
    ///
    /// # Errors
    /// As [`HostTensor::from_f32`].
    pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<HostTensor, TensorError> {
        Self::check_count(dtype, &shape, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * dtype.size_bytes());
        for (index, &v) in values.iter().enumerate() {
            match dtype {
                DType::F32 => bytes.extend_from_slice(&(v as f32).to_le_bytes()),
                DType::Bf16 => bytes.extend_from_slice(&f64_to_bf16(v).to_le_bytes()),
                DType::F16 => bytes.extend_from_slice(&f64_to_f16(v).to_le_bytes()),
                DType::I32 => bytes.extend_from_slice(&to_i32(v, index)?.to_le_bytes()),
            }
        }
        Ok(HostTensor { dtype, shape, bytes })
    }

    /// Builds an i32 tensor.
    ///
    /// # Errors
    /// [`TensorError::SizeMismatch`].
    pub fn from_i32(shape: Vec<usize>, values: &[i32]) -> Result<HostTensor, TensorError> {
        Self::check_count(DType::I32, &shape, values.len())?;
        Ok(HostTensor { dtype: DType::I32, shape, bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect() })
    }

    /// The elements as f64 (exact for every supported dtype).
    pub fn to_f64(&self) -> Vec<f64> {
        let w = self.dtype.size_bytes();
        self.bytes
            .chunks_exact(w)
            .map(|c| match self.dtype {
                DType::F32 => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                DType::I32 => f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                DType::Bf16 => f64::from(bf16::from_le_bytes([c[0], c[1]])),
                DType::F16 => f64::from(f16::from_le_bytes([c[0], c[1]])),
            })
            .collect()
    }

    /// The elements as f32 (exact for the float dtypes; i32 beyond 2^24 rounds to nearest even).
    pub fn to_f32(&self) -> Vec<f32> {
        let w = self.dtype.size_bytes();
        self.bytes
            .chunks_exact(w)
            .map(|c| match self.dtype {
                DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32,
                DType::Bf16 => f32::from(bf16::from_le_bytes([c[0], c[1]])),
                DType::F16 => f32::from(f16::from_le_bytes([c[0], c[1]])),
            })
            .collect()
    }
}

/// Converts an f64 holding an integer to i32, or says which element is not one.
fn to_i32(v: f64, index: usize) -> Result<i32, TensorError> {
    if v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX) {
        Ok(v as i32)
    } else {
        Err(TensorError::NotAnInteger { value: v, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_length() {
        assert!(HostTensor::new(DType::F32, vec![2, 3], vec![0; 24]).is_ok());
        let e = HostTensor::new(DType::Bf16, vec![2, 3], vec![0; 24]).unwrap_err();
        assert_eq!(e, TensorError::SizeMismatch { shape: vec![2, 3], dtype: DType::Bf16, expected: 12, found: 24, unit: "bytes" });
        assert!(matches!(HostTensor::zeros(DType::F32, vec![usize::MAX, 2]), Err(TensorError::TooLarge { .. })));
        let scalar = HostTensor::zeros(DType::I32, vec![]).unwrap();
        assert_eq!(scalar.numel(), 1);
    }

    #[test]
    fn f32_round_trip_per_dtype() {
        let vals = [0.0f32, -1.5, 3.25, 1e-3, 65504.0];
        for dt in [DType::F32, DType::Bf16, DType::F16] {
            let t = HostTensor::from_f32(dt, vec![5], &vals).unwrap();
            assert_eq!(t.bytes.len(), 5 * dt.size_bytes());
            let back = t.to_f32();
            // 0, -1.5, 3.25 are exact in every format.
            assert_eq!(&back[..3], &vals[..3]);
        }
        let t = HostTensor::from_f32(DType::Bf16, vec![5], &vals).unwrap();
        assert_eq!(t.to_f32()[3], 131.0 / 128.0 / 1024.0); // nearest bf16 to 1e-3: 1.024 * 2^-10 -> 131/128 * 2^-10
        assert_eq!(t.to_f32()[4], 65536.0);
        let i = HostTensor::from_f32(DType::I32, vec![2], &[7.0, -3.0]).unwrap();
        assert_eq!(i.bytes, [7, 0, 0, 0, 0xfd, 0xff, 0xff, 0xff]);
        assert_eq!(i.to_f64(), vec![7.0, -3.0]);
        assert!(matches!(
            HostTensor::from_f32(DType::I32, vec![2], &[1.0, 0.5]),
            Err(TensorError::NotAnInteger { index: 1, .. })
        ));
        assert!(matches!(HostTensor::from_f32(DType::F32, vec![3], &[1.0]), Err(TensorError::SizeMismatch { .. })));
    }

    #[test]
    fn bf16_ties_round_to_even() {
        // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties to even gives 1.0.
        let t = HostTensor::from_f32(DType::Bf16, vec![2], &[1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)]).unwrap();
        assert_eq!(t.to_f32(), vec![1.0, 1.0 + 2f32.powi(-6)]);
    }

    #[test]
    fn from_f64_rounds_once() {
        // The review's example: one correct rounding gives 1 + 2^-7, double rounding 1.0.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        let t = HostTensor::from_f64(DType::Bf16, vec![1], &[x]).unwrap();
        assert_eq!(t.to_f64(), vec![1.0078125]);
        let t = HostTensor::from_f64(DType::F16, vec![1], &[1.0 + 2f64.powi(-11) + 2f64.powi(-45)]).unwrap();
        assert_eq!(t.to_f64(), vec![1.0 + 2f64.powi(-10)]);
    }
}
