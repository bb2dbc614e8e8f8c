//! The red team: tricks that a loose `allclose` accepts, each meant to be caught by one gate,
//! and the honest candidates that must pass every applicable gate. [`matrix`] runs the battery
//! on all of them.

pub mod index_tricks;
pub mod matrix;
pub mod op_tricks;
pub mod size_tricks;
pub mod tricks;

pub use op_tricks::honest_twins;
pub use size_tricks::external_only_tricks;
pub use tricks::{honest_blocked_grad, honest_matmul, honest_max, tricks, Trick};
