//! Reading and writing tensors as safetensors files for the external-process protocol.

use crate::tensor::{Storage, Tensor};
use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::HashMap;
use std::path::Path;

/// Errors of safetensors I/O.
#[derive(Debug, thiserror::Error)]
pub enum StError {
    /// File system.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Format.
    #[error("{path}: {msg}")]
    Format {
        /// Path.
        path: String,
        /// What is wrong.
        msg: String,
    },
}

fn dtype_of(t: &Tensor) -> Dtype {
    match &*t.data {
        Storage::F64(_) => Dtype::F64,
        Storage::F32(_) => Dtype::F32,
        Storage::Bf16(_) => Dtype::BF16,
        Storage::F16(_) => Dtype::F16,
    }
}

/// Write named tensors to `path`.
pub fn write(path: &Path, tensors: &[(String, &Tensor)]) -> Result<(), StError> {
    let p = path.display().to_string();
    let bytes: Vec<(String, Vec<u8>, Dtype, Vec<usize>)> =
        tensors.iter().map(|(n, t)| (n.clone(), t.to_le_bytes(), dtype_of(t), t.shape.clone())).collect();
    let mut views = Vec::new();
    for (n, b, d, s) in &bytes {
        let v = TensorView::new(*d, s.clone(), b).map_err(|e| StError::Format { path: p.clone(), msg: e.to_string() })?;
        views.push((n.clone(), v));
    }
    let data = safetensors::tensor::serialize(views, &None).map_err(|e| StError::Format { path: p.clone(), msg: e.to_string() })?;
    std::fs::write(path, data).map_err(|source| StError::Io { path: p, source })
}

/// Read every tensor of `path` by name. Unsupported dtypes are an error.
pub fn read(path: &Path) -> Result<HashMap<String, Tensor>, StError> {
    let p = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| StError::Io { path: p.clone(), source })?;
    let st = SafeTensors::deserialize(&data).map_err(|e| StError::Format { path: p.clone(), msg: e.to_string() })?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let b = view.data();
        let shape = view.shape().to_vec();
        let storage = match view.dtype() {
            Dtype::F64 => Storage::F64(b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()),
            Dtype::F32 => Storage::F32(b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()),
            Dtype::BF16 => Storage::Bf16(b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
            Dtype::F16 => Storage::F16(b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
            other => return Err(StError::Format { path: p.clone(), msg: format!("tensor `{name}` has unsupported dtype {other:?}") }),
        };
        out.insert(name, Tensor { shape, device: crate::tensor::Device::Cpu, data: std::sync::Arc::new(storage) });
    }
    Ok(out)
}
