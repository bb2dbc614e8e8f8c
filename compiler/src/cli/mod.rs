//! Subcommands of the `tilec` binary, one file each.

pub mod check;
pub mod build;
pub mod run;
