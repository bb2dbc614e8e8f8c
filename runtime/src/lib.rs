//! tilec runtime: artifact metadata, argument binding and kernel launch.
pub mod meta;
