//! The compilation driver up to checked, planned IR: parse → lower → validate → lints → TMEM
//! plan. Used by `tilec check`, `tilec build`, `tilec run --interp` and tests.

use crate::diag::Diagnostics;
use crate::ir::{validate, Module};
use crate::passes::{lints, tmem_plan};

/// Options of a front-end run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Treat warnings as errors (`-D warnings`).
    pub deny_warnings: bool,
}

/// The result of checking one file.
#[derive(Debug)]
pub struct Checked {
    /// Kernels that lowered without errors (with TMEM lifecycle inserted).
    pub module: Module,
    /// One TMEM plan per kernel of `module`, in the same order.
    pub plans: Vec<tmem_plan::TmemPlan>,
    /// Every diagnostic, errors and warnings.
    pub diags: Diagnostics,
}

impl Checked {
    /// Whether compilation may proceed.
    pub fn ok(&self) -> bool {
        !self.diags.has_errors()
    }
}

/// Checks a source text. Never panics on any input.
pub fn check_source(src: &str, opts: &Options) -> Checked {
    let (file, mut diags) = crate::syntax::parse(src);
    let (mut module, sema_diags) = crate::sema::lower(&file);
    diags.extend(sema_diags);
    if let Err(errs) = validate::validate_module(&module) {
        // Lowering produced invalid IR: a compiler bug. Report it instead of continuing.
        for e in errs {
            diags.push(crate::diag::Diagnostic::error(crate::diag::Code::Internal, format!("internal compiler error: invalid IR: {e}"), Default::default(), "please report this"));
        }
        return Checked { module: Module::default(), plans: vec![], diags };
    }
    let mut plans = vec![];
    let mut kept = vec![];
    for mut k in module.kernels.drain(..) {
        diags.extend(lints::run(&k));
        match tmem_plan::run(&mut k) {
            Ok(p) => {
                plans.push(p);
                kept.push(k);
            }
            Err(d) => diags.push(d),
        }
    }
    module.kernels = kept;
    if opts.deny_warnings {
        diags.deny_warnings();
    }
    Checked { module, plans, diags }
}
