//! `s0: f32[B, H, K, V] optional(zeros)`: an operator input the caller may leave out, as fla's
//! `initial_state=None` and `dht=None`. The plan records it (`optional`, schema version 3) and
//! the executor allocates an absent one zero-filled with the extents the other inputs give
//! (`tilec_abi::plan::execute`; docs/operators.md, "Optional inputs"). Zeros are the one fill:
//! for a state or a gradient they are what leaving it out means.

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{Operator, ParamKind};
use crate::syntax::ast;

/// The attribute's name.
pub(super) const ATTRIBUTE: &str = "optional";

/// The inputs `o` declares optional — checked against `op`'s lowered parameters: an input
/// tensor (not `out`, not a scalar), the fill `zeros`, and every size of its shape determined by
/// the inputs that stay required (else a call without it could not be bound). Each mistake is
/// reported once.
pub(super) fn lower(o: &ast::OperatorDecl, op: &Operator, diags: &mut Diagnostics) -> Vec<String> {
    let declared: Vec<(&ast::ParamDecl, &ast::Ident)> = o.params.iter().filter_map(|p| p.attr.as_ref().filter(|(a, _)| a.name == ATTRIBUTE).map(|(_, fill)| (p, fill))).collect();
    let names: Vec<&str> = declared.iter().map(|(p, _)| p.name.name.as_str()).collect();
    // Sizes the required inputs determine (the binder's own rule).
    let required: Vec<tilec_abi::expr::SizeExpr> = op
        .params
        .iter()
        .filter(|p| !names.contains(&p.name.as_str()))
        .filter_map(|p| match &p.kind {
            ParamKind::Tensor { shape, output: false, .. } => Some(shape.iter().filter_map(|d| tilec_abi::expr::SizeExpr::parse(&op.size_text(d)).ok())),
            _ => None,
        })
        .flatten()
        .collect();
    let known = tilec_abi::bind::determined_sizes(&required);
    let mut out = vec![];
    for (p, fill) in declared {
        if fill.name != "zeros" {
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`optional({})`: unknown fill", fill.name), fill.span, "not a fill")
                    .with_note("help: the one fill is `zeros`: `optional(zeros)` allocates a left-out input zero-filled"),
            );
            continue;
        }
        // A parameter with an error of its own was left out (reported already); fla's
        // `cu_seqlens` must be an offset table, which super::offsets reports.
        let Some(param) = op.params.iter().find(|q| q.name == p.name.name && q.name != "cu_seqlens") else { continue };
        let ParamKind::Tensor { shape, output: false, .. } = &param.kind else {
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`optional` on `{}`, which is not an input tensor", p.name.name), p.span, "an output or a scalar")
                    .with_note("help: only an operator's input tensors may be left out (an output is always returned; a scalar has no extents to fill)"),
            );
            continue;
        };
        let mut missing: Vec<String> = shape.iter().filter_map(|d| tilec_abi::expr::SizeExpr::parse(&op.size_text(d)).ok()).flat_map(|e| e.symbols()).filter(|s| !known.contains(s)).collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            let list = missing.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("optional `{}` has size{} {list} that no required input gives", p.name.name, if missing.len() > 1 { "s" } else { "" }), p.span, "left out, its extents would be unknown")
                    .with_note("help: every size of an optional input must also be a dimension of an input the caller always passes"),
            );
            continue;
        }
        out.push(p.name.name.clone());
    }
    out
}
