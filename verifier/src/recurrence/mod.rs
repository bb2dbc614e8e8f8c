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
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    Shape { name: String, expected: Vec<usize>, got: Vec<usize> },
    #[error("tensor `{name}` contains a non-finite value")]
    NonFinite { name: String },
    #[error("chunk size {0} is not supported (use 16, 32 or 64)")]
    ChunkSize(usize),
    #[error("tensor `{name}` has dtype {dtype}; the fp64 reference accepts only F64 and never upcasts")]
    Dtype { name: String, dtype: String },
    #[error("tensor `{0}` is missing from the inputs")]
    Missing(String),
    #[error("invalid cu_seqlens: {0}")]
    CuSeqlens(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("safetensors: {0}")]
    Safetensors(String),
    #[error("i/o error on {path}: {source}")]
    Io { path: String, source: std::io::Error },
}
