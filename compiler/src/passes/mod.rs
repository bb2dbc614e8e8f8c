//! IR passes and analyses, one per file. The pipeline (see [`crate::frontend`]):
//!
//! 1. `sema` lowers the AST; afterwards the IR is valid ([`crate::ir::validate`]).
//! 2. [`lints`] — warnings on the lowered IR; then [`zero_products`] folds matrix products with
//!    an all-zero operand, [`remat`] gives each gather its own copy of a shared index
//!    expression, and [`dce`] removes code whose effect reaches no store.
//! 3. [`tmem_plan`] — TMEM placement; afterwards every TMEM variable has a column offset and
//!    the kernel has exactly one alloc / relinquish / dealloc.
//! 4. Per target ([`target_plan`]): [`fuse`] (elementwise fusion), [`smem_plan`] (shared-memory
//!    placement and its budget, E0405), [`pipeline`] (software pipelining), [`tma`] (which
//!    pipelined loads are TMA copies, their tensor maps), [`warp_spec`] (a producer warpgroup for
//!    a TMA loop, an experiment), [`bank_pad`] (padded rows for tiles read in fragment order),
//!    [`barriers`] (CTA barrier placement).
//!    The back end consumes the result and plans nothing itself.

pub mod bank_pad;
pub mod barriers;
pub mod dce;
pub mod fuse;
pub mod interval_plan;
pub mod layout_report;
pub mod lints;
pub mod liveness;
pub mod pipeline;
pub mod remat;
pub mod residency;
pub mod smem_plan;
pub mod smem_report;
pub mod target_plan;
pub mod tma;
pub mod tmem_plan;
pub mod tmem_report;
pub mod var_roles;
pub mod warp_spec;
pub mod zero_products;

#[cfg(test)]
mod interval_plan_tests;
