//! Dense row-major tensors as exchanged between the verifier, references and candidates.
//!
//! Storage sits behind an `Arc` so that the harness can detect an output that *aliases* an
//! input (same allocation) and so that an in-process candidate handed `&mut [Tensor]` can
//! mutate its inputs the way a kernel with writable pointers could (`Arc::make_mut`).

use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tilec_abi::hash::Fnv1a;
use tilec_abi::round::{f64_to_bf16, f64_to_f16};

/// Element type of a tensor: the float formats, and the integer formats of index outputs
/// (argmax / argmin, `Op::index_output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// TensorFloat-32 (fp32 storage, 10-bit mantissa in the multiplier); only a precision label.
    Tf32,
    /// bfloat16.
    Bf16,
    /// IEEE binary16.
    F16,
    /// 32-bit signed integer (index outputs).
    I32,
    /// 64-bit signed integer (index outputs; PyTorch's argmax dtype).
    I64,
}

impl DType {
    /// Unit roundoff u = 2^-p (p = significand bits including the implicit one).
    /// Source: Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Table 2.1.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F64 => 2f64.powi(-53),
            DType::F32 => 2f64.powi(-24),
            DType::Tf32 | DType::F16 => 2f64.powi(-11),
            DType::Bf16 => 2f64.powi(-8),
            DType::I32 | DType::I64 => 0.0,
        }
    }

    /// Smallest positive subnormal of the format (for the underflow term of the error model).
    pub fn min_subnormal(self) -> f64 {
        match self {
            DType::F64 => 2f64.powi(-1074),
            DType::F32 | DType::Tf32 => 2f64.powi(-149),
            DType::Bf16 => 2f64.powi(-133),
            DType::F16 => 2f64.powi(-24),
            DType::I32 | DType::I64 => 1.0,
        }
    }

    /// Smallest positive normal number of the format.
    pub fn min_normal(self) -> f64 {
        match self {
            DType::F64 => f64::MIN_POSITIVE,
            DType::F32 | DType::Tf32 | DType::Bf16 => f32::MIN_POSITIVE as f64,
            DType::F16 => 2f64.powi(-14),
            DType::I32 | DType::I64 => 1.0,
        }
    }

    /// Round an f64 to this format (round to nearest even) and back to f64. bf16 and f16 are
    /// one correct rounding ([`tilec_abi::round`]), the same image the runtime and the
    /// interpreter give the value. TF32 is rounded from the f32 value, as the tensor cores
    /// see an f32 operand.
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::F64 => x,
            DType::F32 => x as f32 as f64,
            DType::Tf32 => round_tf32(x as f32) as f64,
            DType::Bf16 => f64_to_bf16(x).to_f64(),
            DType::F16 => f64_to_f16(x).to_f64(),
            DType::I32 if x.is_finite() => x.round_ties_even().clamp(i32::MIN as f64, i32::MAX as f64),
            DType::I64 if x.is_finite() => x.round_ties_even().clamp(i64::MIN as f64, i64::MAX as f64),
            DType::I32 | DType::I64 => x,
        }
    }

    /// Bytes one element of this format occupies in storage (TF32 is stored as f32: 4).
    pub fn bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::Tf32 | DType::I32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    /// True for the integer formats.
    pub fn is_integer(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Lower-case name as used in reports and the external protocol.
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::Tf32 => "tf32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    /// Parse a name produced by [`DType::name`].
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f64" => DType::F64,
            "f32" => DType::F32,
            "tf32" => DType::Tf32,
            "bf16" => DType::Bf16,
            "f16" => DType::F16,
            "i32" => DType::I32,
            "i64" => DType::I64,
            _ => return None,
        })
    }

    /// The storage type a tensor of this precision uses (TF32 is stored as f32).
    pub fn storage(self) -> DType {
        if self == DType::Tf32 {
            DType::F32
        } else {
            self
        }
    }
}

/// Round an f32 to TF32 (10 explicit mantissa bits), round to nearest even, kept in f32.
pub fn round_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let b = x.to_bits();
    let lsb = (b >> 13) & 1;
    let r = b.wrapping_add(0x0fff + lsb) & !0x1fff;
    f32::from_bits(r)
}

/// Where a tensor lives. Only `Cpu` exists in this process; `Cuda` lets a GPU candidate (or a
/// trick) report that it answered on another device, which RES-01 must notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(u32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Element storage.
#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    /// f64 elements.
    F64(Vec<f64>),
    /// f32 elements.
    F32(Vec<f32>),
    /// bf16 elements.
    Bf16(Vec<bf16>),
    /// f16 elements.
    F16(Vec<f16>),
    /// i32 elements (index outputs).
    I32(Vec<i32>),
    /// i64 elements (index outputs).
    I64(Vec<i64>),
}

/// A dense row-major tensor (last index fastest).
#[derive(Debug, Clone)]
pub struct Tensor {
    /// Extent of each axis.
    pub shape: Vec<usize>,
    /// Where the tensor lives.
    pub device: Device,
    /// Shared element storage (see module docs for why it is an `Arc`).
    pub data: Arc<Storage>,
}

impl Tensor {
    /// Build a tensor of `dtype` from f64 values, rounding each value to the format.
    /// `Tf32` is stored as f32 after rounding to TF32.
    pub fn from_f64(shape: Vec<usize>, values: &[f64], dtype: DType) -> Tensor {
        let storage = match dtype {
            DType::F64 => Storage::F64(values.to_vec()),
            DType::F32 => Storage::F32(values.iter().map(|&v| v as f32).collect()),
            DType::Tf32 => Storage::F32(values.iter().map(|&v| round_tf32(v as f32)).collect()),
            DType::Bf16 => Storage::Bf16(values.iter().map(|&v| f64_to_bf16(v)).collect()),
            DType::F16 => Storage::F16(values.iter().map(|&v| f64_to_f16(v)).collect()),
            DType::I32 => Storage::I32(values.iter().map(|&v| DType::I32.round(v) as i32).collect()),
            DType::I64 => Storage::I64(values.iter().map(|&v| DType::I64.round(v) as i64).collect()),
        };
        Tensor { shape, device: Device::Cpu, data: Arc::new(storage) }
    }

    /// An f64 tensor owning `values`.
    pub fn f64(shape: Vec<usize>, values: Vec<f64>) -> Tensor {
        Tensor { shape, device: Device::Cpu, data: Arc::new(Storage::F64(values)) }
    }

    /// An f32 tensor owning `values`.
    pub fn f32(shape: Vec<usize>, values: Vec<f32>) -> Tensor {
        Tensor { shape, device: Device::Cpu, data: Arc::new(Storage::F32(values)) }
    }

    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        match &*self.data {
            Storage::F64(_) => DType::F64,
            Storage::F32(_) => DType::F32,
            Storage::Bf16(_) => DType::Bf16,
            Storage::F16(_) => DType::F16,
            Storage::I32(_) => DType::I32,
            Storage::I64(_) => DType::I64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &*self.data {
            Storage::F64(v) => v.len(),
            Storage::F32(v) => v.len(),
            Storage::Bf16(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::I32(v) => v.len(),
            Storage::I64(v) => v.len(),
        }
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values widened to f64 (exact for every float format, and for integers below 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &*self.data {
            Storage::F64(v) => v.clone(),
            Storage::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Storage::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Storage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Storage::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Storage::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// Borrow f64 elements, if this is an f64 tensor.
    pub fn as_f64(&self) -> Option<&[f64]> {
        match &*self.data {
            Storage::F64(v) => Some(v),
            _ => None,
        }
    }

    /// Borrow f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &*self.data {
            Storage::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Raw little-endian bytes of the elements (for byte-equality and checksums).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match &*self.data {
            Storage::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Storage::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Storage::Bf16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Storage::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Storage::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Storage::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// A deep copy with its own allocation (fairness rule 10: no shared mutable state).
    pub fn deep_copy(&self) -> Tensor {
        Tensor { shape: self.shape.clone(), device: self.device, data: Arc::new((*self.data).clone()) }
    }

    /// FNV-1a 64 of dtype, shape and bytes: a cheap fingerprint for mutation checks.
    pub fn checksum(&self) -> u64 {
        let mut h = Fnv1a::new();
        h.write(self.dtype().name().as_bytes());
        for &d in &self.shape {
            h.write(&(d as u64).to_le_bytes());
        }
        h.write(&self.to_le_bytes()).finish()
    }

    /// Address of the storage allocation, for aliasing checks.
    pub fn storage_id(&self) -> usize {
        Arc::as_ptr(&self.data) as usize
    }
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_rounding_keeps_ten_mantissa_bits() {
        let x = 1.0f32 + 2f32.powi(-12);
        assert_eq!(round_tf32(x), 1.0);
        let y = 1.0f32 + 2f32.powi(-10);
        assert_eq!(round_tf32(y), y);
        // halfway rounds to even
        assert_eq!(round_tf32(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(round_tf32(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
    }

    #[test]
    fn bf16_rounding_from_f64_is_correct() {
        // Just above the tie between 1 and 1 + 2^-7: one rounding goes up. `half`'s own
        // from_f64 rounds to f32 first and lands on the tie, then on 1.0.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(DType::Bf16.round(x), 1.0078125);
        assert_eq!(Tensor::from_f64(vec![1], &[x], DType::Bf16).to_f64_vec(), vec![1.0078125]);
        assert_eq!(DType::F16.round(1.0 + 2f64.powi(-11) + 2f64.powi(-45)), 1.0 + 2f64.powi(-10));
    }

    #[test]
    fn checksum_is_fnv1a_of_dtype_shape_and_bytes() {
        let t = Tensor::f32(vec![2], vec![1.0, 2.0]);
        let mut bytes = b"f32".to_vec();
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend(t.to_le_bytes());
        assert_eq!(t.checksum(), tilec_abi::hash::fnv1a64(&bytes));
    }

    #[test]
    fn checksum_sees_one_bit() {
        let a = Tensor::f32(vec![2], vec![1.0, 2.0]);
        let b = Tensor::f32(vec![2], vec![1.0, f32::from_bits(2.0f32.to_bits() + 1)]);
        assert_ne!(a.checksum(), b.checksum());
    }
}
