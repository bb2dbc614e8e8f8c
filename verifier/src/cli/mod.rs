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

/// Parses a time limit in seconds (`--time-limit`): a finite number above zero, so that
/// `Duration::from_secs_f64` never sees a negative, NaN or infinite value (it panics on them).
///
/// # Errors
/// A message for clap when the text is not such a number.
pub fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e9 => Ok(v),
        Ok(v) => Err(format!("{v} is not a time limit: give seconds above 0 (at most 1e9)")),
        Err(_) => Err(format!("`{text}` is not a number of seconds")),
    }
}
