//! tilec-abi: the contract between the tilec compiler, its runtime and the kverify verifier.
//!
//! Everything here is something two of those tools must agree on bit for bit, so it exists
//! once:
//! - [`meta`]: the `*.meta.json` artifact schema (`docs/metadata.md`), loading and validation.
//! - [`plan`]: the `*.plan.json` schema of multi-kernel operators and their one executor.
//! - [`expr`]: size expressions of shapes and grids, with the kernels' truncating division.
//! - [`round`]: correctly rounded f32/f64 → bf16/f16 conversion.
//! - [`tensor`]: host tensors (bf16 / f16 / f32 / i32), dense and row-major.
//! - [`bind`]: checks arguments against a kernel's signature, infers sizes, computes the grid;
//!   used by the runtime's launcher and by the compiler's interpreter.
//! - [`st`]: safetensors files, the exchange format between all tools.
//! - [`rng`]: the seeded normal generator behind every tool's random inputs.
//! - [`hash`]: FNV-1a 64, for source hashes, checksums and seeds.
//! - [`target`]: the architectures and their limits ([`target::TargetInfo`]), read by the
//!   compiler's sema, planners and CLI and by kverify's RES-02.
//!
//! No GPU, no LLVM: the crate builds and is tested anywhere.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::panic, clippy::todo, clippy::dbg_macro, clippy::print_stdout))]

pub mod bind;
pub mod expr;
pub mod hash;
pub mod meta;
pub mod plan;
pub mod rng;
pub mod round;
pub mod st;
pub mod target;
pub mod tensor;
