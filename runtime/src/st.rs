//! Named host tensors in and out of safetensors files.
//!
//! safetensors is the exchange format between `tilec-run`, `kverify` and foreign candidates
//! (PyTorch writes it with `safetensors.torch.save_file`). Only the four dtypes the kernels use
//! are accepted; any other dtype in a file is an error naming the tensor, never a silent cast.
//! Tensors are kept in a `BTreeMap`, so files written here list names in sorted order and are
//! byte-for-byte reproducible.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype as StDtype, SafeTensorError, SafeTensors, TensorView};
use thiserror::Error;

use crate::meta::DType;
use crate::tensor::{HostTensor, TensorError};

/// Named tensors, sorted by name.
pub type TensorMap = BTreeMap<String, HostTensor>;

/// Errors from reading or writing safetensors.
#[derive(Debug, Error)]
pub enum StError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a valid safetensors container.
    #[error("invalid safetensors data: {0}")]
    Format(#[from] SafeTensorError),
    /// A tensor has a dtype the runtime does not handle.
    #[error("tensor `{name}` has dtype {dtype}, but only bf16, f16, f32 and i32 are supported")]
    UnsupportedDtype {
        /// Tensor name.
        name: String,
        /// The dtype as safetensors spells it.
        dtype: String,
    },
    /// A tensor's bytes do not match its shape.
    #[error("tensor `{name}`: {source}")]
    Tensor {
        /// Tensor name.
        name: String,
        /// The problem.
        source: TensorError,
    },
    /// A problem with the contents of a named file.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// The problem.
        source: Box<StError>,
    },
}

fn to_st(d: DType) -> StDtype {
    match d {
        DType::F16 => StDtype::F16,
        DType::Bf16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::I32 => StDtype::I32,
    }
}

fn from_st(d: StDtype) -> Option<DType> {
    match d {
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::Bf16),
        StDtype::F32 => Some(DType::F32),
        StDtype::I32 => Some(DType::I32),
        _ => None,
    }
}

/// Parses a safetensors byte buffer into host tensors.
///
/// # Errors
/// [`StError::Format`] for a malformed buffer, [`StError::UnsupportedDtype`] for a tensor of
/// another dtype (e.g. f64, u8), [`StError::Tensor`] if a tensor's bytes do not match its shape.
pub fn from_bytes(bytes: &[u8]) -> Result<TensorMap, StError> {
    let st = SafeTensors::deserialize(bytes)?;
    let mut out = TensorMap::new();
    for (name, view) in st.tensors() {
        let dtype = from_st(view.dtype())
            .ok_or_else(|| StError::UnsupportedDtype { name: name.clone(), dtype: format!("{:?}", view.dtype()) })?;
        let t = HostTensor::new(dtype, view.shape().to_vec(), view.data().to_vec())
            .map_err(|source| StError::Tensor { name: name.clone(), source })?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Serialises host tensors to a safetensors byte buffer (names sorted, no metadata block).
///
/// # Errors
/// [`StError::Tensor`] if a tensor's bytes do not match its shape, [`StError::Format`] if
/// safetensors refuses the set.
pub fn to_bytes(tensors: &TensorMap) -> Result<Vec<u8>, StError> {
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        // Re-check so a hand-built HostTensor with a wrong byte count is reported by name.
        t.check().map_err(|source| StError::Tensor { name: name.clone(), source })?;
        let view = TensorView::new(to_st(t.dtype), t.shape.clone(), &t.bytes)?;
        views.push((name.as_str(), view));
    }
    Ok(safetensors::serialize(views, &None)?)
}

/// Reads a safetensors file.
///
/// # Errors
/// [`StError::Io`], or the errors of [`from_bytes`] wrapped in [`StError::InFile`] so the
/// message names the file.
pub fn read(path: &Path) -> Result<TensorMap, StError> {
    let bytes = std::fs::read(path).map_err(|source| StError::Io { path: path.to_path_buf(), source })?;
    from_bytes(&bytes).map_err(|e| StError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

/// Writes a safetensors file (replacing it).
///
/// # Errors
/// [`StError::Io`], then as [`to_bytes`].
pub fn write(path: &Path, tensors: &TensorMap) -> Result<(), StError> {
    let bytes = to_bytes(tensors)?;
    std::fs::write(path, bytes).map_err(|source| StError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TensorMap {
        let mut m = TensorMap::new();
        m.insert("q".into(), HostTensor::from_f32(DType::Bf16, vec![2, 3], &[1.0, -2.0, 0.5, 0.25, 3.0, -0.125]).unwrap());
        m.insert("g".into(), HostTensor::from_f32(DType::F32, vec![3], &[0.1, 0.2, 0.3]).unwrap());
        m.insert("h".into(), HostTensor::from_f32(DType::F16, vec![1, 2], &[1.5, -7.0]).unwrap());
        m.insert("idx".into(), HostTensor::from_i32(vec![2], &[4, -9]).unwrap());
        m
    }

    #[test]
    fn round_trip_bytes_and_file() {
        let m = sample();
        let bytes = to_bytes(&m).unwrap();
        assert_eq!(from_bytes(&bytes).unwrap(), m);
        assert_eq!(to_bytes(&m).unwrap(), bytes, "serialisation must be deterministic");
        let dir = std::env::temp_dir().join(format!("tilec-runtime-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        write(&path, &m).unwrap();
        assert_eq!(read(&path).unwrap(), m);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_dtypes_are_refused_by_name() {
        let data = 1.0f64.to_le_bytes();
        let v = TensorView::new(StDtype::F64, vec![1], &data).unwrap();
        let bytes = safetensors::serialize([("w", v)], &None).unwrap();
        let err = from_bytes(&bytes).unwrap_err();
        assert!(matches!(&err, StError::UnsupportedDtype { name, .. } if name == "w"), "{err}");
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(matches!(from_bytes(b"garbage"), Err(StError::Format(_))));
        assert!(matches!(read(Path::new("/nonexistent/x.safetensors")), Err(StError::Io { .. })));
        let dir = std::env::temp_dir().join(format!("st-garbage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("garbage.safetensors");
        std::fs::write(&f, b"garbage").unwrap();
        let err = read(&f).unwrap_err();
        assert!(matches!(&err, StError::InFile { source, .. } if matches!(**source, StError::Format(_))), "{err}");
        assert!(err.to_string().contains("garbage.safetensors"), "the message names the file: {err}");
        let mut m = TensorMap::new();
        m.insert("bad".into(), HostTensor { dtype: DType::F32, shape: vec![4], bytes: vec![0; 3] });
        assert!(to_bytes(&m).is_err());
    }
}
