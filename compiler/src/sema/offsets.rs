//! `cu_seqlens: i32[NP] offsets(T)`: an operator parameter that is an offset table into the
//! size `T` — sequence boundaries, fla's cu_seqlens. The plan records it, and the executor
//! refuses a table that is not one (first entry 0, nondecreasing, last entry T) before any launch
//! whenever the table is in host memory (docs/operators.md, "Sequences"). Without the check a
//! last entry past T made the chunk table read past every tensor: gradients of 1e24, no error.

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{Elem, Launch, Operator, ParamKind};
use crate::syntax::ast;

/// The offset tables `o` declares, as (parameter, size) — checked against `op`'s lowered
/// parameters and sizes; each mistake is reported once.
pub(super) fn lower(o: &ast::OperatorDecl, op: &Operator, diags: &mut Diagnostics) -> Vec<(String, String)> {
    let mut out = vec![];
    for p in &o.params {
        let Some((attr, size)) = &p.attr else { continue };
        if attr.name == super::optional::ATTRIBUTE {
            continue; // super::optional's
        }
        if attr.name != "offsets" {
            diags.push(
                (if attr.name == super::edge::ATTRIBUTE {
                    Diagnostic::error(Code::BadArguments, "`edge(...)` on an operator parameter".to_string(), attr.span, "only kernel parameters take it")
                } else {
                    Diagnostic::error(Code::BadArguments, format!("unknown parameter attribute `{}`", attr.name), attr.span, "not an attribute")
                })
                    .with_note(if attr.name == super::edge::ATTRIBUTE {
                        "help: `edge(zeros)` belongs on the parameter of the kernel that loads or stores past the tensor's edge, not on the operator's"
                    } else {
                        "help: the operator parameter attributes are `offsets(SIZE)`, on an i32 offset table (`cu_seqlens: i32[NP] offsets(T)`), and `optional(zeros)`, on an input the caller may leave out (`s0: f32[B, H, K, V] optional(zeros)`); kernel parameters take `edge(zeros)`"
                    }),
            );
            continue;
        }
        // A parameter with an error of its own was left out (reported already).
        let Some(param) = op.params.iter().find(|q| q.name == p.name.name) else { continue };
        match &param.kind {
            ParamKind::Tensor { elem: Elem::I32, shape, output: false } if shape.len() == 1 => {}
            _ => {
                diags.push(
                    Diagnostic::error(Code::BadArguments, format!("`offsets` on `{}`, which is not an i32 input vector", p.name.name), attr.span, "needs `NAME: i32[N] offsets(SIZE)`")
                        .with_note("help: an offset table is one i32 dimension of boundaries into SIZE, read by the operator (not `out`)"),
                );
                continue;
            }
        }
        if op.sizes.values().all(|s| s != &size.name) {
            let known = op.sizes.values().cloned().collect::<Vec<_>>().join(", ");
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`offsets({})`: `{}` is not a size of operator `{}`", size.name, size.name, o.name.name), size.span, "not one of its sizes")
                    .with_note(format!("help: the offsets run from 0 to a size the other parameters' shapes give (its sizes: {known})")),
            );
            continue;
        }
        out.push((p.name.name.clone(), size.name.clone()));
    }
    // fla's name for the table (and verify's mark of a varlen operator): an operator that takes
    // `cu_seqlens` without `offsets(...)` would launch on an unchecked table — a last entry past T
    // read past every tensor with no error (found by a breaking pass).
    for p in &o.params {
        // Another attribute was reported already; `optional(zeros)` does not make a table.
        let declared = out.iter().any(|(t, _)| t == &p.name.name) || p.attr.as_ref().is_some_and(|(a, _)| a.name != super::optional::ATTRIBUTE);
        let input_vector = op.params.iter().any(|q| q.name == p.name.name && matches!(&q.kind, ParamKind::Tensor { elem: Elem::I32, shape, output: false } if shape.len() == 1));
        if p.name.name == "cu_seqlens" && input_vector && !declared {
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`cu_seqlens` of operator `{}` is not declared an offset table", o.name.name), p.name.span, "its values would go unchecked")
                    .with_note("help: declare it `cu_seqlens: i32[NP] offsets(T)` (T the size it splits), so the plan checks 0 first, nondecreasing, last = T before any launch"),
            );
        }
    }
    out
}

/// Refuses `name`, passed by `call` to an offset table of `callee`, when it is a parameter of
/// `op` that `op` does not declare an offset table too: `op`'s plan (the call inlined) would
/// otherwise not check it. (A buffer there is the caller's own making, e.g. `seq_bounds`'s.)
pub(super) fn check_passed(op: &Operator, name: &str, callee: &Operator, call: &Launch, diags: &mut Diagnostics) {
    let is_param = op.params.iter().any(|p| p.name == name);
    if is_param && !op.offsets.iter().any(|(t, _)| t == name) {
        diags.push(
            Diagnostic::error(Code::BadArguments, format!("`{name}` is passed to the offset table of `{}` but is not declared `offsets(...)` here", callee.name), call.span, "its values would go unchecked")
                .with_note(format!("help: declare the parameter `{name}: i32[..] offsets(SIZE)` in operator `{}` too, so its plan checks the table before any launch", op.name)),
        );
    }
}

/// Refuses an operator's attribute (or an unknown one) on a kernel's parameter: only operator
/// plans check offset tables and fill left-out inputs. (`edge(zeros)` is a kernel's:
/// super::edge.)
pub(super) fn refuse_on_kernel(k: &ast::KernelDecl, diags: &mut Diagnostics) {
    for p in &k.params {
        if let Some((attr, _)) = p.attr.as_ref().filter(|(a, _)| a.name != super::edge::ATTRIBUTE) {
            let (message, help) = match attr.name.as_str() {
                super::optional::ATTRIBUTE => ("only operator parameters take it", "help: declare the input `optional(zeros)` on the operator that receives it: its plan allocates a left-out one zero-filled"),
                "offsets" => ("only operator parameters take it", "help: declare the table `offsets(SIZE)` on the operator that receives it: its plan checks the values before any launch"),
                _ => ("not an attribute", "help: a kernel parameter takes `edge(zeros)` (a tensor zero-padded past its edge); operator parameters take `offsets(SIZE)` and `optional(zeros)`"),
            };
            let headline = if message == "not an attribute" { format!("unknown parameter attribute `{}`", attr.name) } else { format!("`{}(...)` on a kernel parameter", attr.name) };
            diags.push(Diagnostic::error(Code::BadArguments, headline, attr.span, message).with_note(help));
        }
    }
}
