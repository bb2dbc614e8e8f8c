//! IR passes and analyses, one per file. The pipeline (see [`crate::frontend`]):
//!
//! 1. `sema` lowers the AST; afterwards the IR is valid ([`crate::ir::validate`]).
//! 2. [`lints`] — warnings on the lowered IR.
//! 3. [`tmem_plan`] — TMEM placement; afterwards every TMEM variable has a column offset and
//!    the kernel has exactly one alloc / relinquish / dealloc.

pub mod interval_plan;
pub mod lints;
pub mod liveness;
pub mod tmem_plan;
pub mod tmem_report;

#[cfg(test)]
mod interval_plan_tests;
