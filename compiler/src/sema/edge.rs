//! `x: bf16[B, T, H, K] edge(zeros)`: the program's choice of what an access past a tensor's
//! edge means (issue 10: out-of-bounds behaviour stated and chosen by the program, not an
//! implicit mask on every index). With `edge(zeros)` the tensor is zero-padded past its edge —
//! loads there read 0, stores there are dropped — which is what a tile that runs past a run-time
//! extent (a partial chunk, a ragged M) needs. Without it an element past the edge is a mistake:
//! the interpreter stops on it (E0601, naming the tensor, the element and the declaration to
//! add), so `tilec build --verify` and `tilec run --interp` show it (docs/language.md, "What
//! happens out of bounds").

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{Edge, ParamData, ParamKind};
use crate::syntax::ast;

/// The attribute's name.
pub(super) const ATTRIBUTE: &str = "edge";

/// Sets [`ParamData::edge`] of each lowered kernel parameter from its `edge(...)` attribute:
/// the fill must be `zeros` and the parameter a tensor. `params` are [`super::lower_params`]'s
/// (a parameter with an error of its own is missing there and is skipped).
pub(super) fn lower(k: &ast::KernelDecl, params: &mut [(ParamData, crate::diag::Span)], diags: &mut Diagnostics) {
    for (j, p) in k.params.iter().enumerate() {
        let Some((attr, fill)) = p.attr.as_ref().filter(|(a, _)| a.name == ATTRIBUTE) else { continue };
        // A second parameter of the same name was refused (E0202) and not lowered.
        if k.params[..j].iter().any(|q| q.name.name == p.name.name) {
            continue;
        }
        if fill.name != "zeros" {
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`edge({})`: unknown fill", fill.name), fill.span, "not a fill")
                    .with_note("help: the one fill is `zeros`: `edge(zeros)` reads 0 past the tensor's edge and drops writes there"),
            );
            continue;
        }
        let Some((data, _)) = params.iter_mut().find(|(d, _)| d.name == p.name.name) else { continue };
        if !matches!(data.kind, ParamKind::Tensor { .. }) {
            diags.push(
                Diagnostic::error(Code::BadArguments, format!("`edge` on scalar `{}`", p.name.name), attr.span, "a scalar has no edge")
                    .with_note("help: `edge(zeros)` belongs on a tensor whose tiles may run past its extent"),
            );
            continue;
        }
        data.edge = Edge::Zeros;
    }
}
