//! Candidates: the kernels under judgement, behind one interface.
//!
//! * [`inprocess`]: Rust closures / structs in this process (the honest mirror, the red team).
//! * [`external`]: any program speaking the external-process protocol (`docs/candidate-protocol.md`),
//!   one subprocess per candidate with a time limit and a memory limit.
//! * [`tilec`]: tilec kernels, run one process per call by tilec's CPU interpreter or, for a
//!   built artifact, by the runtime's GPU launcher `tilec-run`.
//! * [`process`]: containment shared by every child process (subreaper shim, tree kill,
//!   bounded reads).
//! * [`harness`]: runs one call under a time limit, catches panics, and detects input mutation
//!   and output aliasing; every gate goes through it.

pub mod external;
pub mod harness;
pub mod inprocess;
pub mod process;
pub mod safetensors_io;
pub mod tilec;

use crate::error_model::Precision;
use crate::references::Dims;
use crate::tensor::{Device, Tensor};

/// What a candidate returned for one call.
#[derive(Debug, Clone, Default)]
pub struct CandidateOutput {
    /// Output tensors, in the operator's output order (gradients in input order for backward).
    pub outputs: Vec<Tensor>,
    /// Inputs the candidate's own harness saw modified (external workers report this).
    pub reported_mutations: Vec<usize>,
    /// (output, input) pairs whose memory overlaps, as reported by an external worker.
    pub reported_aliases: Vec<(usize, usize)>,
    /// The worker confirmed it handed the candidate the requested [`Layout`]s (it echoed them).
    pub layouts_applied: bool,
}

/// How one input reaches the candidate (CMP-03's layout probes, protocol field `layouts`):
/// always the same logical values, in another memory layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Dense row-major (the default).
    Contiguous,
    /// The last two axes stored column-major: a transposed view of a contiguous transpose.
    Transposed,
    /// A dense view starting [`LAYOUT_OFFSET`] elements into a larger buffer whose head is NaN.
    Offset,
    /// A stride-0 view along the first axis of extent > 1 (kverify makes the values constant
    /// along that axis first, so the view holds the same values).
    Expanded,
}

/// Elements of NaN before an [`Layout::Offset`] view's first element.
pub const LAYOUT_OFFSET: usize = 3;

/// Why a call produced no output.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum CandidateError {
    /// The candidate declined the input (e.g. an unsupported shape). Not a crash.
    #[error("refused: {0}")]
    Refused(String),
    /// The candidate panicked or was killed by a signal.
    #[error("crashed: {0}")]
    Crashed(String),
    /// No answer within the time limit.
    #[error("timed out after {limit_s:.1} s")]
    TimedOut {
        /// The limit, in seconds.
        limit_s: f64,
    },
    /// The process exited (with this code) instead of answering.
    #[error("exited with code {code}{}", if stderr_tail.is_empty() { String::new() } else { format!(": {stderr_tail}") })]
    Exited {
        /// Exit status.
        code: i32,
        /// Last lines of its stderr.
        stderr_tail: String,
    },
    /// The candidate answered something the protocol does not allow.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The candidate could not be started or talked to.
    #[error("i/o error: {0}")]
    Io(String),
    /// The candidate has no backward.
    #[error("candidate has no backward")]
    NoBackward,
}

impl CandidateError {
    /// True for crash, hang and exit: runtime failures that rule 9 reports as such.
    pub fn is_runtime_failure(&self) -> bool {
        matches!(self, CandidateError::Crashed(_) | CandidateError::TimedOut { .. } | CandidateError::Exited { .. })
    }
}

/// A kernel under judgement. Implementations must be callable from another thread.
pub trait Candidate: Send + Sync {
    /// Display name.
    fn name(&self) -> String;
    /// Operator class id it implements (see [`crate::references::all_ops`]).
    fn op_id(&self) -> String;
    /// Declared compute precision (the only precision it is charged against).
    fn precision(&self) -> Precision;
    /// `in-process` or `external`.
    fn kind(&self) -> &'static str;
    /// Whether [`Candidate::backward`] is implemented.
    fn has_backward(&self) -> bool {
        false
    }
    /// Forward call. `inputs` are the candidate's own copies in its declared input dtype; a
    /// kernel gets writable buffers, so mutation is possible (and RES-01 checks for it).
    fn forward(&self, dims: &Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError>;
    /// Backward call: input gradients given output gradients.
    fn backward(&self, _dims: &Dims, _inputs: &mut [Tensor], _grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        Err(CandidateError::NoBackward)
    }
    /// Start over in a fresh process, when the kind allows (ORD-02's cross-process check).
    /// Returns false when there is no process to restart.
    fn restart(&self) -> Result<bool, CandidateError> {
        Ok(false)
    }
    /// Where the kernel computes, as the candidate declares it: [`Device::Cpu`] unless it says
    /// otherwise (a tilec GPU artifact; an external manifest's `device`). Its answers still
    /// come back on the host (RES-01). CMP-03 probes past 2^31 flat elements only off the CPU.
    fn compute_device(&self) -> Device {
        Device::Cpu
    }
    /// The address-space cap of the candidate's process, MiB (0: none, or no process).
    fn memory_limit_mb(&self) -> u64 {
        0
    }
    /// Whether the candidate receives arrays that can be strided views (the NumPy worker):
    /// CMP-03 then also passes non-contiguous inputs through [`Candidate::forward_layout`].
    fn supports_layouts(&self) -> bool {
        false
    }
    /// Forward call with each input handed over in `layouts[i]` (same values). The default
    /// ignores the layouts (dense tensors) and leaves `layouts_applied` false.
    fn forward_layout(&self, dims: &Dims, inputs: &mut [Tensor], _layouts: &[Layout]) -> Result<CandidateOutput, CandidateError> {
        self.forward(dims, inputs)
    }
}
