//! `tilec check FILE [--target sm_100a|sm_90a|all] [--emit ir|tmem-plan|tmem-plan-json|smem-plan]
//! [-D warnings]`: every front-end check and every planner `tilec build` runs (TMEM, shared
//! memory with its budget, per target), without code generation.
//!
//! Exit codes: 0 — no errors; 1 — the program has errors (diagnostics on stderr);
//! 2 — the file could not be read or the arguments are wrong.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::TargetArg;
use crate::frontend::{check_source, Options};
use crate::ir::write::write_module;
use crate::passes::{smem_report, tmem_report};

/// What `--emit` prints on stdout.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Emit {
    /// The tile IR after planning (text form).
    Ir,
    /// The TMEM plan as a table and column map.
    TmemPlan,
    /// The TMEM plan as JSON (metadata form).
    TmemPlanJson,
    /// The shared-memory plan per kernel and target: every buffer's offset, bytes and live range.
    SmemPlan,
}

/// Arguments of `tilec check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The .tile file.
    pub file: PathBuf,
    /// Size parameters (`--const K=64`).
    #[command(flatten)]
    pub consts: super::ConstArgs,
    /// Target(s) whose planners and limits to check.
    #[arg(long, value_enum, default_value = "all")]
    pub target: TargetArg,
    /// Print artifacts of the check (repeatable, or comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub emit: Vec<Emit>,
    /// `-D warnings`: treat warnings as errors.
    #[arg(short = 'D', value_name = "LINT")]
    pub deny: Vec<String>,
    /// Colour diagnostics (default: when stderr is a terminal).
    #[arg(long)]
    pub color: Option<bool>,
    /// Print at most this many diagnostics, then a count of the rest (0: all).
    #[arg(long, value_name = "N", default_value_t = crate::diag::DEFAULT_LIMIT)]
    pub error_limit: usize,
}

/// Runs `tilec check`.
pub fn run(a: &CheckArgs) -> ExitCode {
    let src = match std::fs::read(&a.file) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    for d in &a.deny {
        if d != "warnings" {
            eprintln!("error: unknown lint group `{d}` for -D (only `warnings` exists)");
            return ExitCode::from(2);
        }
    }
    let Some(size_values) = a.consts.values_or_report() else { return ExitCode::from(2) };
    let checked = check_source(&src, &Options { deny_warnings: !a.deny.is_empty(), targets: a.target.targets(), size_values, ..Options::default() }.for_file(&a.file));
    let color = a.color.unwrap_or_else(|| std::io::stderr().is_terminal());
    let name = a.file.display().to_string();
    if !checked.diags.is_empty() {
        eprint!("{}", checked.diags.render_with(&name, &src, color, a.error_limit));
    }
    for e in &a.emit {
        match e {
            Emit::Ir => {
                print!("{}", write_module(&checked.module));
                for pk in checked.kernels() {
                    for tp in pk.targets {
                        print!("{}", crate::passes::layout_report::render(pk.kernel, tp));
                    }
                }
            }
            Emit::TmemPlan => {
                for p in &checked.plans {
                    print!("{}", tmem_report::render_text(p));
                }
            }
            Emit::SmemPlan => {
                for pk in checked.kernels() {
                    for tp in pk.targets {
                        print!("{}", smem_report::render_text(pk.kernel, tp, Some(&src)));
                    }
                }
            }
            Emit::TmemPlanJson => {
                let metas: Vec<_> = checked.plans.iter().map(|p| serde_json::json!({"kernel": p.kernel, "tmem": tmem_report::to_meta(p)})).collect();
                match serde_json::to_string_pretty(&metas) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("error: cannot serialise the plan: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
        }
    }
    let (errors, warnings) = checked.diags.iter().fold((0, 0), |(e, w), d| match d.severity {
        crate::diag::Severity::Error => (e + 1, w),
        crate::diag::Severity::Warning => (e, w + 1),
    });
    if errors > 0 {
        eprintln!("error: {name}: {errors} error{}, {warnings} warning{}", if errors == 1 { "" } else { "s" }, if warnings == 1 { "" } else { "s" });
        ExitCode::from(1)
    } else {
        if a.emit.is_empty() {
            let kernels: Vec<String> = checked
                .kernels()
                .zip(&checked.origins)
                .filter(|(_, o)| o.is_none())
                .map(|(pk, _)| {
                    let smem: Vec<String> = pk.targets.iter().map(|t| format!("{} B smem on {}", t.smem_bytes(), t.target)).collect();
                    let contract = pk.kernel.contract.as_ref().map(|c| format!("; contract {}", c.class)).unwrap_or_default();
                    format!("{} (TMEM {} columns; {}{contract})", pk.kernel.name, pk.tmem.alloc_columns, smem.join(", "))
                })
                .collect();
            let mut what = if kernels.is_empty() { "no kernels".to_string() } else { kernels.join(", ") };
            let imported: Vec<&str> = checked.module.kernels.iter().zip(&checked.origins).filter(|(_, o)| o.is_some()).map(|(k, _)| k.name.as_str()).collect();
            if !imported.is_empty() {
                what.push_str(&format!("; imported: {}", imported.join(", ")));
            }
            for op in &checked.module.operators {
                let contract = op.contract.map(|m| format!(", contract {}", m.name())).unwrap_or_default();
                let (nl, nb) = (op.launches.len(), op.buffers.len());
                what.push_str(&format!("; operator {} ({nl} launch{}, {nb} buffer{}{contract})", op.name, if nl == 1 { "" } else { "es" }, if nb == 1 { "" } else { "s" }));
            }
            eprintln!("ok: {name}: {what}; {warnings} warning{}", if warnings == 1 { "" } else { "s" });
        }
        ExitCode::SUCCESS
    }
}
