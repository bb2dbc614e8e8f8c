//! The size parameters of a whole import graph (`const K = 128 in {64, 128};`, docs/language.md),
//! checked once the graph is: one set and default per name in every file that declares it; a
//! refused `--const` reported once (not again by each import that refuses the same value); a
//! `--const` that no file declares refused rather than silently building the defaults.

use std::collections::{BTreeMap, BTreeSet};

use super::Checked;
use crate::diag::{Code, Diagnostic};
use crate::imports::{first_error_note, first_error_prefix};
use crate::ir::SizeParam;

/// Adds the graph-level size-parameter diagnostics to `checked` (`values`: this build's
/// `--const`s) and drops the repeats of a refused `--const`.
pub(super) fn check_graph(checked: &mut Checked, values: &BTreeMap<String, i64>) {
    // A refused `--const` value is one mistake: reported where this file declares it, and not
    // again by each import that declares it too (or once, for the first, when this file doesn't).
    let own: BTreeSet<String> = checked.diags.iter().filter(|d| d.code == Code::UnsupportedSize).map(first_error_note).collect();
    let prefix = first_error_prefix(Code::UnsupportedSize);
    let refused_const = |n: &&String| n.strip_prefix(&prefix).is_some_and(|m| m.starts_with("`--const"));
    let mut seen: BTreeSet<String> = BTreeSet::new();
    checked.diags.retain(|d| {
        let Some(n) = d.notes.iter().find(refused_const) else { return true };
        !own.contains(n) && seen.insert(n.clone())
    });
    // Every file that declares a size parameter must declare the same sizes and default: a build
    // (and the plan's advice) uses one set for the whole graph.
    let mut first: BTreeMap<&str, &SizeParam> = BTreeMap::new();
    let mut disagree = vec![];
    for p in &checked.size_params {
        match first.get(p.name.as_str()) {
            None => {
                first.insert(&p.name, p);
            }
            Some(f) if f.default != p.default || f.supported.iter().collect::<BTreeSet<_>>() != p.supported.iter().collect::<BTreeSet<_>>() => {
                let at = |x: &SizeParam| format!("{{{}}} (default {}) in {}", x.supported.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "), x.default, x.file.as_deref().unwrap_or("this source"));
                disagree.push(Diagnostic::unlabelled(
                    Code::UnsupportedSize,
                    format!("size parameter `{}` is declared with different sizes: {} and {}", p.name, at(f), at(p)),
                    "help: every file of an import graph that declares a size parameter declares the same set and default (the build picks one value for all of them)",
                ));
            }
            Some(_) => {}
        }
    }
    for d in disagree {
        checked.diags.push(d);
    }
    // A `--const` that no file of the graph declares would silently build the defaults. (Only
    // when nothing else failed: a refused value leaves its parameter unrecorded.)
    if checked.diags.has_errors() {
        return;
    }
    let declared: BTreeSet<&str> = checked.size_params.iter().map(|p| p.name.as_str()).collect();
    let names = declared.iter().copied().collect::<Vec<_>>().join(", ");
    let unknown: Vec<String> = values.keys().filter(|n| !declared.contains(n.as_str())).cloned().collect();
    for n in unknown {
        let what = if names.is_empty() { "it declares none".to_string() } else { format!("its size parameters: {names}") };
        checked.diags.push(Diagnostic::unlabelled(
            Code::UnsupportedSize,
            format!("`--const {n}={}`: no size parameter `{n}` in this file or its imports ({what})", values[&n]),
            "help: a size parameter is declared `const NAME = default in {sizes};`",
        ));
    }
}
