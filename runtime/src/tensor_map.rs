//! The arguments of `cuTensorMapEncodeTiled` for one metadata tensor map and one bound tensor
//! (CUDA driver API, "Tensor Map Object Management"): pure arithmetic, tested without a GPU; the
//! launcher (`launch`, feature `cuda`) passes them to the driver.
//!
//! The driver takes dimensions innermost first: `globalDim[i]` is the extent of tensor dimension
//! `rank − 1 − i`, `globalStrides[i]` the byte stride of dimension `rank − 2 − i` (the innermost
//! stride is the element size and is not passed), and `boxDim`/`elementStrides` in the same
//! order. Tensors are dense row-major (`docs/metadata.md`). The conditions under which a map is
//! encoded are the metadata's (and the kernel's run-time test): base 16-byte aligned, every
//! passed stride a multiple of 16 bytes below 2⁴⁰, every extent in 1..=2³².

use crate::meta::{DType, TensorMapMeta, TENSOR_MAP_ALIGN, TENSOR_MAP_MAX_EXTENT, TENSOR_MAP_STRIDE_LIMIT};

/// `cuTensorMapEncodeTiled`'s arguments, innermost dimension first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledEncoding {
    /// Element type.
    pub dtype: DType,
    /// Extents, innermost first.
    pub global_dim: Vec<u64>,
    /// Byte strides of dimensions 1.., innermost first (`rank − 1` entries).
    pub global_strides: Vec<u64>,
    /// Box extents, innermost first.
    pub box_dim: Vec<u32>,
    /// Element strides, innermost first.
    pub element_strides: Vec<u32>,
    /// Swizzle width in bytes (0, 32, 64 or 128).
    pub swizzle_bytes: u32,
}

/// The encoding of `map` for a tensor of `dtype` and `shape` at device address `base`, or `None`
/// when the map cannot be encoded (the kernel then copies element by element).
pub fn encoding(map: &TensorMapMeta, dtype: DType, shape: &[usize], base: u64) -> Option<TiledEncoding> {
    let rank = shape.len();
    if rank == 0 || rank != map.box_dims.len() || base % TENSOR_MAP_ALIGN != 0 {
        return None;
    }
    if shape.iter().any(|&d| d == 0 || d as u64 > TENSOR_MAP_MAX_EXTENT) {
        return None;
    }
    let size = dtype.size_bytes() as u64;
    // Row-major byte strides of every dimension but the innermost, innermost first.
    let mut global_strides = Vec::with_capacity(rank - 1);
    let mut stride = size;
    for d in (1..rank).rev() {
        stride = stride.checked_mul(shape[d] as u64)?;
        if stride % TENSOR_MAP_ALIGN != 0 || stride >= TENSOR_MAP_STRIDE_LIMIT {
            return None;
        }
        global_strides.push(stride);
    }
    Some(TiledEncoding {
        dtype,
        global_dim: shape.iter().rev().map(|&d| d as u64).collect(),
        global_strides,
        box_dim: map.box_dims.iter().rev().copied().collect(),
        element_strides: map.element_strides.iter().rev().copied().collect(),
        swizzle_bytes: map.swizzle_bytes()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(box_dims: Vec<u32>) -> TensorMapMeta {
        let n = box_dims.len();
        TensorMapMeta { tensor: "a".into(), box_dims, element_strides: vec![1; n], swizzle: "128B".into(), oob_fill: "zero".into() }
    }

    #[test]
    fn gemm_operand_is_encoded_innermost_first() {
        // a: bf16[M = 4096, K = 4000], box 128 rows x 64 columns.
        let e = encoding(&map(vec![128, 64]), DType::Bf16, &[4096, 4000], 0x7f00_0000_0000).unwrap();
        assert_eq!(e.global_dim, vec![4000, 4096]);
        assert_eq!(e.global_strides, vec![8000]);
        assert_eq!(e.box_dim, vec![64, 128]);
        assert_eq!(e.element_strides, vec![1, 1]);
        assert_eq!(e.swizzle_bytes, 128);
    }

    #[test]
    fn rank_4_strides_are_products_of_inner_extents() {
        // k: bf16[B = 2, T = 100, H = 3, K = 128], box [1, 64, 1, 64].
        let e = encoding(&map(vec![1, 64, 1, 64]), DType::Bf16, &[2, 100, 3, 128], 256).unwrap();
        assert_eq!(e.global_dim, vec![128, 3, 100, 2]);
        assert_eq!(e.global_strides, vec![256, 768, 76_800]);
        assert_eq!(e.box_dim, vec![64, 1, 64, 1]);
    }

    #[test]
    fn unencodable_tensors_are_refused() {
        let m = map(vec![64, 64]);
        // A row of 65 bf16 is 130 bytes: not a multiple of 16 (the M = K = N = 65 case).
        assert_eq!(encoding(&m, DType::Bf16, &[65, 65], 0), None);
        assert_eq!(encoding(&m, DType::Bf16, &[64, 64], 8), None, "misaligned base");
        assert_eq!(encoding(&m, DType::Bf16, &[0, 64], 0), None, "empty tensor");
        assert_eq!(encoding(&m, DType::Bf16, &[64], 0), None, "rank differs from the box");
        assert!(encoding(&m, DType::Bf16, &[64, 64], 0).is_some());
    }
}
