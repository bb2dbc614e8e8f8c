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

/// The bytes per second of allowance a call gets on top of the time limit for moving its own
/// data: writing the inputs, the candidate's process reading them, copies to a GPU and the
/// outputs back. Conservative (the first GPU run of CMP-03's probe past 2^31 flat elements,
/// 4.3 GB of bf16 A in and 4.3 GB of f32 C out, outlived the default 20 s limit on an H100:
/// docs/results.md, twenty-second session), and negligible below a few megabytes.
pub const TRANSFER_BYTES_PER_S: f64 = 50e6;

/// The time limit of one call: `base` (`--time-limit`) plus one second per
/// [`TRANSFER_BYTES_PER_S`] of twice the bytes of `inputs` (the inputs in, and outputs
/// assumed no larger back). `inputs` are the call's tensors as kverify hands them over — a
/// backward's incoming gradients included, before any widening — and every executor and the
/// harness's backstop count the same ones, so they agree on the limit and a call is judged
/// hanging only past the time its own data takes to move. (For CMP-03's probe past 2^31 on a
/// bf16 matmul, 4.3 GB of A: +172 s.)
pub fn call_time_limit<'a>(base: std::time::Duration, inputs: impl IntoIterator<Item = &'a Tensor>) -> std::time::Duration {
    let bytes: usize = inputs.into_iter().map(|t| t.len() * t.dtype().bytes()).sum();
    base + std::time::Duration::from_secs_f64(2.0 * bytes as f64 / TRANSFER_BYTES_PER_S)
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

#[cfg(test)]
mod tests {
    use super::call_time_limit;
    use crate::tensor::{DType, Tensor};
    use std::time::Duration;

    #[test]
    fn a_calls_limit_grows_with_its_bytes() {
        let base = Duration::from_secs(20);
        assert_eq!(call_time_limit(base, &[]), base);
        // 12.5 M bf16 elements = 25 MB; twice that at 50 MB/s is one second.
        let x = Tensor::from_f64(vec![12_500_000], &vec![0.0; 12_500_000], DType::Bf16);
        let extra = call_time_limit(base, &[x.clone()]) - base;
        assert!((extra.as_secs_f64() - 1.0).abs() < 1e-9, "{extra:?}");
        // An f32 input of the same length is twice the bytes; a kilobyte call gets microseconds.
        let y = Tensor::from_f64(vec![12_500_000], &vec![0.0; 12_500_000], DType::F32);
        assert!(((call_time_limit(base, &[x, y]) - base).as_secs_f64() - 3.0).abs() < 1e-9);
        let small = Tensor::from_f64(vec![256], &[1.0; 256], DType::F32);
        assert!(call_time_limit(base, &[small]) - base < Duration::from_micros(50));
    }
}
