//! tilec runtime: artifact metadata, host tensors, argument binding and kernel launch.
//!
//! - [`meta`]: the `*.meta.json` schema (`docs/metadata.md`), loading and validation.
//! - [`expr`]: the size-expression language of shapes and grids.
//! - [`tensor`] and [`st`]: host tensors (bf16 / f16 / f32 / i32) and safetensors files.
//! - [`bind`]: checks arguments against a kernel's signature, infers sizes, computes the grid.
//! - [`artifact`]: metadata plus the folder of its code files.
//! - `launch` (feature `cuda`, on by default): loads PTX/cubin through cudarc and runs it.
//!
//! The driver (`libcuda.so.1`) is loaded at run time, so the crate builds and all GPU-free
//! parts are tested on machines without CUDA; a missing driver is an error, not a panic.
#![cfg_attr(not(test), warn(clippy::panic, clippy::todo, clippy::dbg_macro, clippy::print_stdout))]

pub mod artifact;
pub mod bind;
pub mod expr;
#[cfg(feature = "cuda")]
pub mod launch;
pub mod meta;
pub mod st;
pub mod tensor;
