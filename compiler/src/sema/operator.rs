//! Operators: checks each launch against its kernel's signature and the operator's dataflow, and
//! lowers the declaration to [`crate::ir::Operator`].
//!
//! Per launch argument: the name is an operator parameter or buffer (E0201); tensor against
//! tensor and scalar against scalar (E0203); the same element type (E0301) and rank (E0302); the
//! same extents as symbolic expressions (E0302) — the kernel's bare size names are bound to the
//! operator's expressions they meet, and every dimension is then compared by evaluating both
//! sides at several size assignments; a kernel `out` parameter is bound to an operator output or
//! a buffer, never an input (E0309), and an input parameter reads an operator input or something
//! an earlier launch wrote (E0309). Every output and buffer must be written by some launch.

use std::collections::{BTreeMap, HashMap};

use cranelift_entity::PrimaryMap;

use super::{lower_params, size_expr};
use crate::diag::{Code, Diagnostic, Diagnostics, Span};
use crate::ir::{Buffer, Elem, Kernel, Launch, Operator, ParamKind, SizeExpr, SizeVar};
use crate::syntax::ast;

/// What an operator-level name is.
#[derive(Clone, Debug)]
struct Slot {
    elem: Elem,
    /// `None` for a scalar.
    shape: Option<Vec<SizeExpr>>,
    role: Role,
    span: Span,
    written: bool,
    /// Its declaration had an error (already reported): uses are not checked again.
    poisoned: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Role {
    Input,
    Output,
    Buffer,
}

/// Most launches one operator may hold after its calls are inlined.
const MAX_LAUNCHES: usize = 4096;

/// Size assignments at which symbolic extents are compared: small, odd, and past a chunk.
const SAMPLES: [i64; 4] = [1, 3, 100, 2049];

/// Lowers one operator. `kernels` are every kernel of the module (local and imported).
/// Returns `None` (after reporting) when the operator has an error.
/// `unchecked`: kernel names declared in this file whose kernels failed to lower (a launch of
/// one is not checked: its error is already reported).
/// `imports_failed`: an import of the file failed (reported): a launch of a kernel not found may
/// be one of its kernels, so it is not reported again.
/// `operators`: the operators declared before this one (a launch may call one: it is inlined).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lower(o: &ast::OperatorDecl, consts: &HashMap<String, i64>, kernels: &[&Kernel], operators: &[Operator], unchecked: &[String], imports_failed: bool, diags: &mut Diagnostics) -> Option<Operator> {
    let errors_before = diags.error_count();
    // A statement that failed to parse may be the buffer or launch a later check would miss:
    // no reports that follow from it (one mistake, one diagnostic).
    let parse_error = o.body.iter().any(|st| matches!(st, ast::OpStmt::Error(_)));
    let mut skipped = false;
    let mut sizes: PrimaryMap<SizeVar, String> = PrimaryMap::new();
    let params = lower_params(&o.params, consts, &mut sizes, diags);
    let mut slots: HashMap<String, Slot> = HashMap::new();
    for (p, _) in &params {
        let slot = match &p.kind {
            ParamKind::Tensor { elem, shape, output } => Slot { elem: *elem, shape: Some(shape.clone()), role: if *output { Role::Output } else { Role::Input }, span: p.span, written: false, poisoned: false },
            ParamKind::Scalar(e) => Slot { elem: *e, shape: None, role: Role::Input, span: p.span, written: false, poisoned: false },
        };
        slots.insert(p.name.clone(), slot);
    }
    let mut op = Operator { name: o.name.name.clone(), span: o.name.span, sizes, params: params.into_iter().map(|(p, _)| p).collect(), buffers: vec![], launches: vec![], contract: None, size_param_dims: vec![], offsets: vec![], optional: vec![] };
    op.offsets = super::offsets::lower(o, &op, diags);
    op.optional = super::optional::lower(o, &op, diags);
    // An operator's sizes come from its inputs (a call takes no `--size`): one that only its
    // outputs mention could never be bound.
    // What the binder can determine from the inputs (`tilec_abi::bind::determined_sizes`, its
    // own rule): one diagnostic per input dimension that holds sizes it cannot (`B * T`: both).
    let input_dims: Vec<(&crate::ir::ParamData, &SizeExpr)> = op.params.iter().filter_map(|p| match &p.kind {
        ParamKind::Tensor { shape, output: false, .. } => Some(shape.iter().map(move |d| (p, d))),
        _ => None,
    }).flatten().collect();
    let parsed: Vec<tilec_abi::expr::SizeExpr> = input_dims.iter().filter_map(|(_, d)| tilec_abi::expr::SizeExpr::parse(&op.size_text(d)).ok()).collect();
    let known = tilec_abi::bind::determined_sizes(&parsed);
    let mut undetermined: Vec<(usize, Vec<&str>)> = vec![];
    for (s, name) in op.sizes.iter() {
        if known.contains(name) {
            continue;
        }
        if let Some(i) = input_dims.iter().position(|(_, d)| d.mentions(s)) {
            match undetermined.iter_mut().find(|(j, _)| *j == i) {
                Some((_, names)) => names.push(name),
                None => undetermined.push((i, vec![name])),
            }
        }
    }
    for (i, names) in &undetermined {
        let (p, d) = input_dims[*i];
        let list = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        diags.push(
            Diagnostic::error(Code::OperatorDataflow, format!("size{} {list} of operator `{}` cannot be determined from its inputs", if names.len() > 1 { "s" } else { "" }, op.name), p.span, format!("only in `{}`", op.size_text(d)))
                .with_note("help: give an input a dimension that is the size alone, or a product of it and sizes that are known (`H * G`, H given elsewhere): the binder solves nothing else"),
        );
    }
    for (s, name) in op.sizes.iter() {
        let in_input = input_dims.iter().any(|(_, d)| d.mentions(s));
        if !in_input {
            if let Some(p) = op.params.iter().find(|p| matches!(&p.kind, ParamKind::Tensor { shape, .. } if shape.iter().any(|d| d.mentions(s)))) {
                diags.push(
                    Diagnostic::error(Code::OperatorDataflow, format!("size `{name}` of operator `{}` appears only in outputs: no input determines it", op.name), p.span, format!("`{name}` here"))
                        .with_note("help: use a size an input has (outputs are allocated from the inputs' sizes)"),
                );
            }
        }
    }
    if let Some(c) = &o.contract {
        use kverify::recurrence::family::Model;
        match Model::ALL.iter().find(|m| m.name() == c.name && **m != Model::General) {
            Some(m) => {
                op.contract = Some(*m);
                // --verify matches parameters by fla's names: refuse others here, not there.
                for p in &op.params {
                    let output = matches!(p.kind, ParamKind::Tensor { output: true, .. });
                    let names: &[&str] = if output { &crate::verify::OUTPUT_NAMES } else { &crate::verify::INPUT_NAMES };
                    if !names.contains(&p.name.as_str()) {
                        diags.push(
                            Diagnostic::error(Code::UndefinedName, format!("`{}` is not one of fla's {} names, which `contract({})` judges by", p.name, if output { "output" } else { "input" }, c.name), p.span, "not matched to the oracle")
                                .with_note(format!("help: name it one of {}", names.join(", "))),
                        );
                    } else if let Some(why) = contract_mismatch(*m, p) {
                        diags.push(Diagnostic::error(Code::TypeMismatch, format!("`{}` does not fit `contract({})`: {why}", p.name, c.name), p.span, "not what the oracle takes").with_note(format!("help: {}", contract_help(*m))));
                    }
                }
            }
            None => {
                let members = Model::ALL.iter().filter(|m| **m != Model::General).map(|m| m.name());
                let d = super::expr::did_you_mean(Diagnostic::error(Code::UndefinedName, format!("no recurrence member `{}` to verify against", c.name), c.span, "unknown contract"), &c.name, members);
                diags.push(d.with_note("help: one of la, gla, ssd, kda, gdn (kverify's fp64 oracle judges the operator's outputs or gradients, with fla's tensor names)"));
            }
        }
    }
    for st in &o.body {
        match st {
            ast::OpStmt::Buffer(b) => {
                if let Some(prev) = slots.get(&b.name.name) {
                    diags.push(super::dup(&b.name, prev.span));
                    continue;
                }
                if consts.contains_key(&b.name.name) || crate::ir::size_named(&op.sizes, &b.name.name).is_some() {
                    diags.push(Diagnostic::error(Code::DuplicateName, format!("buffer `{}` has the name of a size or constant", b.name.name), b.name.span, "rename this buffer"));
                    continue;
                }
                let poison = |slots: &mut HashMap<String, Slot>| {
                    slots.insert(b.name.name.clone(), Slot { elem: Elem::F32, shape: None, role: Role::Buffer, span: b.name.span, written: true, poisoned: true });
                };
                let elem = match super::storage_elem(&b.elem) {
                    Ok(e) => e,
                    Err(d) => {
                        diags.push(d);
                        poison(&mut slots);
                        continue;
                    }
                };
                let size_of = |n: &str| crate::ir::size_named(&op.sizes, n);
                let mut shape = vec![];
                let mut bad = false;
                for d in &b.shape {
                    match size_expr(d, consts, &size_of) {
                        Ok(SizeExpr::Const(c)) if c <= 0 => {
                            diags.push(Diagnostic::error(Code::BadTileShape, format!("dimension {c} is not positive"), d.span, "here"));
                            bad = true;
                        }
                        Ok(e) => shape.push(e),
                        Err(e) => {
                            diags.push(e.with_note("help: a buffer's extents are expressions over the operator's sizes (the names in its parameters' shapes) and constants"));
                            bad = true;
                        }
                    }
                }
                if b.shape.is_empty() {
                    diags.push(Diagnostic::error(Code::BadIndex, "a buffer needs at least one dimension", b.span, "empty shape"));
                    bad = true;
                }
                // `= 0` says the zeros are meant: launches may read the buffer unwritten.
                let zeroed = match &b.init {
                    None => false,
                    Some(e) if is_zero(e, consts) => true,
                    Some(e) => {
                        diags.push(
                            Diagnostic::error(Code::BadConst, "a buffer can only be initialised to 0", e.span, "not 0")
                                .with_note("help: buffers are zero-filled once per call; any other contents must come from a launch"),
                        );
                        bad = true;
                        true
                    }
                };
                if bad {
                    poison(&mut slots);
                    continue;
                }
                slots.insert(b.name.name.clone(), Slot { elem, shape: Some(shape.clone()), role: Role::Buffer, span: b.name.span, written: zeroed, poisoned: false });
                op.buffers.push(Buffer { name: b.name.name.clone(), elem, shape, span: b.span });
            }
            ast::OpStmt::Launch(l) => {
                let unknown = !kernels.iter().any(|k| k.name == l.kernel.name) && !operators.iter().any(|c| c.name == l.kernel.name);
                if unchecked.contains(&l.kernel.name) || (imports_failed && unknown) {
                    skipped = true;
                    // Its kernel has an error (reported); count what it would write as written.
                    for a in &l.args {
                        if let Some(s) = slots.get_mut(&a.name) {
                            s.written = true;
                        }
                    }
                    continue;
                }
                if let Some(c) = operators.iter().find(|c| c.name == l.kernel.name) {
                    if let Some((call, bound)) = launch(l, &op, Callee::Operator(c), &mut slots, parse_error, diags) {
                        inline(c, &call, &bound, &mut op, &mut slots, diags);
                    }
                } else if l.kernel.name == op.name {
                    diags.push(Diagnostic::error(Code::UndefinedName, format!("operator `{}` launches itself", op.name), l.kernel.span, "recursive call").with_note("help: an operator is a fixed sequence of launches; it may call operators declared before it"));
                } else if let Some(k) = kernels.iter().find(|k| k.name == l.kernel.name) {
                    if let Some((launch, _)) = launch(l, &op, Callee::Kernel(k), &mut slots, parse_error, diags) {
                        op.launches.push(launch);
                    }
                } else if !parse_error {
                    let known: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).chain(operators.iter().map(|c| c.name.as_str())).collect();
                    diags.push(
                        Diagnostic::error(Code::UndefinedName, format!("no kernel or operator `{}`", l.kernel.name), l.kernel.span, "not a kernel of this file or its imports, nor an operator declared above")
                            .with_note(format!("callable here: {}", if known.is_empty() { "none".to_string() } else { known.join(", ") }))
                            .with_note("help: an operator may call operators declared before it in the same file"),
                    );
                }
            }
            ast::OpStmt::Error(_) => {}
        }
    }
    if !diags.has_errors_since(errors_before) && !parse_error {
        for p in op.params.iter().map(|p| (&p.name, p.span)).chain(op.buffers.iter().map(|b| (&b.name, b.span))) {
            let s = &slots[p.0];
            if matches!(s.role, Role::Output | Role::Buffer) && !s.written {
                let what = if s.role == Role::Output { "output" } else { "buffer" };
                diags.push(
                    Diagnostic::error(Code::OperatorDataflow, format!("{what} `{}` is never written by a launch", p.0), p.1, "declared here")
                        .with_note("help: pass it to a kernel's `out` parameter, or remove it"),
                );
            }
        }
    }
    if op.launches.is_empty() && !parse_error && !skipped && !diags.has_errors_since(errors_before) {
        diags.push(Diagnostic::error(Code::OperatorDataflow, format!("operator `{}` launches no kernel", op.name), o.name.span, "empty operator"));
    }
    // A launch left out (its kernel or called operator has an error, or may be an import's)
    // leaves the operator incomplete: not lowered either, so that calls of it are not checked.
    (!diags.has_errors_since(errors_before) && !skipped).then_some(op)
}

/// What a launch calls: a kernel, or an operator declared earlier in the file (inlined: its
/// buffers become the caller's, its launches follow in order).
#[derive(Copy, Clone)]
enum Callee<'a> {
    Kernel(&'a Kernel),
    Operator(&'a Operator),
}

impl Callee<'_> {
    fn name(&self) -> &str {
        match self {
            Callee::Kernel(k) => &k.name,
            Callee::Operator(o) => &o.name,
        }
    }
    fn what(&self) -> &'static str {
        match self {
            Callee::Kernel(_) => "kernel",
            Callee::Operator(_) => "operator",
        }
    }
    fn params(&self) -> Vec<&crate::ir::ParamData> {
        match self {
            Callee::Kernel(k) => k.params.values().collect(),
            Callee::Operator(o) => o.params.iter().collect(),
        }
    }
    fn sizes(&self) -> &PrimaryMap<SizeVar, String> {
        match self {
            Callee::Kernel(k) => &k.sizes,
            Callee::Operator(o) => &o.sizes,
        }
    }
    fn size_text(&self, e: &SizeExpr) -> String {
        e.display(self.sizes()).to_string()
    }
}

/// Checks one launch; marks what it writes. Returns the launch and the callee's sizes bound to
/// the caller's expressions.
fn launch(l: &ast::LaunchDecl, op: &Operator, k: Callee, slots: &mut HashMap<String, Slot>, parse_error: bool, diags: &mut Diagnostics) -> Option<(Launch, BTreeMap<String, SizeExpr>)> {
    let declared = |p: &crate::ir::ParamData| match &p.kind {
        ParamKind::Tensor { elem, shape, output } => format!("{}: {}{elem}[{}]", p.name, if *output { "out " } else { "" }, shape.iter().map(|s| k.size_text(s)).collect::<Vec<_>>().join(", ")),
        ParamKind::Scalar(e) => format!("{}: {e}", p.name),
    };
    let kparams: Vec<&crate::ir::ParamData> = k.params();
    if kparams.len() != l.args.len() {
        diags.push(
            Diagnostic::error(Code::BadArguments, format!("{} `{}` takes {} arguments, this launch passes {}", k.what(), k.name(), kparams.len(), l.args.len()), l.span, "wrong number of arguments")
                .with_note(format!("`{}`({})", k.name(), kparams.iter().map(|p| declared(p)).collect::<Vec<_>>().join(", "))),
        );
        return None;
    }
    let errors_before = diags.error_count();
    // Kernel size → the operator's expression it meets first (a bare size dimension).
    let mut bound: BTreeMap<String, SizeExpr> = BTreeMap::new();
    let mut pairs = vec![];
    let mut writes = vec![];
    let mut seen: HashMap<&str, Span> = HashMap::new();
    for (kp, arg) in kparams.iter().zip(&l.args) {
        let Some(slot) = slots.get(&arg.name) else {
            if !parse_error {
                diags.push(Diagnostic::error(Code::UndefinedName, format!("`{}` is not a parameter or buffer of operator `{}`", arg.name, op.name), arg.span, "unknown name"));
            }
            continue;
        };
        // A tensor passed twice (each time to a tensor parameter: a tensor given for a scalar is
        // the kind error below).
        let tensor_param = matches!(kp.kind, ParamKind::Tensor { .. });
        if slot.shape.is_some() && tensor_param {
            if let Some(prev) = seen.insert(arg.name.as_str(), arg.span) {
                diags.push(
                    Diagnostic::error(Code::OperatorDataflow, format!("`{}` is passed twice to `{}`", arg.name, k.name()), arg.span, "again here")
                        .with_label(prev, "first here")
                        .with_note("a launch receives each tensor once (a kernel's parameters never alias)")
                        .with_note("help: copy it into a second buffer first, or pass a different tensor"),
                );
                continue;
            }
        }
        // Written by this launch (even if the argument has an error below: no cascade).
        if matches!(kp.kind, ParamKind::Tensor { output: true, .. }) && slot.role != Role::Input {
            writes.push(arg.name.clone());
        }
        if slot.poisoned {
            continue;
        }
        let note = || format!("`{}` declares `{}`", k.name(), declared(kp));
        let (kelem, kshape, kout) = match &kp.kind {
            ParamKind::Tensor { elem, shape, output } => (*elem, Some(shape), *output),
            ParamKind::Scalar(e) => (*e, None, false),
        };
        match (kshape, &slot.shape) {
            (Some(_), None) | (None, Some(_)) => {
                let (want, got) = if kshape.is_some() { ("tensor", "scalar") } else { ("scalar", "tensor") };
                diags.push(Diagnostic::error(Code::WrongKind, format!("`{}` is a {got}, but `{}` of `{}` is a {want}", arg.name, kp.name, k.name()), arg.span, format!("a {got}")).with_note(note()));
                continue;
            }
            _ => {}
        }
        if kelem != slot.elem {
            diags.push(Diagnostic::error(Code::TypeMismatch, format!("`{}` is {}, but `{}` of `{}` is {kelem}", arg.name, slot.elem, kp.name, k.name()), arg.span, format!("{} here", slot.elem)).with_note(note()));
            continue;
        }
        if let (Some(ks), Some(os)) = (kshape, &slot.shape) {
            if ks.len() != os.len() {
                diags.push(Diagnostic::error(Code::ShapeMismatch, format!("`{}` has rank {}, but `{}` of `{}` has rank {}", arg.name, os.len(), kp.name, k.name(), ks.len()), arg.span, "wrong rank").with_note(note()));
                continue;
            }
            for (kd, od) in ks.iter().zip(os) {
                if let SizeExpr::Sym(s) = kd {
                    bound.entry(k.sizes()[*s].clone()).or_insert_with(|| od.clone());
                }
            }
            pairs.push((kp, arg, ks.clone(), os.clone()));
        }
        if kout {
            match slot.role {
                Role::Input => {
                    diags.push(
                        Diagnostic::error(Code::OperatorDataflow, format!("launch of `{}` writes operator input `{}`", k.name(), arg.name), arg.span, format!("`{}` is an `out` parameter of `{}`", kp.name, k.name()))
                            .with_label(slot.span, "an input of the operator")
                            .with_note("help: write into a buffer (`let name: elem[shape];`) or an `out` parameter of the operator"),
                    );
                    continue;
                }
                Role::Output | Role::Buffer => {}
            }
        } else if slot.role != Role::Input && !slot.written {
            diags.push(
                Diagnostic::error(Code::OperatorDataflow, format!("`{}` is read by `{}` before any launch writes it", arg.name, k.name()), arg.span, format!("read as `{}`", kp.name))
                    .with_label(slot.span, "declared here")
                    .with_note("help: launch the kernel that produces it first"),
            );
            continue;
        }
    }
    // A factor of a product dimension no bare dimension bound (GVA's `H * G`): bound to the
    // operator's factor in the same position. The comparison below checks the result.
    for (_, _, ks, os) in &pairs {
        for (kd, od) in ks.iter().zip(os) {
            if let (SizeExpr::Bin(crate::ir::SizeOp::Mul, ka, kb), SizeExpr::Bin(crate::ir::SizeOp::Mul, oa, ob)) = (kd, od) {
                // The unbound factor takes the operator factor beside the one its partner
                // matches (`H * G` against `2 * H` binds G = 2), in either order.
                for (kf, partner) in [(ka, kb), (kb, ka)] {
                    let SizeExpr::Sym(s) = kf.as_ref() else { continue };
                    let name = &k.sizes()[*s];
                    if bound.contains_key(name) {
                        continue;
                    }
                    let Some(p) = substitute(partner, k, &bound) else { continue };
                    if p == **ob {
                        bound.insert(name.clone(), oa.as_ref().clone());
                    } else if p == **oa {
                        bound.insert(name.clone(), ob.as_ref().clone());
                    }
                }
            }
        }
    }
    // Extents: every dimension, the kernel's side written in the operator's sizes.
    for (kp, arg, ks, os) in pairs {
        for (i, (kd, od)) in ks.iter().zip(&os).enumerate() {
            if let Some(differs) = differs(k, kd, op, od, &bound) {
                let needs = substitute(kd, k, &bound).map(|e| op.size_text(&e)).unwrap_or_else(|| k.size_text(kd));
                diags.push(
                    Diagnostic::error(Code::ShapeMismatch, format!("dimension {i} of `{}` is `{}`, but `{}` of `{}` needs `{}` here", arg.name, op.size_text(od), kp.name, k.name(), needs), arg.span, "extent differs")
                        .with_note(format!("with the kernel's sizes bound by this launch ({}), they differ at {differs}", bound.iter().map(|(n, e)| format!("{n} = {}", op.size_text(e))).collect::<Vec<_>>().join(", "))),
                );
                break;
            }
        }
    }
    // What the launch writes counts as written even when it has an error, so that a later read
    // is not reported as well.
    for w in &writes {
        if let Some(s) = slots.get_mut(w) {
            s.written = true;
        }
    }
    if diags.has_errors_since(errors_before) {
        return None;
    }
    Some((Launch { kernel: k.name().to_string(), args: kparams.iter().zip(&l.args).map(|(p, a)| (p.name.clone(), a.name.clone())).collect(), span: l.span }, bound))
}

/// Inlines a call of operator `callee` (checked by [`launch`]): each of its buffers becomes a
/// buffer of `op` named `callee.buffer` (its shape in `op`'s sizes), and its launches follow,
/// their arguments renamed to what the call passed.
fn inline(callee: &Operator, call: &Launch, bound: &BTreeMap<String, SizeExpr>, op: &mut Operator, slots: &mut HashMap<String, Slot>, diags: &mut Diagnostics) {
    let mut rename: HashMap<&str, String> = call.args.iter().map(|(p, a)| (p.as_str(), a.clone())).collect();
    for (table, _) in &callee.offsets {
        if let Some(a) = rename.get(table.as_str()) {
            super::offsets::check_passed(op, a, callee, call, diags);
        }
    }
    for b in &callee.buffers {
        let mut name = format!("{}.{}", callee.name, b.name);
        // The same operator called twice gets fresh buffers each time.
        let mut n = 1;
        while slots.contains_key(&name) {
            n += 1;
            name = format!("{}#{n}.{}", callee.name, b.name);
        }
        let shape: Option<Vec<SizeExpr>> = b.shape.iter().map(|d| substitute(d, Callee::Operator(callee), bound)).collect();
        let Some(shape) = shape else {
            diags.push(
                Diagnostic::error(Code::ShapeMismatch, format!("buffer `{}` of `{}` has an extent this call does not determine", b.name, callee.name), call.span, "called here")
                    .with_label(b.span, "declared here")
                    .with_note("help: every size in the callee's buffer shapes must be determined by its parameters' shapes: bare (`T`), or a factor of a product whose other factor is (`H * G`)"),
            );
            return;
        };
        slots.insert(name.clone(), Slot { elem: b.elem, shape: Some(shape.clone()), role: Role::Buffer, span: call.span, written: true, poisoned: false });
        op.buffers.push(Buffer { name: name.clone(), elem: b.elem, shape, span: b.span });
        rename.insert(b.name.as_str(), name);
    }
    if op.launches.len() + callee.launches.len() > MAX_LAUNCHES {
        diags.push(
            Diagnostic::error(Code::OperatorDataflow, format!("operator `{}` would inline more than {MAX_LAUNCHES} launches", op.name), call.span, format!("this call adds {}", callee.launches.len()))
                .with_note("help: calls are inlined in full: an operator that calls another several times, nested, doubles per level"),
        );
        return;
    }
    for l in &callee.launches {
        let args = l.args.iter().map(|(p, a)| (p.clone(), rename.get(a.as_str()).cloned().unwrap_or_else(|| a.clone()))).collect();
        op.launches.push(Launch { kernel: l.kernel.clone(), args, span: l.span });
    }
}

/// Whether kernel extent `kd` (its sizes replaced through `bound`) and operator extent `od`
/// differ at one of the sample size assignments: the assignment where they do, as text.
/// `None` when they agree everywhere or the kernel's side names a size no dimension binds
/// (the run-time binder checks those).
fn differs(k: Callee, kd: &SizeExpr, op: &Operator, od: &SizeExpr, bound: &BTreeMap<String, SizeExpr>) -> Option<String> {
    let parse = |t: String| tilec_abi::expr::SizeExpr::parse(&t).ok();
    let kexpr = parse(k.size_text(kd))?;
    let oexpr = parse(op.size_text(od))?;
    for (n, &base) in SAMPLES.iter().enumerate() {
        // Different sizes get different values (base, base + 1, ...) so that swapped sizes differ.
        let env: BTreeMap<String, i64> = op.sizes.values().enumerate().map(|(i, s)| (s.clone(), base + i as i64 * (n as i64 + 1))).collect();
        let mut kenv = BTreeMap::new();
        for (name, e) in bound {
            let Ok(v) = parse(op.size_text(e))?.eval(&env) else { return None };
            kenv.insert(name.clone(), v);
        }
        let (Ok(a), Ok(b)) = (kexpr.eval(&kenv), oexpr.eval(&env)) else { return None };
        if a != b {
            return Some(env.iter().map(|(s, v)| format!("{s} = {v}")).collect::<Vec<_>>().join(", "));
        }
    }
    None
}

/// Whether a buffer initialiser is the constant zero (`0`, `0.0`, `1 - 1`, …).
fn is_zero(e: &ast::Expr, consts: &HashMap<String, i64>) -> bool {
    match &e.kind {
        ast::ExprKind::Float(f) => f.parse::<f64>().is_ok_and(|v| v == 0.0),
        _ => matches!(super::eval_const(e, consts), Ok(0)),
    }
}

/// The kernel extent `kd` written in the operator's sizes: every kernel size replaced by the
/// operator expression this launch binds it to (`None` when one is unbound).
fn substitute(kd: &SizeExpr, k: Callee, bound: &BTreeMap<String, SizeExpr>) -> Option<SizeExpr> {
    Some(match kd {
        SizeExpr::Const(c) => SizeExpr::Const(*c),
        SizeExpr::Sym(s) => bound.get(&k.sizes()[*s])?.clone(),
        SizeExpr::Bin(op, a, b) => SizeExpr::Bin(*op, Box::new(substitute(a, k, bound)?), Box::new(substitute(b, k, bound)?)),
    })
}

/// Why parameter `p` of an operator with `contract(m)` cannot be matched to member `m`'s oracle:
/// a gate of the wrong rank (a scalar gate is `[B, T, H]`, a per-channel gate `[B, T, H, K]`),
/// or a gate, β, the saved Ai (`ai`) or the saved scores (`pt`) the member does not have
/// (gdn-math.md §1: only GDN and KDA have β and the delta rule's inverse; LA has no gate; only
/// the per-channel members KDA and GLA save Pᵀ).
fn contract_mismatch(m: kverify::recurrence::family::Model, p: &crate::ir::ParamData) -> Option<String> {
    use kverify::recurrence::family::Gate;
    let ParamKind::Tensor { shape, .. } = &p.kind else { return None };
    match p.name.as_str() {
        "g" | "dg" => match m.gate() {
            Gate::None => Some(format!("{} has no gate", m.name())),
            Gate::Scalar if shape.len() != 3 => Some(format!("{}'s gate is one per token and head, rank 3 ([B, T, H]), not rank {}", m.name(), shape.len())),
            Gate::Channel if shape.len() != 4 => Some(format!("{}'s gate is one per key channel, rank 4 ([B, T, H, K]), not rank {}", m.name(), shape.len())),
            _ => None,
        },
        "beta" | "dbeta" if !m.has_beta() => Some(format!("{} has no β (no delta rule)", m.name())),
        n if n == crate::verify::SAVED_AI && !m.has_beta() => Some(format!("{} has no delta rule, so no (I + L)⁻¹ to save", m.name())),
        // Pᵀ is saved where fla's per-channel members save theirs (chunk_kda's Aqk, chunk_gla's A);
        // the scalar-gate members' backwards form P inside their dqkwg stage.
        n if n == crate::verify::SAVED_PT && m.gate() != Gate::Channel => Some(format!("{} has no per-channel gate: its backward forms the scores itself, so no Pᵀ to save", m.name())),
        _ => None,
    }
}

/// What `contract(m)`'s gate, β and saved inverse look like.
fn contract_help(m: kverify::recurrence::family::Model) -> String {
    use kverify::recurrence::family::Gate;
    let gate = match m.gate() {
        Gate::None => "no g",
        Gate::Scalar => "g: f32[B, T, H]",
        Gate::Channel => "g: f32[B, T, H, K]",
    };
    let beta = if m.has_beta() { "beta: bf16[B, T, H], and a forward may return (a backward take) ai: bf16[B, T, H, 64]" } else { "no beta and no ai" };
    let pt = if m.gate() == Gate::Channel { "; a forward may return (a backward take) pt: bf16[B, T, H, 64]" } else { "; no pt" };
    format!("`contract({})` takes {gate}; {beta}{pt}", m.name())
}
