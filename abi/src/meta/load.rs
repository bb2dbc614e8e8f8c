//! Reading and validating `*.meta.json` files.
//!
//! The schema version is checked on the raw JSON *before* the typed parse, so a file of
//! another version gets "unsupported schema version 2 (this runtime reads 1)" rather than a
//! confusing message about some unknown field. Validation then checks what the runtime relies
//! on: unique, well-formed names; every shape and grid expression parses and mentions only
//! declared sizes; a launchable block size. Hardware budgets (TMEM columns, shared memory,
//! registers) are judged by `kverify`'s RES-02, not here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{KernelMeta, OLDEST_READ_VERSION, SCHEMA_VERSION, TENSOR_MAP_ALIGN, TENSOR_MAP_MAX_BOX, TENSOR_MAP_MAX_RANK};
use crate::expr::{is_identifier, ExprError, SizeExpr};

/// Most threads a CTA may have on every target this project builds for (sm_90a, sm_100a).
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// Errors from loading or validating metadata.
#[derive(Debug, Error)]
pub enum MetaError {
    /// The file could not be read.
    #[error("cannot read metadata file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not JSON, or JSON that does not match the schema (the message names the field).
    #[error("metadata does not match schema v{OLDEST_READ_VERSION}..=v{SCHEMA_VERSION}: {0}")]
    Json(#[from] serde_json::Error),
    /// The top level has no integer `schema_version`.
    #[error("metadata has no integer `schema_version` field (this runtime reads versions {OLDEST_READ_VERSION} to {SCHEMA_VERSION})")]
    MissingVersion,
    /// A schema version this runtime does not read.
    #[error("unsupported metadata schema version {found} (this runtime reads versions {OLDEST_READ_VERSION} to {SCHEMA_VERSION}); rebuild the artifact with a matching tilec")]
    UnsupportedVersion {
        /// The version in the file.
        found: u64,
    },
    /// A structural problem; `what` says which field and why.
    #[error("invalid metadata for kernel `{kernel}`: {what}")]
    Invalid {
        /// The kernel name (possibly empty if that is the problem).
        kernel: String,
        /// Description naming the field.
        what: String,
    },
    /// A shape or grid expression does not parse.
    #[error("invalid metadata for kernel `{kernel}`: {field}: {source}")]
    Expr {
        /// The kernel name.
        kernel: String,
        /// Which field holds the expression (e.g. `params[2].shape[1]`, `launch.grid[0]`).
        field: String,
        /// The parse error.
        source: ExprError,
    },
}

impl KernelMeta {
    /// Parses metadata from JSON text and validates it.
    ///
    /// # Errors
    /// [`MetaError::MissingVersion`] / [`MetaError::UnsupportedVersion`] for a file of another
    /// schema version, [`MetaError::Json`] for a shape mismatch with the schema, and the
    /// errors of [`KernelMeta::validate`].
    pub fn from_json_str(text: &str) -> Result<KernelMeta, MetaError> {
        let raw: serde_json::Value = serde_json::from_str(text)?;
        match raw.get("schema_version").and_then(serde_json::Value::as_u64) {
            None => return Err(MetaError::MissingVersion),
            Some(v) if !(u64::from(OLDEST_READ_VERSION)..=u64::from(SCHEMA_VERSION)).contains(&v) => return Err(MetaError::UnsupportedVersion { found: v }),
            // Version 1 lacks `tensor_maps`, which reads as empty: the migration is the default.
            Some(_) => {}
        }
        let meta: KernelMeta = serde_json::from_value(raw)?;
        meta.validate()?;
        Ok(meta)
    }

    /// Reads and validates a `*.meta.json` file.
    ///
    /// # Errors
    /// [`MetaError::Io`] when the file cannot be read, then as [`KernelMeta::from_json_str`].
    pub fn load(path: &Path) -> Result<KernelMeta, MetaError> {
        let text = std::fs::read_to_string(path).map_err(|source| MetaError::Io { path: path.to_path_buf(), source })?;
        KernelMeta::from_json_str(&text)
    }

    /// Serialises to pretty-printed JSON (field order as declared, so output is deterministic).
    ///
    /// # Errors
    /// Only if serde_json fails, which it does not for these types.
    pub fn to_json_string(&self) -> Result<String, MetaError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Checks the invariants the runtime relies on (see the module docs).
    ///
    /// # Errors
    /// [`MetaError::Invalid`] naming the offending field, or [`MetaError::Expr`] for an
    /// expression that does not parse.
    pub fn validate(&self) -> Result<(), MetaError> {
        let invalid = |what: String| MetaError::Invalid { kernel: self.kernel.clone(), what };
        if !(OLDEST_READ_VERSION..=SCHEMA_VERSION).contains(&self.schema_version) {
            return Err(MetaError::UnsupportedVersion { found: u64::from(self.schema_version) });
        }
        if !is_identifier(&self.kernel) {
            return Err(invalid(format!("`kernel` must be a PTX identifier, found `{}`", self.kernel)));
        }
        let mut sizes = BTreeSet::new();
        for s in &self.sizes {
            if !is_identifier(s) {
                return Err(invalid(format!("size name `{s}` is not an identifier")));
            }
            if !sizes.insert(s.as_str()) {
                return Err(invalid(format!("size `{s}` is declared twice")));
            }
        }
        let check_expr = |field: String, text: &str| -> Result<(), MetaError> {
            let e = SizeExpr::parse(text).map_err(|source| MetaError::Expr {
                kernel: self.kernel.clone(),
                field: field.clone(),
                source,
            })?;
            match e.symbols().into_iter().find(|s| !sizes.contains(s.as_str())) {
                Some(s) => Err(invalid(format!("{field} = `{text}` uses `{s}`, which is not in `sizes`"))),
                None => Ok(()),
            }
        };
        let mut names = BTreeSet::new();
        for (i, p) in self.params.iter().enumerate() {
            if !is_identifier(&p.name) {
                return Err(invalid(format!("params[{i}].name `{}` is not an identifier", p.name)));
            }
            if !names.insert(p.name.as_str()) {
                return Err(invalid(format!("parameter `{}` is declared twice", p.name)));
            }
            if p.shape.is_empty() && p.role != super::Role::Input {
                return Err(invalid(format!(
                    "scalar parameter `{}` has role {:?}; scalars are passed by value and can only be inputs",
                    p.name, p.role
                )));
            }
            for (d, text) in p.shape.iter().enumerate() {
                check_expr(format!("params[{i}] (`{}`).shape[{d}]", p.name), text)?;
            }
        }
        for (axis, text) in self.launch.grid.iter().enumerate() {
            check_expr(format!("launch.grid[{axis}]"), text)?;
        }
        if self.launch.block_threads == 0 || self.launch.block_threads > MAX_BLOCK_THREADS {
            return Err(invalid(format!(
                "launch.block_threads = {} is outside 1..={MAX_BLOCK_THREADS}",
                self.launch.block_threads
            )));
        }
        for b in &self.contract.envelope {
            if !sizes.contains(b.size.as_str()) {
                return Err(invalid(format!("contract.envelope names `{}`, which is not in `sizes`", b.size)));
            }
            if b.max.is_some_and(|m| m < b.min) || b.multiple_of == 0 {
                return Err(invalid(format!("contract.envelope for `{}` admits no value", b.size)));
            }
        }
        if self.files.ptx.is_empty() {
            return Err(invalid("files.ptx is empty".to_string()));
        }
        for (i, t) in self.tensor_maps.iter().enumerate() {
            let Some(p) = self.params.iter().find(|p| p.name == t.tensor && !p.shape.is_empty()) else {
                return Err(invalid(format!("tensor_maps[{i}].tensor `{}` is not a tensor parameter", t.tensor)));
            };
            let rank = p.shape.len();
            if !(1..=TENSOR_MAP_MAX_RANK).contains(&rank) || t.box_dims.len() != rank || t.element_strides.len() != rank {
                return Err(invalid(format!("tensor_maps[{i}]: box and element_strides need one entry per dimension of `{}` (rank {rank}, at most {TENSOR_MAP_MAX_RANK})", t.tensor)));
            }
            if t.box_dims.iter().any(|&b| !(1..=TENSOR_MAP_MAX_BOX).contains(&b)) || t.element_strides.iter().any(|&e| !(1..=8).contains(&e)) {
                return Err(invalid(format!("tensor_maps[{i}]: box extents must lie in 1..={TENSOR_MAP_MAX_BOX} and element strides in 1..=8")));
            }
            let Some(sw) = t.swizzle_bytes() else {
                return Err(invalid(format!("tensor_maps[{i}].swizzle `{}` is not none, 32B, 64B or 128B", t.swizzle)));
            };
            let inner = u64::from(t.box_dims[rank - 1]) * p.dtype.size_bytes() as u64;
            if inner % TENSOR_MAP_ALIGN != 0 || (sw > 0 && inner > u64::from(sw)) {
                return Err(invalid(format!("tensor_maps[{i}]: the innermost box row is {inner} bytes; it must be a multiple of 16 and at most the swizzle width")));
            }
            if t.oob_fill != "zero" {
                return Err(invalid(format!("tensor_maps[{i}].oob_fill `{}` is not `zero`", t.oob_fill)));
            }
        }
        if self.schema_version < 2 && !self.tensor_maps.is_empty() {
            return Err(invalid("`tensor_maps` needs schema version 2".to_string()));
        }
        Ok(())
    }

    /// Index of the parameter called `name`, if any.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::axpb_meta;
    use super::*;

    #[test]
    fn round_trips_and_validates() {
        let m = axpb_meta();
        let text = m.to_json_string().unwrap();
        let back = KernelMeta::from_json_str(&text).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn refuses_other_versions() {
        let text = axpb_meta().to_json_string().unwrap().replace("\"schema_version\": 2", "\"schema_version\": 3");
        let err = KernelMeta::from_json_str(&text).unwrap_err();
        assert!(matches!(err, MetaError::UnsupportedVersion { found: 3 }), "{err}");
        assert!(err.to_string().contains("unsupported metadata schema version 3"));
        // A version-3 file may have fields v2 does not know; the version error must win.
        let text = r#"{"schema_version": 3, "brand_new": true}"#;
        assert!(matches!(KernelMeta::from_json_str(text), Err(MetaError::UnsupportedVersion { found: 3 })));
        assert!(matches!(KernelMeta::from_json_str(r#"{"schema_version": 0}"#), Err(MetaError::UnsupportedVersion { found: 0 })));
        assert!(matches!(KernelMeta::from_json_str(r#"{"kernel": "k"}"#), Err(MetaError::MissingVersion)));
        assert!(matches!(KernelMeta::from_json_str("not json"), Err(MetaError::Json(_))));
    }

    #[test]
    fn version_1_files_read_as_kernels_without_tensor_maps() {
        // The migration (docs/metadata.md): a v1 file is a v2 file with no `tensor_maps`.
        let v2 = axpb_meta();
        let text = v2.to_json_string().unwrap().replace("\"schema_version\": 2", "\"schema_version\": 1");
        let v1 = KernelMeta::from_json_str(&text).unwrap();
        assert_eq!(v1.schema_version, 1);
        assert!(v1.tensor_maps.is_empty());
        assert_eq!(KernelMeta { schema_version: 2, ..v1 }, v2);
    }

    fn with_map(m: &mut KernelMeta, tensor: &str, box_dims: Vec<u32>, swizzle: &str) {
        let n = box_dims.len();
        m.tensor_maps = vec![super::super::TensorMapMeta { tensor: tensor.into(), box_dims, element_strides: vec![1; n], swizzle: swizzle.into(), oob_fill: "zero".into() }];
    }

    #[test]
    fn tensor_maps_are_validated() {
        let mut m = axpb_meta();
        // x: f32[N]; a 32-element box is 128 bytes.
        with_map(&mut m, "x", vec![32], "128B");
        m.validate().unwrap();
        let text = m.to_json_string().unwrap();
        assert!(text.contains("\"box\": ["), "{text}");
        assert_eq!(KernelMeta::from_json_str(&text).unwrap(), m);
        // The same map in a v1 file is refused.
        let v1 = text.replace("\"schema_version\": 2", "\"schema_version\": 1");
        assert!(KernelMeta::from_json_str(&v1).unwrap_err().to_string().contains("needs schema version 2"));
        let bad = |m: &KernelMeta| m.validate().unwrap_err().to_string();
        with_map(&mut m, "y", vec![64], "128B"); // y is f32: 256 bytes > 128
        assert!(bad(&m).contains("at most the swizzle width"), "{}", bad(&m));
        with_map(&mut m, "a", vec![4], "none");
        assert!(bad(&m).contains("not a tensor parameter"), "{}", bad(&m));
        with_map(&mut m, "x", vec![4, 4], "none");
        assert!(bad(&m).contains("one entry per dimension"), "{}", bad(&m));
        with_map(&mut m, "x", vec![32], "96B");
        assert!(bad(&m).contains("not none, 32B"), "{}", bad(&m));
        with_map(&mut m, "x", vec![512], "none");
        assert!(bad(&m).contains("1..=256"), "{}", bad(&m));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = axpb_meta().to_json_string().unwrap().replace("\"kernel\":", "\"kernal\": \"x\", \"kernel\":");
        let err = KernelMeta::from_json_str(&text).unwrap_err();
        assert!(err.to_string().contains("kernal"), "{err}");
    }

    #[test]
    fn optional_contract_fields_may_be_absent() {
        let mut m = axpb_meta();
        m.contract.reference = None;
        m.contract.envelope.clear();
        let text = m.to_json_string().unwrap();
        assert!(!text.contains("envelope"));
        assert_eq!(KernelMeta::from_json_str(&text).unwrap(), m);
    }

    #[test]
    fn documented_example_is_valid() {
        // The first JSON block of docs/metadata.md must stay a valid file.
        let doc = include_str!("../../../docs/metadata.md");
        let start = doc.find("```json\n").map(|i| i + 8).unwrap();
        let end = start + doc[start..].find("```").unwrap();
        let m = KernelMeta::from_json_str(&doc[start..end]).unwrap();
        assert_eq!(m.kernel, "chunk_bwd_dhu");
        assert_eq!(m.contract.envelope.len(), 1);
    }

    #[test]
    fn structural_errors_name_the_field() {
        let mut m = axpb_meta();
        m.params[1].shape[0] = "N*".into();
        let err = m.validate().unwrap_err();
        assert!(matches!(&err, MetaError::Expr { field, .. } if field.contains("params[1]")), "{err}");

        let mut m = axpb_meta();
        m.params[1].shape[0] = "M".into();
        assert!(m.validate().unwrap_err().to_string().contains("`M`, which is not in `sizes`"));

        let mut m = axpb_meta();
        m.launch.grid[0] = "cdiv(N,".into();
        assert!(matches!(m.validate(), Err(MetaError::Expr { field, .. }) if field == "launch.grid[0]"));

        let mut m = axpb_meta();
        m.params[2].name = "x".into();
        assert!(m.validate().unwrap_err().to_string().contains("declared twice"));

        let mut m = axpb_meta();
        m.launch.block_threads = 2048;
        assert!(m.validate().unwrap_err().to_string().contains("block_threads"));

        let mut m = axpb_meta();
        m.params[0].role = super::super::Role::Output;
        assert!(m.validate().unwrap_err().to_string().contains("scalar parameter `a`"));

        let mut m = axpb_meta();
        m.sizes.push("N".into());
        assert!(m.validate().unwrap_err().to_string().contains("size `N` is declared twice"));
    }
}
