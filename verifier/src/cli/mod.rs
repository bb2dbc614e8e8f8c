//! Command-line subcommands of `kverify` (argument types and run functions; `main.rs` wires them).

pub mod reference;
