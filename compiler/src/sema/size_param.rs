//! Size parameters: `const K = 128 in {64, 128};` declares a constant that a build may set to any
//! value of its set (`tilec build FILE --const K=64`). The set is the author's statement of the sizes
//! every kernel using the name supports (each was built and verified at them); a value outside
//! it is refused where the set is written (E0207), and so is `--const` on a constant without a set —
//! otherwise one file of an import graph could silently keep another size than the rest.

use std::collections::{BTreeMap, HashMap};

use super::consts::eval_const;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::SizeParam;
use crate::syntax::ast;

/// The value of constant `c` for this build: its own, or for a size parameter the value `--const`
/// gives (`overrides`), checked against the set. Returns the value and, for a size parameter,
/// its record. `None` when the value cannot be evaluated; after any other error (reported to
/// `diags`) the rest of the file is checked with the default, so one mistake gives one
/// diagnostic rather than every use of an undefined name.
pub(super) fn resolve(c: &ast::ConstDecl, consts: &HashMap<String, i64>, overrides: &BTreeMap<String, i64>, diags: &mut Diagnostics) -> Option<(i64, Option<SizeParam>)> {
    let name = &c.name.name;
    let default = match eval_const(&c.value, consts) {
        Ok(v) => v,
        Err(d) => {
            diags.push(d);
            return None;
        }
    };
    let Some((members, set_span)) = &c.supported else {
        if let Some(v) = overrides.get(name) {
            diags.push(
                Diagnostic::error(Code::UnsupportedSize, format!("`{name}` is a constant, not a size parameter: `--const {name}={v}` cannot set it"), c.name.span, "declared without a set of supported sizes")
                    .with_note(format!("help: if every kernel using `{name}` supports other sizes, declare them: `const {name} = {default} in {{{default}, {v}}};`")),
            );
        }
        return Some((default, None));
    };
    let mut supported = vec![];
    for m in members {
        match eval_const(m, consts) {
            Ok(v) if supported.contains(&v) => {
                diags.push(Diagnostic::error(Code::UnsupportedSize, format!("{v} is listed twice in the sizes of `{name}`"), m.span, "repeated"));
                return Some((default, None));
            }
            // A size is a positive i32 (an extent), whatever the expression.
            Ok(v) if v <= 0 || i32::try_from(v).is_err() => {
                diags.push(Diagnostic::error(Code::UnsupportedSize, format!("{v} cannot be a size of `{name}`"), m.span, "not a positive i32").with_note("help: the sizes of a size parameter are extents: 1 ..= 2147483647"));
                return Some((default, None));
            }
            Ok(v) => supported.push(v),
            Err(d) => {
                diags.push(d);
                return Some((default, None));
            }
        }
    }
    let list = supported.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if !supported.contains(&default) {
        diags.push(
            Diagnostic::error(Code::UnsupportedSize, format!("the default {default} of size parameter `{name}` is not one of its sizes"), c.value.span, format!("not in {{{list}}}"))
                .with_label(*set_span, "the supported sizes")
                .with_note("help: the default is the size a build without `--const` uses: pick one of the set, or add it to the set"),
        );
        return Some((default, None));
    }
    let value = overrides.get(name).copied().unwrap_or(default);
    if !supported.contains(&value) {
        diags.push(
            Diagnostic::error(Code::UnsupportedSize, format!("`--const {name}={value}`: {value} is not a supported size of `{name}`"), *set_span, format!("`{name}` ∈ {{{list}}}"))
                .with_note(format!("help: build with one of: {}", supported.iter().map(|s| format!("--const {name}={s}")).collect::<Vec<_>>().join(", "))),
        );
        return Some((default, None));
    }
    Some((value, Some(SizeParam { name: name.clone(), value, default, supported, span: c.name.span, file: None })))
}

/// The dimensions of `o`'s parameters written as a size parameter's bare name, as (size
/// parameter, parameter, dimension index): the plan records them to name the parameter when a
/// caller's extent differs.
pub(super) fn dims(o: &ast::OperatorDecl, params: &[SizeParam]) -> Vec<(String, String, usize)> {
    let mut out = vec![];
    for p in &o.params {
        for (d, e) in p.shape.iter().flatten().enumerate() {
            if let ast::ExprKind::Name(n) = &e.kind {
                if params.iter().any(|sp| &sp.name == n) {
                    out.push((n.clone(), p.name.name.clone(), d));
                }
            }
        }
    }
    out
}
