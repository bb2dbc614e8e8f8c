//! Tensors of the external-process protocol as safetensors files: a thin conversion between
//! kverify's [`Tensor`] and the raw level of [`tilec_abi::st`], which does the actual reading
//! and writing (one safetensors implementation for the whole project).

use crate::tensor::{Device, Storage, Tensor};
use half::{bf16, f16};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tilec_abi::st::{read_raw, write_raw, FileDtype, RawFile, RawTensor};

/// Errors of safetensors I/O.
#[derive(Debug, thiserror::Error)]
pub enum StError {
    /// Reading or writing the file failed (I/O or a malformed container).
    #[error(transparent)]
    File(#[from] tilec_abi::st::StError),
    /// The file holds a tensor kverify cannot represent.
    #[error("{path}: {msg}")]
    Format {
        /// Path.
        path: String,
        /// What is wrong.
        msg: String,
    },
}

fn to_raw(t: &Tensor) -> RawTensor {
    let dtype = match &*t.data {
        Storage::F64(_) => FileDtype::F64,
        Storage::F32(_) => FileDtype::F32,
        Storage::Bf16(_) => FileDtype::Bf16,
        Storage::F16(_) => FileDtype::F16,
        Storage::I32(_) => FileDtype::I32,
        Storage::I64(_) => FileDtype::I64,
    };
    RawTensor { dtype, shape: t.shape.clone(), bytes: t.to_le_bytes() }
}

/// Write named tensors to `path`.
///
/// # Errors
/// [`StError::File`] when the file cannot be written.
pub fn write(path: &Path, tensors: &[(String, &Tensor)]) -> Result<(), StError> {
    let file = RawFile { tensors: tensors.iter().map(|(n, t)| (n.clone(), to_raw(t))).collect(), ..RawFile::default() };
    Ok(write_raw(path, &file)?)
}

/// Read every tensor of `path` by name, each in its stored format (float, or I32 / I64 index
/// outputs).
///
/// # Errors
/// [`StError::File`] for I/O or a malformed file.
pub fn read(path: &Path) -> Result<HashMap<String, Tensor>, StError> {
    let file = read_raw(path)?;
    let mut out = HashMap::new();
    for (name, t) in file.tensors {
        let b = &t.bytes;
        let storage = match t.dtype {
            FileDtype::F64 => Storage::F64(t.float_values().unwrap_or_default()),
            FileDtype::F32 => Storage::F32(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
            FileDtype::Bf16 => Storage::Bf16(b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
            FileDtype::F16 => Storage::F16(b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
            FileDtype::I32 => Storage::I32(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
            FileDtype::I64 => Storage::I64(b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()),
        };
        out.insert(name, Tensor { shape: t.shape, device: Device::Cpu, data: Arc::new(storage) });
    }
    Ok(out)
}
