//! Resolving a candidate named on the command line.
//!
//! * `builtin:honest`, `builtin:honest-max`, `builtin:<trick>`: the in-process red team;
//! * `builtin:honest:<op>`: the honest f32 mirror of any operator class (i64 out for argmax/argmin);
//! * a path to a `*.json` manifest: an external-process candidate (`docs/candidate-protocol.md`).

use crate::candidate::external::{ExternalCandidate, Manifest};
use crate::candidate::inprocess::honest;
use crate::candidate::Candidate;
use crate::error_model::Precision;
use crate::redteam::{honest_matmul, honest_max, tricks};
use crate::references::op_by_id;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Errors resolving a candidate.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Unknown builtin.
    #[error("unknown builtin candidate `{0}` (try builtin:honest, builtin:honest:<op>, or a trick name from `kverify redteam`)")]
    UnknownBuiltin(String),
    /// Unknown operator.
    #[error("unknown operator `{0}`{hint}", hint = crate::references::op_hint(.0))]
    UnknownOp(String),
    /// Manifest problems.
    #[error("{0}")]
    Manifest(String),
}

/// Resolve `spec` into a candidate. External candidates get `time_limit` and `mem_limit_mb`.
pub fn resolve(spec: &str, time_limit: Duration, mem_limit_mb: u64) -> Result<Arc<dyn Candidate>, ResolveError> {
    if let Some(name) = spec.strip_prefix("builtin:") {
        if name == "honest" {
            return Ok(Arc::new(honest_matmul()));
        }
        if name == "honest-max" {
            return Ok(Arc::new(honest_max()));
        }
        if let Some(op) = name.strip_prefix("honest:") {
            let o = op_by_id(op).ok_or_else(|| ResolveError::UnknownOp(op.into()))?;
            // An index class declares its integer output (i64, PyTorch's argmax dtype).
            return Ok(Arc::new(honest(&o, crate::redteam::index_tricks::declared_for(&o, Precision::F32))));
        }
        let t = tricks().into_iter().find(|t| t.name == name).ok_or_else(|| ResolveError::UnknownBuiltin(name.into()))?;
        return Ok(Arc::new((t.build)()));
    }
    let m = Manifest::load(Path::new(spec)).map_err(|e| ResolveError::Manifest(e.to_string()))?;
    Ok(Arc::new(ExternalCandidate::new(m, time_limit, mem_limit_mb)))
}
