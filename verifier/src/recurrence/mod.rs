//! fp64 ground truth for the gated-linear-recurrence family (gdn-math.md).
//!
//! The general recurrence, per sequence and head,
//! `S_t = (I − k_t (b_t ⊙ k_t)ᵀ) Diag(exp g_t) S_{t−1} + k_t (w_t ⊙ v_t)ᵀ`, `o_t = S_tᵀ(scale·q_t)`,
//! has three references that must agree:
//! - [`serial`]: token-serial forward and exact backward (the oracle, gdn-math.md §2);
//! - [`chunk`]: the chunkwise algorithm staged as the GPU pipeline (§3, §4), with the two hard
//!   backward stages as public functions matching the kernel contracts: [`k1`] (reverse state
//!   scan) and [`k2`] (WY / triangular-inverse VJP), and the blocked inverse in [`inverse`];
//! - [`family`]: LA, GLA, SSD/Mamba-2, KDA and GDN, each written from its own definition.
//!
//! [`batch`] runs any of them over fla's `[B, T, H, ·]` layouts with optional `cu_seqlens`, and
//! [`io`] reads and writes those tensors as fp64 safetensors. Nothing here accepts or produces a
//! value in a precision other than fp64.

// The numeric loops index several same-length rows by one channel or token index; iterator
// zips over four or five slices would hide the formulas they transcribe.
#![allow(clippy::needless_range_loop)]

pub mod batch;
pub mod chunk;
pub mod chunk_bwd;
pub mod chunk_fwd;
pub mod family;
pub mod intra;
pub mod inverse;
pub mod io;
pub mod k1;
pub mod k2;
pub mod problem;
pub mod serial;
pub mod tensor;

pub use problem::{HeadGrads, HeadInputs, HeadOutputs, HeadSeeds};
pub use tensor::{Mat, Tensor};

/// Errors of the fp64 references.
#[derive(Debug, thiserror::Error)]
pub enum RecurrenceError {
    /// A tensor's shape disagrees with the problem's sizes. An `expected` of all zeros means
    /// "any shape of this rank" (e.g. `q` must be 4-D).
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        /// Tensor name (fla's: `q`, `do`, `s0` ...).
        name: String,
        /// Required shape.
        expected: Vec<usize>,
        /// Shape found.
        got: Vec<usize>,
    },
    /// An input (or `scale`) holds a NaN or ±inf.
    #[error("tensor `{name}` contains a non-finite value")]
    NonFinite {
        /// Tensor name, or `scale`.
        name: String,
    },
    /// Chunk size C other than 16, 32 or 64.
    #[error("chunk size {0} is not supported (use 16, 32 or 64)")]
    ChunkSize(usize),
    /// A float tensor in an input file is not F64 (the oracle never upcasts).
    #[error("tensor `{name}` has dtype {dtype}; the fp64 reference accepts only F64 and never upcasts")]
    Dtype {
        /// Tensor name.
        name: String,
        /// Dtype found in the file.
        dtype: String,
    },
    /// A tensor the model requires is absent (value: its name).
    #[error("tensor `{0}` is missing from the inputs")]
    Missing(String),
    /// `cu_seqlens` is malformed: not 1-D int64, negative, not `0 = c_0 < c_1 < … < c_N = T`,
    /// or given with B ≠ 1.
    #[error("invalid cu_seqlens: {0}")]
    CuSeqlens(String),
    /// Any other bad argument (zero size, index out of range, a tensor the model does not take,
    /// a problem over the size limit, a worker thread that panicked).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A safetensors file is malformed (the message names the file or tensor).
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// Reading or writing a file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
}
