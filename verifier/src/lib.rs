//! kverify: fp64 references, gates and candidates for judging GPU kernels.

pub mod cli;
pub mod recurrence;
