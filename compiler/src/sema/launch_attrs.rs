//! Launch attributes after `threads(..)` (docs/language.md, "Residency"): `ctas_per_sm(N)` for
//! every target, `ctas_per_sm(sm_90a: N)` for one. Here: the names, the targets, one value per
//! target, and N within the SM's resident thread and CTA limits (E0404). Shared memory, the
//! register accumulators and tensor memory are checked per target once the plans exist
//! ([`crate::passes::residency`]: E0405, E0406, E0402).

use std::collections::HashMap;

use super::consts::eval_const;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::Kernel;
use crate::syntax::ast::KernelAttr;
use crate::target::{lookup, Target};

/// Lowers `attrs` into `kernel.ctas_per_sm` (its `threads` already set).
pub fn lower(attrs: &[KernelAttr], kernel: &mut Kernel, consts: &HashMap<String, i64>, diags: &mut Diagnostics) {
    let mut seen: Vec<Target> = vec![];
    for a in attrs {
        if a.name.name != "ctas_per_sm" {
            diags.push(
                Diagnostic::error(Code::BadLaunch, format!("unknown launch attribute `{}`", a.name.name), a.name.span, "not a launch attribute")
                    .with_note("help: the launch attribute is `ctas_per_sm(N)` or `ctas_per_sm(sm_90a: N)`: the CTAs per SM the kernel is built to keep resident, on every target or one"),
            );
            continue;
        }
        let targets: Vec<Target> = match &a.target {
            None => Target::ALL.to_vec(),
            Some(t) => match lookup(&t.name) {
                Ok(info) => vec![info.target],
                Err(_) => {
                    let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
                    diags.push(Diagnostic::error(Code::BadLaunch, format!("unknown target `{}`", t.name), t.span, "not a target").with_note(format!("help: the targets are {}", names.join(", "))));
                    continue;
                }
            },
        };
        // A repeat is one whatever became of the first (its value may have been refused).
        if let Some(t) = targets.iter().find(|t| seen.contains(t)) {
            diags.push(Diagnostic::error(Code::BadLaunch, format!("`ctas_per_sm` given twice for {}", t.name()), a.name.span, "repeated `ctas_per_sm`").with_note("help: keep one per target"));
            continue;
        }
        seen.extend(&targets);
        let limit = |f: fn(&crate::target::TargetInfo) -> u32| targets.iter().map(|t| f(t.info())).min().unwrap_or(0);
        let (ctas, threads) = (limit(|i| i.max_ctas_per_sm), limit(|i| i.max_threads_per_sm));
        let most = targets.iter().map(|t| t.info().most_resident_ctas(kernel.threads)).min().unwrap_or(0);
        match eval_const(&a.value, consts) {
            Ok(n) if n >= 1 && n <= i64::from(most) => kernel.ctas_per_sm.extend(targets.iter().map(|&t| (t, n as u32, a.value.span))),
            Ok(n) => diags.push(
                Diagnostic::error(Code::BadLaunch, format!("{n} CTAs per SM"), a.value.span, format!("must be in 1..={most}"))
                    .with_note(format!("an SM holds at most {ctas} CTAs and {threads} threads; with {} threads per CTA, {most}", kernel.threads))
                    .with_note(format!("help: write ctas_per_sm({most}) or fewer")),
            ),
            Err(d) => diags.push(d),
        }
    }
}
