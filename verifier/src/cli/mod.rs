//! Command-line subcommands of `kverify` (argument types and run functions; `main.rs` wires them).

#![allow(clippy::print_stdout, clippy::print_stderr)] // the subcommands talk to the user

pub mod reference;
pub mod candidates;
pub mod check;
pub mod gates_cmd;
pub mod redteam_cmd;
pub mod calibrate_cmd;
pub mod tilec_args;
pub mod audit_cmd;
