//! `kverify` command line. Each subcommand's arguments and run function live in `kverify::cli`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "kverify", about = "Contract-grade verifier for GPU kernels: fp64 references and gates")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// fp64 reference forward + backward of a gated-linear-recurrence model (docs/oracle.md).
    Ref(kverify::cli::reference::RefArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ref(args) => kverify::cli::reference::run(&args),
    };
    match result {
        Ok(summary) => println!("{summary}"),
        Err(e) => {
            eprintln!("kverify: error: {e}");
            std::process::exit(1);
        }
    }
}
