//! The `tilec` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tilec", version, about = "Compiler for the tile DSL (Blackwell tcgen05/TMEM and Hopper)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse, type-check, plan tensor memory and lint a .tile file.
    Check(tilec::cli::check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check(a) => tilec::cli::check::run(&a),
    }
}
