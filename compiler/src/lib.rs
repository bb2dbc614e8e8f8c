//! tilec: a compiler for a small tile DSL targeting NVIDIA Blackwell (`sm_100a`: tcgen05 tensor
//! cores and tensor memory) and Hopper (`sm_90a`).
//!
//! Pipeline (see `docs/architecture.md`):
//! `.tile` → [`syntax`] (logos lexer, lalrpop parser, AST with spans) → [`sema`] (names, types,
//! shapes, target rules; lowers to the tile [`ir`]) → [`passes`] (TMEM plan, lints) →
//! back end (PTX) and metadata.

pub mod diag;
pub mod target;
pub mod layout;
pub mod ir;
pub mod interp;
pub mod syntax;
pub mod sema;
pub mod passes;
pub mod frontend;
pub mod cli;
pub mod backend;
pub mod artifact;
pub mod build;
