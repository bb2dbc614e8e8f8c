//! Semantic analysis and lowering: AST → tile IR.
//!
//! One walk over each kernel resolves names (constants, symbolic sizes, parameters, locals),
//! checks element types, memory spaces and tile shapes (including the target's MMA shape
//! rules), and emits IR with spans. Errors are collected; a failed expression yields no value
//! and its users are skipped silently, so one mistake gives one diagnostic.

mod consts;
mod contract;
mod edge;
mod expr;
mod launch_attrs;
mod offsets;
mod operator;
mod optional;
mod size_param;
mod stmt;
mod view;
pub mod target;

use std::collections::HashMap;

use crate::diag::{Code, Diagnostic, Diagnostics, Span};
use crate::ir::builder::Builder;
use crate::ir::{Elem, Kernel, Module, Param, ParamData, ParamKind, SizeExpr, SizeVar, Value, Var};
use crate::syntax::ast;

pub use consts::{eval_const, size_expr};

/// What a name refers to.
#[derive(Clone, Debug)]
enum Binding {
    Const(i64),
    Size(SizeVar),
    Tensor(Param),
    Scalar(Param),
    /// An immutable SSA binding.
    Value(Value),
    /// A variable; `mutable` when declared `let mut`.
    Var(Var, bool),
    /// A binding whose definition had an error (already reported): uses are silently skipped.
    Poisoned,
}

/// Lowers a parsed file to IR. Kernels and operators with errors are left out of the module.
pub fn lower(file: &ast::File) -> (Module, Diagnostics) {
    lower_with_imports(file, &[], false, &Default::default())
}

/// The element type a tensor, buffer or scalar parameter is stored in (`bf16`, `f16`, `f32`,
/// `i32`: not `bool`), spelled `name`.
///
/// # Errors
/// E0301 "unknown element type" at `name` for any other spelling.
pub(crate) fn storage_elem(name: &ast::Ident) -> Result<Elem, Diagnostic> {
    Elem::from_name(&name.name)
        .filter(|e| *e != Elem::Bool)
        .ok_or_else(|| Diagnostic::error(Code::TypeMismatch, format!("unknown element type `{}`", name.name), name.span, "expected bf16, f16, f32 or i32"))
}

/// As [`lower`], with the kernels of the files `file` imports: operators may launch them, and a
/// local kernel may not take one's name. They are not added to the returned module.
/// `imports_failed`: an import failed (already reported), so a launch of an unknown kernel is not
/// reported again. `size_values`: this build's values of size parameters (`--const K=64`; see
/// `size_param`).
pub fn lower_with_imports(file: &ast::File, imported: &[Kernel], imports_failed: bool, size_values: &std::collections::BTreeMap<String, i64>) -> (Module, Diagnostics) {
    let mut diags = Diagnostics::new();
    let mut consts: HashMap<String, i64> = HashMap::new();
    let mut const_spans: HashMap<String, Span> = HashMap::new();
    let mut module = Module::default();
    let mut kernel_names: HashMap<String, Span> = HashMap::new();
    // Each kernel's diagnostics apart, so that an instance's are attributed (syntax::instance).
    let mut kernel_diags: Vec<(String, Diagnostics)> = vec![];
    for item in &file.items {
        match item {
            ast::Item::Const(c) => {
                if let Some(prev) = const_spans.get(&c.name.name) {
                    diags.push(dup(&c.name, *prev));
                    continue;
                }
                // A kernel above that used the name took it as a symbolic size: the two meanings
                // would silently disagree (the constant, or a size parameter's set, would not
                // apply to that kernel).
                if let Some(k) = module.kernels.iter().find(|k| k.sizes.values().any(|s| *s == c.name.name)) {
                    diags.push(
                        Diagnostic::error(Code::DuplicateName, format!("`{}` is declared after kernel `{}` uses it as a symbolic size", c.name.name, k.name), c.name.span, "declared here")
                            .with_label(k.span, "uses it above, where it is not yet a constant")
                            .with_note("help: declare constants before the kernels and operators that use them"),
                    );
                }
                match size_param::resolve(c, &consts, size_values, &mut diags) {
                    // A constant is an i32 wherever it is used: one outside i32 would wrap on the
                    // GPU and stop the interpreter, so it is refused where it is defined.
                    Some((v, _)) if i32::try_from(v).is_err() => diags.push(
                        Diagnostic::error(Code::BadConst, format!("constant `{}` = {v} does not fit in i32", c.name.name), c.value.span, "outside -2147483648..=2147483647")
                            .with_note("constants are i32 values (index arithmetic is i32)"),
                    ),
                    Some((v, param)) => {
                        consts.insert(c.name.name.clone(), v);
                        module.size_params.extend(param);
                    }
                    None => {}
                }
                const_spans.insert(c.name.name.clone(), c.name.span);
            }
            ast::Item::Kernel(k) => {
                if let Some(prev) = kernel_names.get(&k.name.name) {
                    diags.push(dup(&k.name, *prev));
                    continue;
                }
                if imported.iter().any(|i| i.name == k.name.name) {
                    diags.push(
                        Diagnostic::error(Code::DuplicateName, format!("kernel `{}` is also defined in an imported file", k.name.name), k.name.span, "redefined here")
                            .with_note("help: kernel names are the artifacts' file names and must be unique across imports: rename one"),
                    );
                    continue;
                }
                kernel_names.insert(k.name.name.clone(), k.name.span);
                let mut kd = Diagnostics::new();
                let mut kernel = KernelLowering::run(k, &consts, &mut kd);
                let ok = !kd.has_errors();
                contract::lower(k, &mut kernel, ok, &mut kd);
                kernel_diags.push((k.name.name.clone(), kd));
                if ok {
                    module.kernels.push(kernel);
                }
            }
            ast::Item::Import(_) | ast::Item::Operator(_) | ast::Item::Instance(_) | ast::Item::Error(_) => {}
        }
    }
    diags.extend(crate::syntax::instance::attribute(file, kernel_diags));
    // Operators after every kernel: a launch may name a kernel defined further down.
    let mut op_names: HashMap<String, Span> = HashMap::new();
    let mut failed: Vec<String> = kernel_names.keys().filter(|n| !module.kernels.iter().any(|k| &k.name == *n)).cloned().collect();
    failed.extend(file.refused_instances.iter().cloned()); // already reported where declared
    for item in &file.items {
        if let ast::Item::Operator(o) = item {
            if let Some(prev) = op_names.get(&o.name.name).or_else(|| kernel_names.get(&o.name.name)) {
                diags.push(
                    Diagnostic::error(Code::DuplicateName, format!("`{}` is defined twice", o.name.name), o.name.span, "redefined here")
                        .with_label(*prev, "first defined here")
                        .with_note("help: kernels and operators share one namespace (their artifacts' file names): rename one"),
                );
                continue;
            }
            if imported.iter().any(|k| k.name == o.name.name) {
                diags.push(
                    Diagnostic::error(Code::DuplicateName, format!("operator `{}` has the name of an imported kernel", o.name.name), o.name.span, "rename this operator")
                        .with_note("help: kernels and operators share one namespace (their artifacts' file names)"),
                );
                continue;
            }
            op_names.insert(o.name.name.clone(), o.name.span);
            let kernels: Vec<&Kernel> = module.kernels.iter().chain(imported).collect();
            match operator::lower(o, &consts, &kernels, &module.operators, &failed, imports_failed, &mut diags) {
                Some(mut op) => {
                    op.size_param_dims = size_param::dims(o, &module.size_params);
                    module.operators.push(op);
                }
                // A call of it is not checked again (its error is reported).
                None => failed.push(o.name.name.clone()),
            }
        }
    }
    (module, diags)
}

/// Whether a value of element type `operand` may be assigned (`=`, `+=`, `-=`) into a variable
/// of element type `var`: the same type, or any float into f32 (exact widening). `+=` into a
/// bf16/f16 variable adds in f32 and rounds back, so its operand must already be bf16/f16.
fn assignable(var: Elem, operand: Elem) -> bool {
    operand == var || (var == Elem::F32 && operand.is_float())
}

/// The help for a value of element type `from` where `to` is required.
fn conversion_note(to: Elem, from: Elem) -> String {
    if to == Elem::Bool || from == Elem::Bool {
        "between bool and numbers there is no conversion: use select(cond, a, b), or a comparison".into()
    } else if to.is_float() && from.is_float() {
        format!("narrowing is an explicit rounding point: write {to}(...)")
    } else {
        format!("convert explicitly with {to}(...)")
    }
}

fn dup(name: &ast::Ident, prev: Span) -> Diagnostic {
    Diagnostic::error(Code::DuplicateName, format!("`{}` is defined twice", name.name), name.span, "redefined here")
        .with_label(prev, "first defined here")
        .with_note(format!("help: names are not shadowed in this language: give the new value its own name (e.g. `{}2`), or make the first one `let mut` and assign", name.name))
}

/// State while lowering one kernel.
struct KernelLowering<'a> {
    b: Builder<'a>,
    /// How many grid axes the kernel declares (`program_id` beyond them is always 0).
    grid_rank: usize,
    /// Whether the body holds a statement or expression the parser could not read (so a store
    /// may be missing because of it).
    saw_parse_error: bool,
    /// Spans of the bindings a name lookup found (for W0504, unused `let`).
    used: std::cell::RefCell<std::collections::HashSet<Span>>,
    /// Every `let` binding: its name, whether its value is a `load` (W0502 covers those).
    lets: Vec<(ast::Ident, bool)>,
    consts: &'a HashMap<String, i64>,
    scopes: Vec<HashMap<String, (Binding, Span)>>,
    /// Mutable scalars: `[1, 1]` register variables whose reads are scalars.
    scalar_vars: std::collections::HashSet<Var>,
    /// Input tensors an instance declares all zeros (`ast::KernelDecl::zeroed`): a load of one
    /// is a zero tile; they leave the signature after lowering ([`drop_params`]).
    zeroed: Vec<crate::ir::Param>,
    diags: &'a mut Diagnostics,
}

impl<'a> KernelLowering<'a> {
    fn run(k: &ast::KernelDecl, consts: &HashMap<String, i64>, diags: &mut Diagnostics) -> Kernel {
        let errors_before = diags.error_count();
        let mut kernel = Kernel::new(&k.name.name, k.name.span);
        let mut global: HashMap<String, (Binding, Span)> = HashMap::new();
        for (n, v) in consts {
            global.insert(n.clone(), (Binding::Const(*v), Span::default()));
        }
        signature(k, consts, &mut kernel, &mut global, diags);
        let zeroed: Vec<crate::ir::Param> = kernel.params.iter().filter(|(_, d)| k.zeroed.contains(&d.name)).map(|(p, _)| p).collect();
        let mut cx = KernelLowering { b: Builder::new(&mut kernel), grid_rank: k.grid.len(), saw_parse_error: false, used: Default::default(), lets: vec![], consts, scopes: vec![global], scalar_vars: Default::default(), zeroed: zeroed.clone(), diags };
        cx.block(&k.body);
        let saw_parse_error = cx.saw_parse_error;
        // Unused bindings are worth a warning only in a kernel that otherwise lowered cleanly: a
        // failed statement elsewhere may be the one that would have used them.
        // Not in an instance: its body is the base kernel's, warned about there, less what the
        // instance drops (a `let` only a dropped store used is no mistake of the instance's).
        let clean = !cx.saw_parse_error && !cx.diags.has_errors_since(errors_before) && k.instance.is_none();
        for (name, covered) in &cx.lets {
            if clean && !*covered && !name.name.starts_with('_') && !cx.used.borrow().contains(&name.span) {
                cx.diags.push(
                    Diagnostic::warning(Code::UnusedLet, format!("`{}` is never used", name.name), name.span, "bound here")
                        .with_note(format!("help: remove the `let`, or name it `_{}` if it is meant to be unused", name.name)),
                );
            }
        }
        warpgroups_for_tmem(k, &kernel, diags);
        // A statement that failed to lower may have been the store: report a missing store only
        // for a kernel that otherwise lowered cleanly (one mistake, one diagnostic).
        if !saw_parse_error && !diags.has_errors_since(errors_before) {
            outputs_are_stored(k, &kernel, diags);
        }
        drop_params(&mut kernel, &zeroed);
        kernel
    }

    fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn lookup(&self, name: &str) -> Option<&(Binding, Span)> {
        let found = self.scopes.iter().rev().find_map(|s| s.get(name));
        if let Some((_, span)) = found {
            self.used.borrow_mut().insert(*span);
        }
        found
    }

    fn bind(&mut self, name: &ast::Ident, binding: Binding) {
        // Constant contexts (tile extents, range lengths) read `consts`, not the scopes: a local
        // that shadowed a constant was silently ignored there (`let C = 2; zeros(C, C)` made a
        // tile of the constant's extent). Shadowing a constant is therefore an error.
        if self.consts.contains_key(&name.name) {
            self.error(
                Diagnostic::error(Code::DuplicateName, format!("`{}` shadows a constant", name.name), name.span, "rename this binding")
                    .with_note("tile extents and range lengths always read the constant"),
            );
            return;
        }
        let scope = self.scopes.last_mut().unwrap_or_else(|| unreachable!("the kernel scope is never popped"));
        if let Some((_, prev)) = scope.get(&name.name) {
            if *prev != Span::default() {
                let prev = *prev;
                // Later uses mean the new value: bind it anyway, so the one mistake (reusing a
                // name) is reported once and not again as a type or shape error at every use.
                scope.insert(name.name.clone(), (binding, name.span));
                self.error(dup(name, prev));
                return;
            }
        }
        scope.insert(name.name.clone(), (binding, name.span));
    }

    fn block(&mut self, stmts: &[ast::Stmt]) {
        self.scopes.push(HashMap::new());
        for s in stmts {
            self.stmt(s);
        }
        self.scopes.pop();
    }
}

/// Removes the parameters `gone` from `k`'s signature, renumbering the others; no instruction
/// may name them (a zeroed input's loads are zero tiles).
fn drop_params(k: &mut Kernel, gone: &[crate::ir::Param]) {
    if gone.is_empty() {
        return;
    }
    let mut params = cranelift_entity::PrimaryMap::new();
    let mut new: cranelift_entity::SecondaryMap<crate::ir::Param, Option<crate::ir::Param>> = cranelift_entity::SecondaryMap::new();
    for (p, d) in k.params.iter() {
        if !gone.contains(&p) {
            new[p] = Some(params.push(d.clone()));
        }
    }
    let to = |p: &mut crate::ir::Param| *p = new[*p].expect("a zeroed input is never an instruction's operand");
    for (_, d) in k.insts.iter_mut() {
        match &mut d.op {
            crate::ir::Op::Load { src: p, .. } | crate::ir::Op::Store { dst: p, .. } | crate::ir::Op::ScalarParam(p) => to(p),
            _ => {}
        }
    }
    k.params = params;
}

/// Lowers the kernel signature: parameters, symbolic sizes, grid and threads.
fn signature(
    k: &ast::KernelDecl,
    consts: &HashMap<String, i64>,
    kernel: &mut Kernel,
    scope: &mut HashMap<String, (Binding, Span)>,
    diags: &mut Diagnostics,
) {
    offsets::refuse_on_kernel(k, diags);
    let mut params = lower_params(&k.params, consts, &mut kernel.sizes, diags);
    edge::lower(k, &mut params, diags);
    let sizes = kernel.sizes.clone();
    let size_of = |n: &str| crate::ir::size_named(&sizes, n);
    for (v, s) in sizes.iter() {
        scope.insert(s.clone(), (Binding::Size(v), Span::default()));
    }
    for (data, name_span) in params {
        let is_tensor = matches!(data.kind, ParamKind::Tensor { .. });
        let name = data.name.clone();
        let id = kernel.params.push(data);
        scope.insert(name, (if is_tensor { Binding::Tensor(id) } else { Binding::Scalar(id) }, name_span));
    }
    if k.grid.is_empty() || k.grid.len() > 3 {
        diags.push(Diagnostic::error(Code::BadLaunch, format!("grid has {} dimensions", k.grid.len()), k.grid_span, "expected 1 to 3"));
    }
    for (i, g) in k.grid.iter().take(3).enumerate() {
        match size_expr(g, consts, &size_of) {
            Ok(SizeExpr::Const(c)) if c <= 0 => diags.push(
                Diagnostic::error(Code::BadLaunch, format!("grid dimension {i} is {c}"), g.span, "launches no CTA").with_note("help: a grid extent is at least 1"),
            ),
            Ok(e) => kernel.grid[i] = e,
            Err(d) => diags.push(d),
        }
    }
    let mut threads_ok = true;
    if let Some(t) = &k.threads {
        // A kernel is built for every target, so it must fit the smallest limit of them all.
        let max = crate::target::Target::ALL.iter().map(|t| t.info().max_threads_per_cta).min().unwrap_or(1024);
        match eval_const(t, consts) {
            Ok(n) if n > 0 && n <= i64::from(max) && n % 32 == 0 => kernel.threads = n as u32,
            Ok(n) => {
                threads_ok = false;
                diags.push(Diagnostic::error(Code::BadLaunch, format!("{n} threads per CTA"), t.span, format!("must be a multiple of 32 in 32..={max}")));
            }
            Err(d) => {
                threads_ok = false;
                diags.push(d);
            }
        }
    }
    for s in &k.repeated_threads {
        diags.push(Diagnostic::error(Code::BadLaunch, "`threads` given twice".to_string(), *s, "second `threads`").with_note("help: keep one"));
    }
    // With a thread count in error the residency limits cannot be stated: its error stands alone.
    if threads_ok {
        launch_attrs::lower(&k.attrs, kernel, consts, diags);
    }
}

/// Lowers a kernel's or operator's parameter list: declares the symbolic sizes (bare names in
/// tensor shapes that are not constants) in `sizes`, then each parameter with its element type
/// and shape. A parameter with an error is reported and left out. Returns each parameter with
/// the span of its name.
pub(crate) fn lower_params(params: &[ast::ParamDecl], consts: &HashMap<String, i64>, sizes: &mut cranelift_entity::PrimaryMap<SizeVar, String>, diags: &mut Diagnostics) -> Vec<(ParamData, Span)> {
    // Sizes: the bare names of dimensions, and the factors of a product dimension `H * G`
    // (the binder solves it for the one factor no other dimension gives: GVA's value heads).
    for p in params {
        for d in p.shape.iter().flatten() {
            let factors: Vec<&ast::Expr> = match &d.kind {
                ast::ExprKind::Binary(ast::BinOp::Mul, a, b) => vec![a, b],
                _ => vec![d],
            };
            for f in factors {
                if let ast::ExprKind::Name(n) = &f.kind {
                    if !consts.contains_key(n) {
                        crate::ir::declare_size(sizes, n);
                    }
                }
            }
        }
    }
    let size_of = |n: &str| crate::ir::size_named(sizes, n);
    let is_size = |n: &str| size_of(n).is_some();
    let mut out = vec![];
    let mut seen: HashMap<String, Span> = HashMap::new();
    for p in params {
        if let Some(prev) = seen.get(&p.name.name) {
            diags.push(dup(&p.name, *prev));
            continue;
        }
        seen.insert(p.name.name.clone(), p.name.span);
        if is_size(&p.name.name) || consts.contains_key(&p.name.name) {
            diags.push(Diagnostic::error(Code::DuplicateName, format!("parameter `{}` has the name of a size or constant", p.name.name), p.name.span, "rename this parameter"));
            continue;
        }
        let elem = match storage_elem(&p.elem) {
            Ok(e) => e,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        let kind = match &p.shape {
            None => {
                if p.output {
                    diags.push(Diagnostic::error(Code::WrongKind, "a scalar parameter cannot be `out`", p.span, "only tensors are written"));
                }
                ParamKind::Scalar(elem)
            }
            Some(dims) => {
                let mut shape = vec![];
                for d in dims {
                    match size_expr(d, consts, &size_of) {
                        Ok(SizeExpr::Const(c)) if c <= 0 => diags.push(Diagnostic::error(Code::BadTileShape, format!("dimension {c} is not positive"), d.span, "here")),
                        Ok(e) => shape.push(e),
                        Err(e) => diags.push(e),
                    }
                }
                if dims.is_empty() {
                    diags.push(Diagnostic::error(Code::BadIndex, "a tensor needs at least one dimension", p.span, "empty shape"));
                }
                ParamKind::Tensor { elem, shape, output: p.output }
            }
        };
        out.push((ParamData { name: p.name.name.clone(), kind, span: p.span, edge: crate::ir::Edge::Error }, p.name.span));
    }
    out
}

/// A kernel with tensor-memory tiles needs whole warpgroups: warp `w` reaches only TMEM lanes
/// `32·(w mod 4)..+32` (PTX ISA, tcgen05 access restrictions), so every lane quarter of a 128-lane
/// buffer must have a warp, i.e. threads must be a multiple of 128. A user error (E0404), pointed
/// at the thread count and the first TMEM tile, not a validator failure later.
fn warpgroups_for_tmem(k: &ast::KernelDecl, kernel: &Kernel, diags: &mut Diagnostics) {
    if kernel.threads % 128 == 0 {
        return;
    }
    let Some(var) = kernel.vars.values().find(|v| v.space == crate::ir::Space::Tmem) else { return };
    let at = k.threads.as_ref().map(|t| t.span).unwrap_or(k.name.span);
    diags.push(
        Diagnostic::error(Code::BadLaunch, format!("{} threads per CTA, but the kernel keeps tiles in tensor memory", kernel.threads), at, "not a multiple of 128")
            .with_label(var.span, format!("`{}` is a tmem tile", var.name))
            .with_note("each warp of a warpgroup reaches only its quarter of the 128 TMEM lanes, so tcgen05.ld/st need whole warpgroups")
            .with_note("help: use threads(128) (or 256, 384, ...), or keep the tile in `smem`"),
    );
}

/// An `out` tensor the body never stores to is returned as whatever the caller passed (zeros from
/// the launcher): almost always a forgotten `store` — an error, pointed at the parameter.
fn outputs_are_stored(k: &ast::KernelDecl, kernel: &Kernel, diags: &mut Diagnostics) {
    let mut stored = std::collections::HashSet::new();
    kernel.walk(|i| {
        if let crate::ir::Op::Store { dst, .. } = kernel.insts[i].op {
            stored.insert(dst);
        }
    });
    for (p, d) in kernel.params.iter() {
        if matches!(d.kind, ParamKind::Tensor { output: true, .. }) && !stored.contains(&p) {
            let span = k.params.iter().find(|x| x.name.name == d.name).map_or(d.span, |x| x.name.span);
            diags.push(
                Diagnostic::error(Code::OutNeverStored, format!("output `{}` is never stored", d.name), span, "declared `out` here")
                    .with_note(format!("help: write it with `store {}[...] = ...;`, or drop `out` if it is an input", d.name)),
            );
        }
    }
}
