//! Kernel instances: `kernel k1_scan_scalar_bf16 = k1_scan_scalar(dv2: bf16);` declares a copy of
//! kernel `k1_scan_scalar` of the same file whose parameter `dv2` has element type bf16 instead
//! of its own. Replaced by that copy right after parsing, so everything after the parser (sema,
//! the planners, both back ends, the interpreter, metadata, operators) sees one more kernel.
//!
//! Why: a stage shared by several operators may need another storage type in one of them (K#1's
//! dU is the SSD, LA and GLA operators' `dv`, kept in f32, but only a bf16 MMA operand for GDN
//! and KDA, where f32 costs DRAM bytes and nothing else), and the body must not be copied.
//! Stores round to the parameter's type and loads widen from it, so the body is unchanged.
//!
//! Two more kinds of entry: `dw: none` drops an output (its parameter and every store to it;
//! dead-code elimination, [`crate::passes::dce`], removes what only fed them), and `dk2: zeros`
//! declares an input all zeros (not a parameter of the instance; sema lowers each load of it to
//! a zero tile, `ast::KernelDecl::zeroed`). Both exist for members of a family that share a
//! kernel but not all of its dataflow: the W = 0 members of gdn.tile need no dW, and have no
//! K#2 parts to combine.
//!
//! Errors (the instance is dropped, the rest of the file checked): no kernel `base` in this file
//! (an instance is declared beside its kernel: imported kernels are compiled, not parsed, here)
//! E0201; an instance or an operator as the base E0203; no such parameter E0201; a scalar
//! parameter E0203; a parameter listed twice E0202; an unknown element type E0301; `none` on an
//! input or `zeros` on an output or a scalar E0203. A mistake the
//! new types cause in the body is reported at the base kernel's text with a label on the
//! instance ([`attribute`]); one the base kernel has itself is reported once, for the base.

use super::ast::{File, Ident, Item};
use crate::diag::{Code, Diagnostic, Diagnostics};

/// Replaces every [`Item::Instance`] of `file` by the kernel it declares (or drops it, with a
/// diagnostic).
pub fn expand(file: &mut File, diags: &mut Diagnostics) {
    if !file.items.iter().any(|i| matches!(i, Item::Instance(_))) {
        return; // nearly every file: no copy of its kernels
    }
    let kernels: Vec<_> = file.items.iter().filter_map(|i| if let Item::Kernel(k) = i { Some(k.clone()) } else { None }).collect();
    let instances: Vec<String> = file.items.iter().filter_map(|i| if let Item::Instance(x) = i { Some(x.name.name.clone()) } else { None }).collect();
    let operators: Vec<String> = file.items.iter().filter_map(|i| if let Item::Operator(o) = i { Some(o.name.name.clone()) } else { None }).collect();
    let mut refused = vec![];
    for item in &mut file.items {
        let Item::Instance(inst) = item else { continue };
        let span = inst.span;
        let Some(base) = kernels.iter().find(|k| k.name.name == inst.base.name) else {
            let b = &inst.base.name;
            let d = if instances.contains(b) {
                Diagnostic::error(Code::WrongKind, format!("`{b}` is itself an instance"), inst.base.span, "an instance, not a kernel")
                    .with_note(format!("help: make the instance of the kernel `{b}` copies, listing every parameter to retype"))
            } else if operators.contains(b) {
                Diagnostic::error(Code::WrongKind, format!("`{b}` is an operator"), inst.base.span, "not a kernel").with_note("help: an instance copies a kernel; an operator's buffers and launches are retyped in its own text")
            } else {
                Diagnostic::error(Code::UndefinedName, format!("no kernel `{b}` in this file to make an instance of"), inst.base.span, "not a kernel of this file")
                    .with_note("help: declare an instance in the file that defines its kernel (an imported kernel is compiled there, not here)")
            };
            diags.push(d);
            refused.push(inst.name.name.clone());
            *item = Item::Error(span);
            continue;
        };
        let mut k = base.clone();
        k.name = Ident { name: inst.name.name.clone(), span: inst.name.span };
        k.instance = Some((base.name.name.clone(), span));
        let mut ok = true;
        let mut dropped: Vec<String> = vec![];
        for (i, (p, elem)) in inst.retypes.iter().enumerate() {
            if let Some((q, _)) = inst.retypes[..i].iter().find(|(q, _)| q.name == p.name) {
                diags.push(Diagnostic::error(Code::DuplicateName, format!("parameter `{}` is listed twice", p.name), p.span, "again here").with_label(q.span, "first here"));
                ok = false;
                continue;
            }
            let Some(param) = k.params.iter_mut().find(|x| x.name.name == p.name) else {
                let names: Vec<&str> = base.params.iter().map(|x| x.name.name.as_str()).collect();
                diags.push(Diagnostic::error(Code::UndefinedName, format!("kernel `{}` has no parameter `{}`", base.name.name, p.name), p.span, "no such parameter").with_note(format!("help: its parameters are {}", names.join(", "))));
                ok = false;
                continue;
            };
            if elem.name == "zeros" {
                if param.output || param.shape.is_none() {
                    let what = if param.output { "an output" } else { "a scalar" };
                    diags.push(
                        Diagnostic::error(Code::WrongKind, format!("parameter `{}` of kernel `{}` is {what}", p.name, base.name.name), p.span, "only an input tensor can be all zeros")
                            .with_note("help: `zeros` removes an input tensor whose every element is 0, each load of it reading 0; `none` drops an output"),
                    );
                    ok = false;
                    continue;
                }
                k.zeroed.push(p.name.clone());
                continue;
            }
            if elem.name == "none" {
                if param.shape.is_none() || !param.output {
                    let what = if param.shape.is_none() { "a scalar" } else { "an input" };
                    diags.push(
                        Diagnostic::error(Code::WrongKind, format!("parameter `{}` of kernel `{}` is {what}", p.name, base.name.name), p.span, "only an output can be dropped")
                            .with_note("help: `none` drops an `out` tensor and the code that only fed it; an input the body reads must be passed"),
                    );
                    ok = false;
                    continue;
                }
                dropped.push(p.name.clone());
                continue;
            }
            if param.shape.is_none() {
                diags.push(
                    Diagnostic::error(Code::WrongKind, format!("parameter `{}` of kernel `{}` is a scalar", p.name, base.name.name), p.span, "not a tensor")
                        .with_note("help: an instance changes the element type of tensor parameters only"),
                );
                ok = false;
                continue;
            }
            // Checked here rather than left to sema: the parameter sema would drop would also make
            // the base body's uses of it unknown names, at the base kernel's text.
            if let Err(d) = crate::sema::storage_elem(elem) {
                diags.push(d.with_note("help: or `none`, which drops an output, or `zeros`, an input whose every element is 0"));
                ok = false;
                continue;
            }
            param.elem = elem.clone();
        }
        if !k.zeroed.is_empty() {
            k.contract = None; // a class's fp64 reference takes every input of the kernel
        }
        if ok && !(dropped.is_empty() && k.zeroed.is_empty()) {
            ok = removable(&k, inst, &dropped, diags);
            if ok {
                drop_outputs(&mut k, &dropped);
            }
        }
        if !ok {
            refused.push(inst.name.name.clone());
        }
        *item = if ok { Item::Kernel(k) } else { Item::Error(span) };
    }
    file.refused_instances = refused;
}

/// The diagnostics of every kernel, `chunks` (kernel name, its diagnostics) in order, with those
/// of instances (`file`'s kernels made by an instance item) attributed: one that the base kernel
/// also has (same code at the same place: the base's own mistake, or a lint of the shared body)
/// is dropped, and the rest get a label on the instance item — they come from its retyping, but
/// point into the base kernel's text.
pub fn attribute(file: &File, chunks: Vec<(String, Diagnostics)>) -> Diagnostics {
    use std::collections::{HashMap, HashSet};
    let origin: HashMap<&str, &(String, crate::diag::Span)> = file.items.iter().filter_map(|i| if let Item::Kernel(k) = i { k.instance.as_ref().map(|o| (k.name.name.as_str(), o)) } else { None }).collect();
    let mut seen: HashMap<&str, HashSet<(Code, Option<crate::diag::Span>)>> = HashMap::new();
    for (name, ds) in &chunks {
        seen.entry(name.as_str()).or_default().extend(ds.iter().map(|d| (d.code, d.primary_span())));
    }
    let mut out = Diagnostics::new();
    for (name, ds) in &chunks {
        for d in ds.iter() {
            match origin.get(name.as_str()) {
                Some((base, _)) if seen.get(base.as_str()).is_some_and(|s| s.contains(&(d.code, d.primary_span()))) => {}
                Some((base, at)) => out.push(d.clone().with_label(*at, format!("in instance `{name}` of `{base}`, whose retyping causes this"))),
                None => out.push(d.clone()),
            }
        }
    }
    out
}

/// Whether the outputs `dropped` and the inputs `k.zeroed` of kernel `k` can leave its signature
/// (E0203 at the entry otherwise): the body must not read a dropped output, some output must
/// stay, and a size only removed parameters declare must not be needed — used elsewhere, for a
/// dropped output; at all, for a zeroed input (sema still lowers its shape, so its sizes would
/// stay kernel arguments that no launch can bind).
fn removable(k: &super::ast::KernelDecl, inst: &super::ast::InstanceDecl, dropped: &[String], diags: &mut Diagnostics) -> bool {
    let at = |name: &str| inst.retypes.iter().find(|(p, _)| p.name == name).map(|(p, _)| p.span).unwrap_or(inst.span);
    let mut ok = true;
    if !dropped.is_empty() && k.params.iter().filter(|p| p.output).all(|p| dropped.contains(&p.name.name)) {
        diags.push(
            Diagnostic::error(Code::WrongKind, format!("instance `{}` drops every output of `{}`", inst.name.name, inst.base.name), inst.span, "it would store nothing")
                .with_note("help: keep at least one output; a launch that stores nothing is better left out of the operator"),
        );
        return false;
    }
    let mut used = vec![];
    names_in_stmts(&k.body, dropped, &mut used);
    for g in &k.grid {
        names_in_expr(g, &mut used);
    }
    for name in dropped {
        if used.contains(name) {
            diags.push(
                Diagnostic::error(Code::WrongKind, format!("output `{name}` of kernel `{}` is read by its body", inst.base.name), at(name), "cannot be dropped")
                    .with_note("help: `none` drops an output the body only stores to; keep this one"),
            );
            ok = false;
        }
    }
    // Sizes: the names in the removed shapes that no kept parameter declares.
    let removed = |name: &String| dropped.contains(name) || k.zeroed.contains(name);
    let mut kept_sizes = vec![];
    for p in k.params.iter().filter(|p| !removed(&p.name.name)) {
        for d in p.shape.iter().flatten() {
            names_in_expr(d, &mut kept_sizes);
        }
    }
    for p in k.params.iter().filter(|p| removed(&p.name.name)) {
        let (verb, zeroed) = if dropped.contains(&p.name.name) { ("drops", false) } else { ("declares all zeros", true) };
        let mut sizes = vec![];
        for d in p.shape.iter().flatten() {
            names_in_expr(d, &mut sizes);
        }
        sizes.sort();
        sizes.dedup(); // one error per size, however many dimensions name it
        for size in sizes.iter().filter(|n| !kept_sizes.contains(n) && (zeroed || used.contains(n))) {
            diags.push(
                Diagnostic::error(Code::WrongKind, format!("size `{size}` of kernel `{}` is declared only by `{}`, which this instance {verb}", inst.base.name, p.name.name), at(&p.name.name), "the size goes with it")
                    .with_note(format!("help: keep `{}`, or give a kept parameter a dimension `{size}`", p.name.name)),
            );
            ok = false;
        }
    }
    ok
}

/// Every name an expression mentions (a `load`'s tensor included), without recursion.
fn names_in_expr(e: &super::ast::Expr, out: &mut Vec<String>) {
    use super::ast::ExprKind as E;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &e.kind {
            E::Name(n) => out.push(n.clone()),
            E::Load(t, _) => out.push(t.name.clone()),
            _ => {}
        }
        stack.extend(e.children());
    }
}

fn names_in_index(index: &[super::ast::IndexExpr], out: &mut Vec<String>) {
    use super::ast::IndexExpr as I;
    for ix in index {
        match ix {
            I::Point(e) => names_in_expr(e, out),
            I::Range { start, len, .. } => {
                names_in_expr(start, out);
                names_in_expr(len, out);
            }
            I::Full(_) => {}
        }
    }
}

/// Every name the statements mention, a `store`'s tensor excepted (storing is not reading), and
/// nothing of a store to one of `dropped` (the instance removes those).
fn names_in_stmts(body: &[super::ast::Stmt], dropped: &[String], out: &mut Vec<String>) {
    use super::ast::Stmt;
    for st in body {
        match st {
            Stmt::Let { value, .. } => names_in_expr(value, out),
            Stmt::Assign { index, value, .. } => {
                names_in_index(index, out);
                names_in_expr(value, out);
            }
            Stmt::Store { tensor, .. } if dropped.contains(&tensor.name) => {}
            Stmt::Store { index, value, mask, .. } => {
                names_in_index(index, out);
                names_in_expr(value, out);
                if let Some(m) = mask {
                    names_in_expr(m, out);
                }
            }
            Stmt::For { lo, hi, body, .. } => {
                names_in_expr(lo, out);
                names_in_expr(hi, out);
                names_in_stmts(body, dropped, out);
            }
            Stmt::Error(_) => {}
        }
    }
}

/// Removes the output parameters `names` from `k` with every `store` to them (in loops too);
/// the code that only fed those stores is left to dead-code elimination
/// ([`crate::passes::dce`]). The instance has no `contract`: a class's fp64 reference judges
/// every output of the kernel it names.
fn drop_outputs(k: &mut super::ast::KernelDecl, names: &[String]) {
    use super::ast::Stmt;
    fn strip(body: &mut Vec<Stmt>, names: &[String]) {
        body.retain(|st| !matches!(st, Stmt::Store { tensor, .. } if names.contains(&tensor.name)));
        for st in body {
            if let Stmt::For { body, .. } = st {
                strip(body, names);
            }
        }
    }
    k.params.retain(|p| !names.contains(&p.name.name));
    strip(&mut k.body, names);
    k.contract = None;
}
