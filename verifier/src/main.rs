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
    /// List the twelve gates.
    Gates,
    /// Run the battery on a candidate (and/or RES-02 on --meta); exit 0 only when clean.
    Check(kverify::cli::check::CheckArgs),
    /// Judge the red team: tricks x gates matrix; exit 0 when every trick is caught by its gate
    /// and the honest candidates are clean.
    Redteam(kverify::cli::redteam_cmd::RedteamArgs),
    /// Calibrate the band gates: honest noise floor, trip point, onset of real error, margins.
    Calibrate(kverify::cli::calibrate_cmd::CalibrateArgs),
    /// Judge a KernelBench-style corpus (Model / ModelNew per row): gates, KernelBench's own
    /// check, the differential; resumable, shardable (docs/audit.md).
    Audit(kverify::cli::audit_cmd::AuditArgs),
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("kverify: error: {e}");
    std::process::exit(2);
}

fn main() {
    // Like other Unix tools, end quietly when stdout is closed early (`kverify gates | head`)
    // instead of panicking on a broken pipe.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A panicking in-process candidate is reported by the harness as a crash; keep its
    // backtrace off the terminal and leave every other panic to the default hook.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("kverify-candidate") {
            return;
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    match cli.command {
        Command::Ref(args) => match kverify::cli::reference::run(&args) {
            Ok(summary) => println!("{summary}"),
            Err(e) => {
                eprintln!("kverify: error: {e}");
                std::process::exit(1);
            }
        },
        Command::Gates => print!("{}", kverify::cli::gates_cmd::list()),
        Command::Check(a) => match kverify::cli::check::run(&a) {
            Ok(code) => std::process::exit(code),
            Err(e) => fail(e),
        },
        Command::Calibrate(a) => match kverify::cli::calibrate_cmd::run(&a) {
            Ok(code) => std::process::exit(code),
            Err(e) => fail(e),
        },
        Command::Audit(a) => match kverify::cli::audit_cmd::run(&a) {
            Ok(code) => std::process::exit(code),
            Err(e) => fail(e),
        },
        Command::Redteam(a) => match kverify::cli::redteam_cmd::run(&a) {
            Ok(code) => std::process::exit(code),
            Err(e) => fail(e),
        },
    }
}
