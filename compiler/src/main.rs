//! The `tilec` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tilec", version, about = "Compiler for the tile DSL (Blackwell tcgen05/TMEM and Hopper)", after_help = ENVIRONMENT)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The environment variables tilec reads (`tilec --help`).
const ENVIRONMENT: &str = "Environment:
  TILEC_PTXAS             ptxas to assemble cubins with (else `ptxas` on PATH; scripts/setup.sh installs one)
  TILEC_CACHE_DIR         build cache folder (else $XDG_CACHE_HOME/tilec, else ~/.cache/tilec)
  TILEC_CACHE=0           no build cache (as `tilec build --no-cache`)
  TILEC_CACHE_MAX_MB      the cache's size limit in MiB, least recently used entries removed first (default 2048; 0: none)
  TILEC_TIMING=1          per-module compile times on stderr
  TILEC_VERIFY_EACH=1     LLVM's verifier after every pass (slow; for compiler bugs)
  TILEC_WARP_SPECIALIZE=1 a producer warpgroup for TMA main loops on sm_90a (an experiment: no faster on gemm, docs/results.md)";

#[derive(Subcommand)]
enum Cmd {
    /// Parse, type-check, plan tensor memory and lint a .tile file.
    Check(tilec::cli::check::CheckArgs),
    /// Compile a .tile file to PTX (sm_100a, sm_90a), cubins (when ptxas is found) and metadata.
    Build(tilec::cli::build::BuildArgs),
    /// Run a kernel on the CPU IR interpreter (`--interp`) with safetensors inputs.
    Run(tilec::cli::run::RunArgs),
    /// Write random inputs (names, dtypes and shapes of a kernel's parameters) as safetensors.
    Inputs(tilec::cli::inputs::InputsArgs),
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when stdout is closed early (`tilec check --emit ir |
    // head`) instead of panicking on a broken pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check(a) => tilec::cli::check::run(&a),
        Cmd::Build(a) => tilec::cli::build::run(&a),
        Cmd::Run(a) => tilec::cli::run::run(&a),
        Cmd::Inputs(a) => tilec::cli::inputs::run(&a),
    }
}
