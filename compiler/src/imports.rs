//! `import "file.tile";`: following a file's imports (docs/operators.md, "Imports").
//!
//! Each file of the import graph is checked once per top-level check: a file reached again
//! through another path (a diamond) is not re-checked — its kernels are visible to the importer's
//! operators, and built once, from the first path. A cycle, a chain deeper than
//! [`MAX_IMPORT_DEPTH`], an unreadable file, a file with errors, or a kernel name that two files
//! define is one E0206 at the import's path.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::frontend::{check_importing, Imported, Options};
use crate::ir::Kernel;
use crate::passes::target_plan::TargetPlan;
use crate::passes::tmem_plan::TmemPlan;
use crate::syntax::ast;

/// Deepest import chain followed (a deeper one is refused, not a stack overflow).
pub const MAX_IMPORT_DEPTH: usize = 64;

/// The walk over one top-level file's import graph.
#[derive(Debug, Default)]
pub(crate) struct ImportCtx {
    /// Canonical paths of the files being checked, outermost first.
    pub stack: Vec<PathBuf>,
    /// Canonical path of every file checked so far → the kernels it makes visible (its own and
    /// its imports'); empty for a file that failed (reported once, where first imported).
    pub done: HashMap<PathBuf, Vec<Kernel>>,
}

/// What one file's imports contribute.
#[derive(Default)]
pub(crate) struct Imports {
    /// Kernels checked here for the first time, with their plans.
    pub kernels: Vec<Kernel>,
    /// Their TMEM plans.
    pub plans: Vec<TmemPlan>,
    /// Their per-target plans.
    pub target_plans: Vec<Vec<TargetPlan>>,
    /// Files imported for the first time here (directly or through them).
    pub files: Vec<Imported>,
    /// Per kernel: index in `files` of the file that defines it.
    pub origins: Vec<Option<usize>>,
    /// Kernels of files already checked through another path: visible, not built again.
    pub reused: Vec<Kernel>,
    /// Size parameters of the files imported for the first time here.
    pub size_params: Vec<crate::ir::SizeParam>,
}

/// The note an E0206 carries about the imported file's first error `d` (also how a repeat of
/// one refused `--const` is recognised: `frontend::size_params`).
pub(crate) fn first_error_note(d: &Diagnostic) -> String {
    format!("{}{}", first_error_prefix(d.code), d.message)
}

/// What [`first_error_note`] puts before the message of an error with `code`.
pub(crate) fn first_error_prefix(code: Code) -> String {
    format!("its first error: {}: ", code.as_str())
}

/// Follows every `import` of `file`.
pub(crate) fn resolve(file: &ast::File, opts: &Options, ctx: &mut ImportCtx, diags: &mut Diagnostics) -> Imports {
    let mut out = Imports::default();
    for item in &file.items {
        let ast::Item::Import(i) = item else { continue };
        let err = |msg: String, label: &str| Diagnostic::error(Code::BadImport, msg, i.path_span, label.to_string());
        let Some(dir) = opts.import_dir() else {
            diags.push(err(format!("cannot import \"{}\" from a source text that has no file", i.path), "no directory to resolve it from").with_note("help: check or build the file by its path"));
            continue;
        };
        let path = dir.join(&i.path);
        let canon = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if ctx.stack.contains(&canon) {
            let chain: Vec<String> = ctx.stack.iter().map(|p| p.display().to_string()).collect();
            diags.push(err(format!("\"{}\" imports itself (through {})", i.path, chain.join(" → ")), "import cycle"));
            continue;
        }
        if let Some(kernels) = ctx.done.get(&canon) {
            // Checked already (through another path, or imported twice): visible, built once.
            for k in kernels {
                if !out.kernels.iter().chain(&out.reused).any(|o| o.name == k.name) {
                    out.reused.push(k.clone());
                }
            }
            continue;
        }
        if ctx.stack.len() > MAX_IMPORT_DEPTH {
            diags.push(err(format!("imports nested more than {MAX_IMPORT_DEPTH} deep"), "not followed").with_note("help: import the files you need directly"));
            continue;
        }
        let src = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                diags.push(err(format!("cannot read {}: {e}", path.display()), "imported here").with_note("help: the path is relative to the importing file's directory"));
                continue;
            }
        };
        ctx.stack.push(canon.clone());
        let sub = check_importing(&src, &Options { deny_warnings: false, ..opts.clone() }.for_file(&path), ctx);
        ctx.stack.pop();
        if !sub.ok() {
            ctx.done.insert(canon, vec![]);
            let first = sub.diags.iter().find(|d| d.severity == crate::diag::Severity::Error);
            let mut d = err(format!("imported file {} does not compile", path.display()), "imported here");
            match first {
                // A failed import of its own: pass the root cause up, not the next file of the chain.
                Some(f) if f.code == Code::BadImport && f.notes.iter().any(|n| n.starts_with("its first error") || n.starts_with("the root cause")) => {
                    for n in &f.notes {
                        d = d.with_note(n.clone());
                    }
                }
                Some(f) if f.code == Code::BadImport => {
                    d = d.with_note(format!("the root cause, in the imports of {}: {}", path.display(), f.message));
                }
                Some(f) => {
                    d = d.with_note(first_error_note(f)).with_note(format!("help: run `tilec check {}` for every diagnostic", path.display()));
                }
                None => {}
            }
            diags.push(d);
            continue;
        }
        let visible: Vec<Kernel> = sub.module.kernels.iter().chain(&sub.reused_imports).cloned().collect();
        out.size_params.extend(sub.size_params.iter().cloned());
        ctx.done.insert(canon, visible);
        for k in sub.reused_imports {
            if !out.kernels.iter().chain(&out.reused).any(|o| o.name == k.name) {
                out.reused.push(k);
            }
        }
        let base = out.files.len();
        out.files.push(Imported { path: path.clone(), src });
        out.files.extend(sub.imports.iter().cloned());
        for ((k, origin), (plan, tp)) in sub.module.kernels.into_iter().zip(sub.origins).zip(sub.plans.into_iter().zip(sub.target_plans)) {
            if out.kernels.iter().chain(&out.reused).any(|o| o.name == k.name) {
                diags.push(err(format!("kernel `{}` of {} is already imported from another file", k.name, path.display()), "imported here").with_note("help: kernel names must be unique across imports"));
                continue;
            }
            out.origins.push(Some(origin.map_or(base, |j| base + 1 + j)));
            out.kernels.push(k);
            out.plans.push(plan);
            out.target_plans.push(tp);
        }
    }
    out
}
