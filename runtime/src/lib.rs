//! tilec runtime: loads a tilec artifact and launches it on a GPU.
//!
//! - [`artifact`]: metadata plus the folder of its code files.
//! - [`tensor_map`]: the `cuTensorMapEncodeTiled` arguments of a kernel's TMA tensor maps.
//! - `launch` (feature `cuda`, on by default): loads PTX/cubin through cudarc and runs it.
//! - `tilec-run`, the command-line launcher (`src/bin/tilec-run.rs`).
//!
//! The metadata schema, size expressions, host tensors, argument binder and safetensors I/O
//! belong to the `tilec-abi` crate, which the compiler and kverify share; they are re-exported
//! here under their old paths (`tilec_runtime::meta`, …) so launch code reads naturally. They
//! are the same items, not copies.
//!
//! The driver (`libcuda.so.1`) is loaded at run time, so the crate builds and all GPU-free
//! parts are tested on machines without CUDA; a missing driver is an error, not a panic.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::todo, clippy::dbg_macro, clippy::print_stdout, clippy::print_stderr))]

pub mod artifact;
pub mod tensor_map;
#[cfg(feature = "cuda")]
pub mod launch;
pub mod plan;

pub use tilec_abi::{bind, expr, meta, round, st, tensor};
pub use tilec_abi::plan as plan_schema;
