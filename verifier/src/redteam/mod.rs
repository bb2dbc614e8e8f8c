//! The red team: tricks that a loose `allclose` accepts, each meant to be caught by one gate,
//! and the honest candidates that must pass every applicable gate. [`matrix`] runs the battery
//! on all of them.

pub mod matrix;
pub mod tricks;

pub use tricks::{honest_blocked_grad, honest_matmul, honest_max, tricks, Trick};
