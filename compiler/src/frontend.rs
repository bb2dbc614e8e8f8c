//! The one pipeline driver, up to checked and planned IR: parse → lower → validate → lints →
//! zero products → dead code → TMEM plan → per target: fusion, shared-memory plan (budget E0405), barriers
//! ([`crate::passes::target_plan`]). `tilec check`, `tilec build`, `tilec run --interp` and tests
//! all go through it, so `check` reports every planning error `build` would hit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diag::Diagnostics;
use crate::imports::ImportCtx;
use crate::ir::{validate, Kernel, Module, SizeParam};
use crate::passes::target_plan::{self, TargetPlan};
use crate::passes::{lints, tmem_plan};
use crate::target::Target;

mod size_params;

/// Options of a front-end run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Treat warnings as errors (`-D warnings`).
    pub deny_warnings: bool,
    /// Targets to plan for (default: every target).
    pub targets: Vec<Target>,
    /// The checked file: `import "path";` resolves from its directory, and it cannot import
    /// itself. `None` (a source text without a file) refuses imports (E0206).
    pub file: Option<PathBuf>,
    /// Values of size parameters for this build (`--const K=64`; see `const K = 128 in {64, 128};`),
    /// applied in every file of the import graph that declares the name.
    pub size_values: BTreeMap<String, i64>,
    /// `let` bindings and variables, by name, that dead-code elimination keeps though nothing
    /// stored depends on them: `tilec run --interp --dump NAME` records them.
    pub keep: Vec<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options { deny_warnings: false, targets: Target::ALL.to_vec(), file: None, size_values: BTreeMap::new(), keep: vec![] }
    }
}

impl Options {
    /// These options for the file at `path`: imports resolve from its directory.
    pub fn for_file(mut self, path: &Path) -> Options {
        self.file = Some(path.to_path_buf());
        self
    }

    /// The directory imports resolve from (the file's), if there is a file.
    pub fn import_dir(&self) -> Option<&Path> {
        self.file.as_deref().map(|f| f.parent().unwrap_or(Path::new("")))
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
    /// Kernels of files reached again through another import path (a diamond): visible to this
    /// file's operators, but built and listed in `module` only once, from the first path.
    pub reused_imports: Vec<Kernel>,
    /// The size parameters of this file and of the files it imports (first import path), with
    /// this build's values.
    pub size_params: Vec<SizeParam>,
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
    let stack: Vec<PathBuf> = opts.file.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect();
    let mut checked = check_importing(src, opts, &mut ImportCtx { stack, done: Default::default() });
    size_params::check_graph(&mut checked, &opts.size_values);
    checked
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

/// Checks a source text inside an import graph walk (`ctx`: the files being checked, and those
/// already checked).
pub(crate) fn check_importing(src: &str, opts: &Options, ctx: &mut ImportCtx) -> Checked {
    let (file, mut diags) = crate::syntax::parse(src);
    let imported = crate::imports::resolve(&file, opts, ctx, &mut diags);
    let visible: Vec<Kernel> = imported.kernels.iter().chain(&imported.reused).cloned().collect();
    let imports_failed = diags.iter().any(|d| d.code == crate::diag::Code::BadImport);
    let (mut module, sema_diags) = crate::sema::lower_with_imports(&file, &visible, imports_failed, &opts.size_values);
    for p in &mut module.size_params {
        p.file = opts.file.as_ref().map(|f| f.display().to_string());
    }
    let size_params: Vec<SizeParam> = module.size_params.iter().chain(&imported.size_params).cloned().collect();
    diags.extend(sema_diags);
    if let Err(errs) = validate::validate_module(&module) {
        // Lowering produced invalid IR: a compiler bug. Report it instead of continuing.
        for e in errs {
            let span = module.kernels.iter().find(|k| k.name == e.kernel).map(|k| internal_span(k, &e)).unwrap_or_default();
            diags.push(internal_error(&e, span));
        }
        return Checked { module: Module::default(), plans: vec![], target_plans: vec![], diags, imports: vec![], origins: vec![], reused_imports: vec![], size_params: vec![] };
    }
    let mut plans = vec![];
    let mut target_plans = vec![];
    let mut kept = vec![];
    // Unused-result lints only when the file has no error: a statement that failed to parse or
    // lower may be the one that used the value (one mistake, one diagnostic).
    let lint = !diags.has_errors();
    // Not the instances: the base kernel's lints cover their body, and code an instance drops
    // (`none`, `zeros`) is no mistake (an unread TMEM buffer it leaves is removed, not wasted).
    let instances: Vec<&str> = file.items.iter().filter_map(|i| match i {
        crate::syntax::ast::Item::Kernel(k) if k.instance.is_some() => Some(k.name.name.as_str()),
        _ => None,
    }).collect();
    // Each kernel's diagnostics apart, so that an instance's are attributed (syntax::instance).
    let mut chunks: Vec<(String, crate::diag::Diagnostics)> = vec![];
    for mut k in module.kernels.drain(..) {
        chunks.push((k.name.clone(), crate::diag::Diagnostics::new()));
        let Some((_, diags)) = chunks.last_mut() else { continue };
        if lint && !instances.contains(&k.name.as_str()) {
            diags.extend(lints::run(&k));
        }
        crate::passes::zero_products::run(&mut k);
        crate::passes::remat::run(&mut k);
        crate::passes::dce::run(&mut k, &opts.keep);
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
                Ok(p) => {
                    if let Some(d) = lints::residency(&k, &p) {
                        diags.push(d);
                    }
                    per_target.push(p);
                }
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
    diags.extend(crate::syntax::instance::attribute(&file, chunks));
    let mut origins = vec![None; kept.len()];
    module.kernels = kept;
    module.kernels.extend(imported.kernels);
    plans.extend(imported.plans);
    target_plans.extend(imported.target_plans);
    origins.extend(imported.origins);
    if opts.deny_warnings {
        diags.deny_warnings();
    }
    Checked { module, plans, target_plans, diags, imports: imported.files, origins, reused_imports: imported.reused, size_params }
}

/// The source span of a validation error: its instruction's, else the kernel's.
fn internal_span(k: &Kernel, e: &validate::ValidateError) -> crate::diag::Span {
    e.inst.and_then(|i| k.inst_spans.get(i).copied()).unwrap_or(k.span)
}

/// A validation error after a pass: the compiler's own bug (E0900), pointing at the source.
fn internal_error(e: &validate::ValidateError, span: crate::diag::Span) -> crate::diag::Diagnostic {
    crate::diag::Diagnostic::error(crate::diag::Code::Internal, format!("internal compiler error: invalid IR: {e}"), span, "the compiler produced invalid IR here; please report this")
}
