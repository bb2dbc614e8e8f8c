//! Named tensors in and out of safetensors files — the project's only safetensors reader and
//! writer (the container format itself is parsed by the `safetensors` crate).
//!
//! safetensors is the exchange format between `tilec run`, `tilec-run`, `kverify` and foreign
//! candidates (PyTorch writes it with `safetensors.torch.save_file`). Two levels:
//! - [`RawFile`] / [`read_raw`] / [`write_raw`]: every dtype some tool of the project exchanges
//!   ([`FileDtype`]: f64, f32, bf16, f16, i32, i64) plus the header's string metadata. kverify's
//!   fp64 tensors and `cu_seqlens` go through this level.
//! - [`TensorMap`] / [`read`] / [`write`]: [`HostTensor`]s of the four kernel dtypes; any other
//!   dtype in a file is an error naming the tensor, never a silent cast.
//!
//! Tensors are kept in `BTreeMap`s, so files written here list names in sorted order and are
//! byte-for-byte reproducible.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype as StDtype, SafeTensorError, SafeTensors, TensorView};
use thiserror::Error;

use crate::meta::DType;
use crate::tensor::{HostTensor, TensorError};

/// Named host tensors, sorted by name.
pub type TensorMap = BTreeMap<String, HostTensor>;

/// Element types the project's tools exchange in safetensors files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileDtype {
    /// IEEE binary64 (kverify's references and recurrence problems).
    F64,
    /// IEEE binary32.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE binary16.
    F16,
    /// 32-bit signed integer (kernel size scalars).
    I32,
    /// 64-bit signed integer (`cu_seqlens`, as fla writes it).
    I64,
}

impl FileDtype {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            FileDtype::F16 | FileDtype::Bf16 => 2,
            FileDtype::F32 | FileDtype::I32 => 4,
            FileDtype::F64 | FileDtype::I64 => 8,
        }
    }

    /// The kernel dtype with the same encoding, if there is one (f64 and i64 have none).
    pub fn kernel_dtype(self) -> Option<DType> {
        match self {
            FileDtype::F16 => Some(DType::F16),
            FileDtype::Bf16 => Some(DType::Bf16),
            FileDtype::F32 => Some(DType::F32),
            FileDtype::I32 => Some(DType::I32),
            FileDtype::F64 | FileDtype::I64 => None,
        }
    }
}

impl From<DType> for FileDtype {
    fn from(d: DType) -> FileDtype {
        match d {
            DType::F16 => FileDtype::F16,
            DType::Bf16 => FileDtype::Bf16,
            DType::F32 => FileDtype::F32,
            DType::I32 => FileDtype::I32,
        }
    }
}

/// One tensor as stored: dtype, shape (outermost first) and little-endian row-major bytes
/// (`shape.iter().product() * dtype.size_bytes()` of them; the reader checks this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTensor {
    /// Element type.
    pub dtype: FileDtype,
    /// Extents, outermost first.
    pub shape: Vec<usize>,
    /// Element bytes, little-endian, row-major.
    pub bytes: Vec<u8>,
}

impl RawTensor {
    /// The elements as f64, exactly widened; `None` for the integer dtypes.
    pub fn float_values(&self) -> Option<Vec<f64>> {
        let b = &self.bytes;
        Some(match self.dtype {
            FileDtype::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
            FileDtype::F32 => b.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            FileDtype::Bf16 => b.chunks_exact(2).map(|c| f64::from(half::bf16::from_le_bytes([c[0], c[1]]))).collect(),
            FileDtype::F16 => b.chunks_exact(2).map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]))).collect(),
            FileDtype::I32 | FileDtype::I64 => return None,
        })
    }

    /// The elements as i64; `None` for the float dtypes.
    pub fn int_values(&self) -> Option<Vec<i64>> {
        let b = &self.bytes;
        Some(match self.dtype {
            FileDtype::I64 => b.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
            FileDtype::I32 => b.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            _ => return None,
        })
    }
}

/// A whole safetensors file: tensors by name and the header's `__metadata__` strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawFile {
    /// Tensors by name.
    pub tensors: BTreeMap<String, RawTensor>,
    /// The header's free-form string metadata (empty when the file has none).
    pub metadata: BTreeMap<String, String>,
}

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
    /// A tensor has a dtype the reader does not handle.
    #[error("tensor `{name}` has dtype {dtype}, but only {supported} are supported here: convert it when saving (an int64 index tensor such as cu_seqlens: `.int()` in torch, `.astype(numpy.int32)` in NumPy)")]
    UnsupportedDtype {
        /// Tensor name.
        name: String,
        /// The dtype as safetensors spells it.
        dtype: String,
        /// The dtypes this reader accepts, e.g. `bf16, f16, f32 and i32`.
        supported: &'static str,
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

fn to_st(d: FileDtype) -> StDtype {
    match d {
        FileDtype::F64 => StDtype::F64,
        FileDtype::F32 => StDtype::F32,
        FileDtype::Bf16 => StDtype::BF16,
        FileDtype::F16 => StDtype::F16,
        FileDtype::I32 => StDtype::I32,
        FileDtype::I64 => StDtype::I64,
    }
}

fn from_st(d: StDtype) -> Option<FileDtype> {
    Some(match d {
        StDtype::F64 => FileDtype::F64,
        StDtype::F32 => FileDtype::F32,
        StDtype::BF16 => FileDtype::Bf16,
        StDtype::F16 => FileDtype::F16,
        StDtype::I32 => FileDtype::I32,
        StDtype::I64 => FileDtype::I64,
        _ => return None,
    })
}

const RAW_DTYPES: &str = "f64, f32, bf16, f16, i32 and i64";
const KERNEL_DTYPES: &str = "bf16, f16, f32 and i32";

/// Parses a safetensors byte buffer, keeping every tensor in its stored dtype.
///
/// # Errors
/// [`StError::Format`] for a malformed buffer (including bytes that do not match a shape),
/// [`StError::UnsupportedDtype`] for a dtype outside [`FileDtype`] (e.g. u8, bool).
pub fn raw_from_bytes(bytes: &[u8]) -> Result<RawFile, StError> {
    let st = SafeTensors::deserialize(bytes)?;
    let (_, header) = SafeTensors::read_metadata(bytes)?;
    let mut out = RawFile::default();
    if let Some(m) = header.metadata() {
        out.metadata = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    for (name, view) in st.tensors() {
        let dtype = from_st(view.dtype()).ok_or_else(|| StError::UnsupportedDtype {
            name: name.clone(),
            dtype: format!("{:?}", view.dtype()),
            supported: RAW_DTYPES,
        })?;
        out.tensors.insert(name, RawTensor { dtype, shape: view.shape().to_vec(), bytes: view.data().to_vec() });
    }
    Ok(out)
}

/// Serialises tensors and header metadata (omitted when empty) to a safetensors buffer.
///
/// # Errors
/// [`StError::Format`] if a tensor's bytes do not match its shape and dtype.
pub fn raw_to_bytes(file: &RawFile) -> Result<Vec<u8>, StError> {
    let mut views = Vec::with_capacity(file.tensors.len());
    for (name, t) in &file.tensors {
        views.push((name.as_str(), TensorView::new(to_st(t.dtype), t.shape.clone(), &t.bytes)?));
    }
    let metadata = (!file.metadata.is_empty()).then(|| file.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>());
    Ok(safetensors::serialize(views, &metadata)?)
}

/// Reads a safetensors file at the raw level.
///
/// # Errors
/// [`StError::Io`], or the errors of [`raw_from_bytes`] wrapped in [`StError::InFile`].
pub fn read_raw(path: &Path) -> Result<RawFile, StError> {
    let bytes = std::fs::read(path).map_err(|source| StError::Io { path: path.to_path_buf(), source })?;
    raw_from_bytes(&bytes).map_err(|e| in_file(path, e))
}

/// Writes a safetensors file at the raw level (replacing it).
///
/// # Errors
/// The errors of [`raw_to_bytes`] wrapped in [`StError::InFile`], then [`StError::Io`].
pub fn write_raw(path: &Path, file: &RawFile) -> Result<(), StError> {
    let bytes = raw_to_bytes(file).map_err(|e| in_file(path, e))?;
    std::fs::write(path, bytes).map_err(|source| StError::Io { path: path.to_path_buf(), source })
}

fn in_file(path: &Path, e: StError) -> StError {
    StError::InFile { path: path.to_path_buf(), source: Box::new(e) }
}

fn to_host(raw: RawFile) -> Result<TensorMap, StError> {
    let mut out = TensorMap::new();
    for (name, t) in raw.tensors {
        let dtype = t.dtype.kernel_dtype().ok_or_else(|| StError::UnsupportedDtype {
            name: name.clone(),
            dtype: format!("{:?}", to_st(t.dtype)),
            supported: KERNEL_DTYPES,
        })?;
        let h = HostTensor::new(dtype, t.shape, t.bytes).map_err(|source| StError::Tensor { name: name.clone(), source })?;
        out.insert(name, h);
    }
    Ok(out)
}

fn to_raw(tensors: &TensorMap) -> Result<RawFile, StError> {
    let mut raw = RawFile::default();
    for (name, t) in tensors {
        // Re-check so a hand-built HostTensor with a wrong byte count is reported by name.
        t.check().map_err(|source| StError::Tensor { name: name.clone(), source })?;
        raw.tensors.insert(name.clone(), RawTensor { dtype: t.dtype.into(), shape: t.shape.clone(), bytes: t.bytes.clone() });
    }
    Ok(raw)
}

/// Parses a safetensors byte buffer into host tensors.
///
/// # Errors
/// [`StError::Format`] for a malformed buffer, [`StError::UnsupportedDtype`] for a tensor of
/// another dtype (e.g. f64, u8), [`StError::Tensor`] if a tensor's bytes do not match its shape.
pub fn from_bytes(bytes: &[u8]) -> Result<TensorMap, StError> {
    to_host(raw_from_bytes(bytes)?)
}

/// Serialises host tensors to a safetensors byte buffer (names sorted, no metadata block).
///
/// # Errors
/// [`StError::Tensor`] if a tensor's bytes do not match its shape, [`StError::Format`] if
/// safetensors refuses the set.
pub fn to_bytes(tensors: &TensorMap) -> Result<Vec<u8>, StError> {
    raw_to_bytes(&to_raw(tensors)?)
}

/// Reads a safetensors file of kernel tensors.
///
/// # Errors
/// [`StError::Io`], or the errors of [`from_bytes`] wrapped in [`StError::InFile`] so the
/// message names the file.
pub fn read(path: &Path) -> Result<TensorMap, StError> {
    let raw = read_raw(path)?;
    to_host(raw).map_err(|e| in_file(path, e))
}

/// Writes a safetensors file of kernel tensors (replacing it).
///
/// # Errors
/// [`StError::Tensor`] for an inconsistent tensor, [`StError::Io`], then as [`to_bytes`].
pub fn write(path: &Path, tensors: &TensorMap) -> Result<(), StError> {
    write_raw(path, &to_raw(tensors)?)
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
        // The raw level keeps it, exactly.
        let raw = raw_from_bytes(&bytes).unwrap();
        assert_eq!(raw.tensors["w"].float_values(), Some(vec![1.0]));
        let u8_view = TensorView::new(StDtype::U8, vec![1], &[7u8]).unwrap();
        let bytes = safetensors::serialize([("m", u8_view)], &None).unwrap();
        assert!(matches!(raw_from_bytes(&bytes), Err(StError::UnsupportedDtype { name, .. }) if name == "m"));
    }

    #[test]
    fn raw_round_trip_keeps_metadata_and_wide_dtypes() {
        let mut f = RawFile::default();
        let xs = [0.1f64, -2.5, 1e-300];
        f.tensors.insert("x".into(), RawTensor { dtype: FileDtype::F64, shape: vec![3], bytes: xs.iter().flat_map(|x| x.to_le_bytes()).collect() });
        f.tensors.insert("cu".into(), RawTensor { dtype: FileDtype::I64, shape: vec![2], bytes: [0i64, 9].iter().flat_map(|x| x.to_le_bytes()).collect() });
        f.metadata.insert("scale".into(), "0.3".into());
        let back = raw_from_bytes(&raw_to_bytes(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.tensors["x"].float_values(), Some(xs.to_vec()));
        assert_eq!(back.tensors["cu"].int_values(), Some(vec![0, 9]));
        assert_eq!(back.tensors["cu"].float_values(), None);
        let bad = RawFile { tensors: BTreeMap::from([("b".into(), RawTensor { dtype: FileDtype::F64, shape: vec![2], bytes: vec![0; 8] })]), ..RawFile::default() };
        assert!(matches!(raw_to_bytes(&bad), Err(StError::Format(_))));
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
