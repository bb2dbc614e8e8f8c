//! kverify: fp64 references, gates and candidates for judging GPU kernels.
//!
//! * [`tensor`]: dense tensors exchanged with candidates.
//! * [`error_model`]: unit roundoff, derived bounds.
//! * [`references`]: fp64 ground truth per operator class.
//! * [`candidate`]: in-process and external-process candidates, and the harness that runs them.
//! * [`gates`]: the twelve gates; [`battery`] runs them and forms the verdict.
//! * [`redteam`]: deliberately broken candidates and the honest one.
//! * [`calibrate`]: trip points and margins of the band gates.
//! * [`audit`]: judging KernelBench-style Model/ModelNew corpora (`kverify audit`).

// Lint policy (docs/architecture.md): every public item is documented; library code reports
// errors instead of panicking or printing (the CLI prints, and says so).
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::todo, clippy::dbg_macro, clippy::print_stdout, clippy::print_stderr))]

pub mod error_model;
pub mod references;
pub mod tensor;
pub mod cli;
pub mod recurrence;
pub mod battery;
pub mod candidate;
pub mod gates;
pub mod redteam;
pub mod calibrate;
pub mod calibrate_probes;
pub mod audit;
