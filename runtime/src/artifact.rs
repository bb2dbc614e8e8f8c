//! An artifact on disk: validated metadata plus the folder its files live in.
//!
//! `tilec build` writes `<kernel>.<target>.ptx`, maybe a cubin, and `<kernel>.meta.json`
//! side by side; the metadata names the code files relative to its own folder.

use std::path::{Path, PathBuf};

use crate::meta::{KernelMeta, MetaError};

/// Metadata and the folder holding the artifact's files.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// The validated metadata.
    pub meta: KernelMeta,
    /// Folder of the metadata file; `files.ptx` and `files.cubin` are relative to it.
    pub dir: PathBuf,
}

impl Artifact {
    /// Loads and validates `meta_path` (a `*.meta.json`).
    ///
    /// # Errors
    /// As [`KernelMeta::load`].
    pub fn open(meta_path: &Path) -> Result<Artifact, MetaError> {
        let meta = KernelMeta::load(meta_path)?;
        let dir = meta_path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(Artifact { meta, dir })
    }

    /// Path of the PTX file.
    pub fn ptx_path(&self) -> PathBuf {
        self.dir.join(&self.meta.files.ptx)
    }

    /// Path of the cubin, when the artifact has one.
    pub fn cubin_path(&self) -> Option<PathBuf> {
        self.meta.files.cubin.as_ref().map(|c| self.dir.join(c))
    }
}

/// Parses a target name `sm_XY` / `sm_XYa` / `sm_XYf` into (major, minor, arch-specific).
/// `sm_90a` → `(9, 0, true)`, `sm_100a` → `(10, 0, true)`. `None` if malformed.
pub fn parse_target(target: &str) -> Option<(u32, u32, bool)> {
    let rest = target.strip_prefix("sm_")?;
    let (digits, specific) = match rest.strip_suffix('a').or_else(|| rest.strip_suffix('f')) {
        Some(d) => (d, true),
        None => (rest, false),
    };
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some((major.parse().ok()?, minor.parse().ok()?, specific))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(parse_target("sm_90a"), Some((9, 0, true)));
        assert_eq!(parse_target("sm_100a"), Some((10, 0, true)));
        assert_eq!(parse_target("sm_80"), Some((8, 0, false)));
        assert_eq!(parse_target("sm_9"), None);
        assert_eq!(parse_target("compute_90"), None);
        assert_eq!(parse_target("sm_x0"), None);
    }

    #[test]
    fn opens_fixture() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/axpb.meta.json");
        let a = Artifact::open(&p).unwrap();
        assert_eq!(a.ptx_path(), Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/axpb.ptx"));
        assert_eq!(a.cubin_path(), None);
    }
}
