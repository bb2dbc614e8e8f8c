//! The one pipeline driver, up to checked and planned IR: parse → lower → validate → lints →
//! TMEM plan → per target: fusion, shared-memory plan (budget E0405), barriers
//! ([`crate::passes::target_plan`]). `tilec check`, `tilec build`, `tilec run --interp` and tests
//! all go through it, so `check` reports every planning error `build` would hit.

use std::path::{Path, PathBuf};

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{validate, Kernel, Module};
use crate::passes::target_plan::{self, TargetPlan};
use crate::passes::{lints, tmem_plan};
use crate::target::Target;

/// Options of a front-end run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Treat warnings as errors (`-D warnings`).
    pub deny_warnings: bool,
    /// Targets to plan for (default: every target).
    pub targets: Vec<Target>,
    /// The directory `import "path";` is relative to: the importing file's. `None` (a source
    /// text without a file) refuses imports (E0206).
    pub import_dir: Option<PathBuf>,
    /// The checked file itself (so that it cannot import itself).
    pub file: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options { deny_warnings: false, targets: Target::ALL.to_vec(), import_dir: None, file: None }
    }
}

impl Options {
    /// These options for the file at `path`: imports resolve from its directory.
    pub fn for_file(mut self, path: &Path) -> Options {
        self.import_dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_default());
        self.file = Some(path.to_path_buf());
        self
    }
}

/// A file whose kernels were imported (directly or through another import).
#[derive(Clone, Debug)]
pub struct Imported {
    /// Its path, as resolved from the importing file's directory.
    pub path: PathBuf,
    /// Its source text (for the artifacts' source hash).
    pub src: String,
}

/// The result of checking one file.
#[derive(Debug)]
pub struct Checked {
    /// Kernels that lowered and planned without errors (with TMEM lifecycle inserted).
    pub module: Module,
    /// One TMEM plan per kernel of `module`, in the same order (use [`Checked::kernels`]).
    pub plans: Vec<tmem_plan::TmemPlan>,
    /// Per kernel of `module`, one plan per target of [`Options::targets`] (use
    /// [`Checked::kernels`]).
    pub target_plans: Vec<Vec<TargetPlan>>,
    /// Every diagnostic, errors and warnings.
    pub diags: Diagnostics,
    /// Imported files, in order of first import.
    pub imports: Vec<Imported>,
    /// Per kernel of `module`: `None` for this file's own, else the index in `imports` of the
    /// file that defines it. Imported kernels come after the file's own.
    pub origins: Vec<Option<usize>>,
}

/// One checked kernel with all of its plans.
#[derive(Copy, Clone, Debug)]
pub struct PlannedKernel<'a> {
    /// The kernel's IR.
    pub kernel: &'a Kernel,
    /// Its TMEM plan.
    pub tmem: &'a tmem_plan::TmemPlan,
    /// Its per-target plans, in [`Options::targets`] order.
    pub targets: &'a [TargetPlan],
}

impl PlannedKernel<'_> {
    /// The plan for `t`, if `t` was planned.
    pub fn target(&self, t: Target) -> Option<&TargetPlan> {
        self.targets.iter().find(|p| p.target == t)
    }
}

impl Checked {
    /// Whether compilation may proceed.
    pub fn ok(&self) -> bool {
        !self.diags.has_errors()
    }

    /// Every kernel with its plans.
    pub fn kernels(&self) -> impl Iterator<Item = PlannedKernel<'_>> {
        self.module.kernels.iter().zip(&self.plans).zip(&self.target_plans).map(|((kernel, tmem), targets)| PlannedKernel { kernel, tmem, targets })
    }
}

/// Checks a source text. Never panics on any input.
pub fn check_source(src: &str, opts: &Options) -> Checked {
    let mut stack: Vec<PathBuf> = opts.file.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect();
    check_importing(src, opts, &mut stack)
}

/// Reads and checks the file at `path` (imports resolve from its directory).
///
/// # Errors
/// The file cannot be read.
pub fn check_file(path: &Path, opts: &Options) -> std::io::Result<(String, Checked)> {
    let src = String::from_utf8_lossy(&std::fs::read(path)?).into_owned();
    let checked = check_source(&src, &opts.clone().for_file(path));
    Ok((src, checked))
}

/// What the imports of one file contribute: their checked kernels with plans.
#[derive(Default)]
struct Imports {
    kernels: Vec<Kernel>,
    plans: Vec<tmem_plan::TmemPlan>,
    target_plans: Vec<Vec<TargetPlan>>,
    files: Vec<Imported>,
    origins: Vec<Option<usize>>,
}

/// Checks every `import` of `file` (recursively; `stack` holds the files being checked, to
/// refuse a cycle). An import that fails is one E0206 at its path.
fn imports(file: &crate::syntax::ast::File, opts: &Options, stack: &mut Vec<PathBuf>, diags: &mut Diagnostics) -> Imports {
    let mut out = Imports::default();
    for item in &file.items {
        let crate::syntax::ast::Item::Import(i) = item else { continue };
        let err = |msg: String, label: &str| Diagnostic::error(Code::BadImport, msg, i.path_span, label.to_string());
        let Some(dir) = &opts.import_dir else {
            diags.push(err(format!("cannot import \"{}\" from a source text that has no file", i.path), "no directory to resolve it from").with_note("help: check or build the file by its path"));
            continue;
        };
        let path = dir.join(&i.path);
        let canon = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if stack.contains(&canon) {
            diags.push(err(format!("\"{}\" imports itself (through {})", i.path, stack.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" → ")), "import cycle"));
            continue;
        }
        if out.files.iter().any(|f| std::fs::canonicalize(&f.path).unwrap_or_else(|_| f.path.clone()) == canon) {
            continue; // already imported (directly or through another import)
        }
        let src = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                diags.push(err(format!("cannot read {}: {e}", path.display()), "imported here").with_note("help: the path is relative to the importing file's directory"));
                continue;
            }
        };
        stack.push(canon);
        let sub = check_importing(&src, &Options { deny_warnings: false, ..opts.clone() }.for_file(&path), stack);
        stack.pop();
        if !sub.ok() {
            let first = sub.diags.iter().find(|d| d.severity == crate::diag::Severity::Error).map(|d| format!("{}: {}", d.code.as_str(), d.message)).unwrap_or_default();
            diags.push(
                err(format!("imported file {} does not compile", path.display()), "imported here")
                    .with_note(format!("its first error: {first}"))
                    .with_note(format!("help: run `tilec check {}` for every diagnostic", path.display())),
            );
            continue;
        }
        let base = out.files.len();
        out.files.push(Imported { path: path.clone(), src });
        out.files.extend(sub.imports.iter().cloned());
        for ((k, origin), (plan, tp)) in sub.module.kernels.into_iter().zip(sub.origins).zip(sub.plans.into_iter().zip(sub.target_plans)) {
            if out.kernels.iter().any(|o| o.name == k.name) {
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

fn check_importing(src: &str, opts: &Options, stack: &mut Vec<PathBuf>) -> Checked {
    let (file, mut diags) = crate::syntax::parse(src);
    let imported = imports(&file, opts, stack, &mut diags);
    let (mut module, sema_diags) = crate::sema::lower_with_imports(&file, &imported.kernels);
    diags.extend(sema_diags);
    if let Err(errs) = validate::validate_module(&module) {
        // Lowering produced invalid IR: a compiler bug. Report it instead of continuing.
        for e in errs {
            let span = module.kernels.iter().find(|k| k.name == e.kernel).map(|k| internal_span(k, &e)).unwrap_or_default();
            diags.push(internal_error(&e, span));
        }
        return Checked { module: Module::default(), plans: vec![], target_plans: vec![], diags, imports: vec![], origins: vec![] };
    }
    let mut plans = vec![];
    let mut target_plans = vec![];
    let mut kept = vec![];
    // Unused-result lints only when the file has no error: a statement that failed to parse or
    // lower may be the one that used the value (one mistake, one diagnostic).
    let lint = !diags.has_errors();
    for mut k in module.kernels.drain(..) {
        if lint {
            diags.extend(lints::run(&k));
        }
        let tmem = match tmem_plan::run(&mut k) {
            Ok(p) => p,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        // The TMEM planner changed the kernel (lifecycle instructions): validate again, which
        // also gives the per-target passes their required analysis.
        let v = match validate::validate(&k) {
            Ok(v) => v,
            Err(errs) => {
                for e in &errs {
                    diags.push(internal_error(e, internal_span(&k, e)));
                }
                continue;
            }
        };
        let mut per_target = vec![];
        let mut failed = false;
        for &t in &opts.targets {
            match target_plan::run(&v, t) {
                Ok(p) => per_target.push(p),
                Err(d) => {
                    diags.push(d);
                    failed = true;
                }
            }
        }
        if !failed {
            plans.push(tmem);
            target_plans.push(per_target);
            kept.push(k);
        }
    }
    let mut origins = vec![None; kept.len()];
    module.kernels = kept;
    module.kernels.extend(imported.kernels);
    plans.extend(imported.plans);
    target_plans.extend(imported.target_plans);
    origins.extend(imported.origins);
    if opts.deny_warnings {
        diags.deny_warnings();
    }
    Checked { module, plans, target_plans, diags, imports: imported.files, origins }
}

/// The source span of a validation error: its instruction's, else the kernel's.
fn internal_span(k: &Kernel, e: &validate::ValidateError) -> crate::diag::Span {
    e.inst.and_then(|i| k.inst_spans.get(i).copied()).unwrap_or(k.span)
}

/// A validation error after a pass: the compiler's own bug (E0900), pointing at the source.
fn internal_error(e: &validate::ValidateError, span: crate::diag::Span) -> crate::diag::Diagnostic {
    crate::diag::Diagnostic::error(crate::diag::Code::Internal, format!("internal compiler error: invalid IR: {e}"), span, "the compiler produced invalid IR here; please report this")
}
