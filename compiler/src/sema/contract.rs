//! `contract(class)` on a kernel: the class must be one of kverify's operator classes
//! (`kverify::references::all_ops`), and the kernel's parameters must bind to it
//! ([`crate::verify::contract::bind`], the one binding rule `tilec build --verify` runs by).

use kverify::references::{all_ops, op_by_id, op_hint};

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::ir::{Kernel, KernelContract};
use crate::syntax::ast;
use crate::verify::contract::{bind, signature};

/// Checks `k`'s contract and records it on `kernel`; `lowered`: the kernel lowered without
/// errors (only then are its parameters bound).
pub(super) fn lower(k: &ast::KernelDecl, kernel: &mut Kernel, lowered: bool, diags: &mut Diagnostics) {
    for s in &k.repeated_contracts {
        diags.push(Diagnostic::error(Code::DuplicateName, "`contract` given twice".to_string(), *s, "second `contract`").with_note("help: a kernel implements one operator class: keep one"));
    }
    let Some(c) = &k.contract else { return };
    let Some(class) = op_by_id(&c.name) else {
        let ids: Vec<&str> = all_ops().iter().map(|o| o.id).collect();
        let d = Diagnostic::error(Code::UndefinedName, format!("no kverify operator class `{}`{}", c.name, op_hint(&c.name)), c.span, "unknown contract");
        let d = super::expr::did_you_mean(d, &c.name, ids.iter().copied());
        diags.push(d.with_note(format!("help: a kernel's contract names one of kverify's operator classes: {}", ids.join(", "))));
        return;
    };
    if !lowered {
        return;
    }
    match bind(kernel, &class, c.span) {
        Ok(_) => kernel.contract = Some(KernelContract { class: class.id.to_string(), span: c.span }),
        Err(e) => {
            let help = e.help.unwrap_or_else(|| signature(&class));
            diags.push(Diagnostic::error(e.code, e.message, e.span, e.label).with_note(format!("help: {help}")));
        }
    }
}
