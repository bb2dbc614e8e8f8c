//! tilec: a compiler for a small tile DSL targeting NVIDIA Blackwell (`sm_100a`: tcgen05 tensor
//! cores and tensor memory) and Hopper (`sm_90a`).
//!
//! Pipeline (see `docs/architecture.md`):
//! `.tile` → [`syntax`] (logos lexer, lalrpop parser, AST with spans) → [`sema`] (names, types,
//! shapes, target rules; lowers to the tile [`ir`]) → [`passes`] (TMEM plan, lints) →
//! back end (PTX) and metadata.

// Lint policy (docs/architecture.md): every public item is documented; library code reports
// errors instead of panicking or printing (the CLI modules print, and say so).
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::todo, clippy::dbg_macro, clippy::print_stdout, clippy::print_stderr))]

pub mod diag;
pub use tilec_abi::target;
pub mod layout;
pub mod ir;
pub mod interp;
pub mod syntax;
pub mod sema;
pub mod passes;
pub mod frontend;
pub mod imports;
pub mod cli;
pub mod backend;
pub mod artifact;
pub mod build;
pub mod cache;
pub mod parallel;
pub mod verify;
