//! Per-pass file tests: each `tests/ir/NAME.tir` holds IR text (as `tilec check --emit ir`
//! prints it) and directive comments, and is its own `#[test]`. At the end: the round trip of
//! the text form (print → read → print) that the fixtures rely on.
//!
//! Directives (comment lines; see docs/architecture.md, "IR text and file tests"):
//! * `; run: PASS` — exactly one; PASS is `validate`, `dce`, `zero-products` (then `dce`),
//!   `tmem-plan`, `smem-plan sm_90a`, `smem-plan sm_100a` or `lints`. Every pass but `validate`
//!   validates the kernel first.
//! * `; check: TEXT` — TEXT occurs in a line of the pass's output after the line the previous
//!   check matched (FileCheck order; runs of spaces match any run of spaces).
//! * `; check-next: TEXT` — TEXT occurs in the line right after the previous check's line.
//! * `; check-not: TEXT` — no line between the neighbouring checks' matches contains TEXT.
//! * `; error: TEXT` — the pass must fail with an error whose code or message contains TEXT;
//!   the checks then run over the rendered errors.

use tilec::diag::{Diagnostic, Severity, Span};
use tilec::ir::builder::Builder;
use tilec::ir::validate::{validate, Validated};
use tilec::ir::*;
use tilec::passes::{dce, lints, zero_products, remat, smem_report, target_plan, tmem_plan, tmem_report};
use tilec::target::Target;

/// One error of a pass: code (empty for validator errors), message, and its rendering.
struct PassError {
    code: String,
    message: String,
    text: String,
}

impl PassError {
    fn from_diag(d: &Diagnostic) -> PassError {
        PassError { code: d.code.as_str().into(), message: d.message.clone(), text: render(d) }
    }
}

fn render(d: &Diagnostic) -> String {
    let sev = if d.severity == Severity::Error { "error" } else { "warning" };
    let mut s = format!("{sev} {}: {}\n", d.code.as_str(), d.message);
    for l in &d.labels {
        s += &format!("  label: {}\n", l.message);
    }
    for n in &d.notes {
        s += &format!("  note: {n}\n");
    }
    s
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pass {
    Validate,
    Dce,
    ZeroProducts,
    Remat,
    TmemPlan,
    SmemPlan(Target),
    Lints,
}

fn parse_pass(s: &str) -> Result<Pass, String> {
    Ok(match s.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["validate"] => Pass::Validate,
        ["dce"] => Pass::Dce,
        ["zero-products"] => Pass::ZeroProducts,
        ["remat"] => Pass::Remat,
        ["tmem-plan"] => Pass::TmemPlan,
        ["smem-plan", "sm_90a"] => Pass::SmemPlan(Target::Sm90a),
        ["smem-plan", "sm_100a"] => Pass::SmemPlan(Target::Sm100a),
        ["lints"] => Pass::Lints,
        _ => return Err(format!("unknown pass `{s}`")),
    })
}

fn checked(k: &Kernel) -> Result<Validated<'_>, Vec<PassError>> {
    validate(k).map_err(|errs| errs.iter().map(|e| PassError { code: String::new(), message: e.to_string(), text: format!("error: invalid IR: {e}\n") }).collect())
}

/// A rewriting pass `f` run on a copy of a valid kernel, as the driver runs it: the line `f`
/// returns, then the rewritten kernel, which must validate too.
fn rewrite(k: &Kernel, f: impl FnOnce(&mut Kernel) -> String) -> Result<String, Vec<PassError>> {
    checked(k)?;
    let mut k = k.clone();
    let line = f(&mut k);
    checked(&k)?;
    Ok(line + "\n" + &write::write_kernel(&k))
}

/// Runs `pass` on one kernel: its text output, or its errors.
fn run_pass(pass: Pass, k: &Kernel) -> Result<String, Vec<PassError>> {
    match pass {
        Pass::Validate => checked(k).map(|_| format!("kernel {}: valid\n", k.name)),
        Pass::Dce => rewrite(k, |k| format!("; {} instructions removed", dce::run(k, &[]))),
        Pass::ZeroProducts => rewrite(k, |k| {
            let folded = zero_products::run(k);
            format!("; {folded} products folded, {} instructions removed", dce::run(k, &[]))
        }),
        Pass::Remat => rewrite(k, |k| {
            let copied = remat::run(k);
            format!("; {copied} index operands copied, {} instructions removed", dce::run(k, &[]))
        }),
        Pass::TmemPlan => {
            checked(k)?;
            let mut k = k.clone();
            let plan = tmem_plan::run(&mut k).map_err(|d| vec![PassError::from_diag(&d)])?;
            checked(&k)?; // the planner's output must validate too, as in the driver
            Ok(tmem_report::render_text(&plan) + &write::write_kernel(&k))
        }
        Pass::SmemPlan(t) => {
            let v = checked(k)?;
            let tp = target_plan::run(&v, t).map_err(|d| vec![PassError::from_diag(&d)])?;
            Ok(smem_report::render_text(k, &tp, None))
        }
        Pass::Lints => {
            checked(k)?;
            let diags = lints::run(k);
            let errors: Vec<PassError> = diags.iter().filter(|d| d.severity == Severity::Error).map(PassError::from_diag).collect();
            if errors.is_empty() {
                Ok(diags.iter().map(render).collect::<Vec<_>>().concat())
            } else {
                Err(errors)
            }
        }
    }
}

#[derive(Debug)]
enum Check {
    Later(String, usize),
    Next(String, usize),
    Not(String, usize),
}

struct Directives {
    pass: Pass,
    checks: Vec<Check>,
    errors: Vec<(String, usize)>,
}

fn directives(text: &str) -> Result<Directives, String> {
    let (mut pass, mut checks, mut errors) = (None, vec![], vec![]);
    for (n, line) in text.lines().enumerate() {
        let Some((_, comment)) = line.split_once(';') else { continue };
        let Some((key, arg)) = comment.trim_start().split_once(':') else { continue };
        let arg = arg.trim().to_string();
        let no = n + 1;
        match key {
            "run" if pass.is_some() => return Err(format!("line {no}: a second `run:`")),
            "run" => pass = Some(parse_pass(&arg).map_err(|e| format!("line {no}: {e}"))?),
            "check" => checks.push(Check::Later(arg, no)),
            "check-not" => checks.push(Check::Not(arg, no)),
            "check-next" => checks.push(Check::Next(arg, no)),
            "error" => errors.push((arg, no)),
            k if k.starts_with("check") || k.starts_with("run") || k.starts_with("error") => return Err(format!("line {no}: unknown directive `{k}:`")),
            _ => continue,
        }
    }
    let pass = pass.ok_or("no `; run:` directive")?;
    if checks.is_empty() && errors.is_empty() {
        return Err("no `; check:` or `; error:` directive: the fixture would test nothing".into());
    }
    Ok(Directives { pass, checks, errors })
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// FileCheck: checks match in order, each on a later line than the previous; a `check-not`
/// forbids its text between the neighbouring checks' matches (or the start / the end).
fn filecheck(output: &str, checks: &[Check]) -> Result<(), String> {
    let lines: Vec<String> = output.lines().map(squash).collect();
    let mut from = 0;
    let mut nots: Vec<(String, usize)> = vec![];
    let forbid = |nots: &[(String, usize)], range: &[String], from: usize| -> Result<(), String> {
        for (t, no) in nots {
            if let Some(i) = range.iter().position(|l| l.contains(t.as_str())) {
                return Err(format!("check-not `{t}` (line {no}) matches output line {}: {}", from + i + 1, range[i]));
            }
        }
        Ok(())
    };
    for c in checks {
        match c {
            Check::Not(t, no) => nots.push((squash(t), *no)),
            Check::Later(t, no) | Check::Next(t, no) => {
                let t = squash(t);
                let next = matches!(c, Check::Next(..));
                let Some(at) = (from..lines.len()).take(if next { 1 } else { usize::MAX }).find(|&i| lines[i].contains(&t)) else {
                    let place = if next { "on" } else { "at or after" };
                    return Err(format!("check `{t}` (line {no}) not found {place} output line {}", from + 1));
                };
                forbid(&nots, &lines[from..at], from)?;
                nots.clear();
                from = at + 1;
            }
        }
    }
    forbid(&nots, &lines[from.min(lines.len())..], from)
}

/// Runs a fixture's text; `Err` says what did not hold.
fn run_fixture(text: &str) -> Result<(), String> {
    let d = directives(text)?;
    let module = read::read_module(text).map_err(|e| format!("IR does not read: {e}"))?;
    if module.kernels.is_empty() {
        return Err("no kernel".into());
    }
    let (mut output, mut errors) = (String::new(), vec![]);
    for k in &module.kernels {
        match run_pass(d.pass, k) {
            Ok(s) => output += &s,
            Err(e) => errors.extend(e),
        }
    }
    let rendered: String = errors.iter().map(|e| e.text.as_str()).collect();
    let checked_text = match (d.errors.is_empty(), errors.is_empty()) {
        (true, true) => output,
        (true, false) => return Err(format!("{:?} failed unexpectedly:\n{rendered}", d.pass)),
        (false, true) => return Err(format!("{:?} succeeded, but errors were expected; output:\n{output}", d.pass)),
        (false, false) => {
            for (t, no) in &d.errors {
                if !errors.iter().any(|e| e.code.contains(t.as_str()) || e.message.contains(t.as_str())) {
                    return Err(format!("no error matches `{t}` (line {no}); errors:\n{rendered}"));
                }
            }
            rendered
        }
    };
    filecheck(&checked_text, &d.checks).map_err(|e| format!("{e}\n--- output ---\n{checked_text}"))
}

fn fixture_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ir")
}

fn run_file(name: &str) {
    let path = fixture_dir().join(format!("{name}.tir"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Err(e) = run_fixture(&text) {
        panic!("{}: {e}", path.display());
    }
}

/// One `#[test]` per fixture, and the list of them.
macro_rules! fixtures {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { run_file(stringify!($name)); })*
        const FIXTURES: &[&str] = &[$(stringify!($name)),*];
    };
}

fixtures!(
    tmem_reuse_disjoint,
    dce_dropped_output,
    zero_products,
    fuse_column_sum_costly_terms,
    tmem_loop_extends_live_range,
    tmem_over_budget,
    validate_use_before_def,
    validate_mma_operand_in_registers,
    validate_two_allocs,
    validate_var_scopes,
    validate_ctas_per_sm,
    smem_over_budget_sm90,
    smem_reuse_disjoint,
    smem_plan_sm100_gemm,
    smem_plan_sm90_ring_residency,
    smem_block_update_in_place,
    smem_block_update_late_view,
    smem_block_update_write_between,
    smem_block_update_other_variable,
    smem_elementwise_update_in_place,
    smem_elementwise_update_transposed,
    ctas_per_sm_residency,
    barriers_by_conflict,
    barriers_loop_back_edge,
    barriers_store_before_pipelined_copy,
    barriers_store_then_copy_next_iteration,
    wgmma_waits_by_dependence,
    wgmma_wait_before_operand_write,
    wgmma_chained_fence,
    fuse_broadcast_cheap,
    tmem_var_in_registers,
    frag_reduce_pieces,
    frag_reduce_pieces_barrier,
    tmem_var_stays_in_smem,
    lints_unused,
    gather_in_place,
    remat_gather_index,
    remat_limits,
    remat_loop_invariant,
    barriers_own_update,
);

#[test]
fn every_fixture_is_listed() {
    let mut unlisted = vec![];
    for e in std::fs::read_dir(fixture_dir()).expect("tests/ir exists") {
        let p = e.expect("readable entry").path();
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if p.extension().is_some_and(|x| x == "tir") && !FIXTURES.contains(&stem.as_str()) {
            unlisted.push(stem);
        }
    }
    assert!(unlisted.is_empty(), "fixtures not listed in fixtures!(...) in compiler/tests/filecheck.rs: {unlisted:?}");
}

/// The harness itself: wrong expectations must fail.
#[test]
fn wrong_expectations_fail() {
    let text = std::fs::read_to_string(fixture_dir().join("tmem_reuse_disjoint.tir")).expect("fixture");
    assert_eq!(run_fixture(&text), Ok(()));
    let broken = [
        text.replacen("TMEM alloc 512 columns", "TMEM alloc 256 columns", 1),
        text.replacen("; run: tmem-plan", "; run: tmem-plan\n; error: E0402", 1),
        text.replacen("; check: i17: tmem.relinquish", "; check-not: tmem.relinquish", 1),
        text.replacen("; run: tmem-plan", "; run: tmem-plna", 1),
        text.replacen("; run: tmem-plan", "; checks: nothing\n; run: tmem-plan", 1),
        text.replacen("; run: tmem-plan", "; run: validate\n; run: tmem-plan", 1),
    ];
    for (n, b) in broken.iter().enumerate() {
        assert_ne!(*b, text, "edit {n} did not apply");
        assert!(run_fixture(b).is_err(), "edit {n} still passes");
    }
    // Order: a check cannot match a line before the previous match.
    assert!(filecheck("a\nb\n", &[Check::Later("b".into(), 1), Check::Later("a".into(), 2)]).is_err());
    assert!(filecheck("a\nb\n", &[Check::Later("a".into(), 1), Check::Later("a".into(), 2)]).is_err());
    assert!(filecheck("a\nx\nb\n", &[Check::Later("a".into(), 1), Check::Not("x".into(), 2), Check::Later("b".into(), 3)]).is_err());
    assert!(filecheck("a  b\n", &[Check::Later("a b".into(), 1)]).is_ok());
    assert!(filecheck("a\nx\nb\n", &[Check::Later("a".into(), 1), Check::Next("b".into(), 2)]).is_err());
    assert!(filecheck("a\nb\n", &[Check::Later("a".into(), 1), Check::Next("b".into(), 2)]).is_ok());
}

// ---------------------------------------------------------------------------------------------
// The text form round-trips: print → read → print is the identity.

fn check_file(path: &std::path::Path) -> tilec::frontend::Checked {
    tilec::frontend::check_file(path, &tilec::frontend::Options::default()).expect("example").1
}

#[test]
fn examples_round_trip_and_validate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("dsl-examples") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "tile") {
            continue; // negative/ holds programs that do not check
        }
        let checked = check_file(&p);
        assert!(checked.ok(), "{} does not check", p.display());
        let text = write::write_module(&checked.module);
        let m = read::read_module(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(write::write_module(&m), text, "{}: print(read(print)) differs", p.display());
        for k in &m.kernels {
            validate(k).unwrap_or_else(|errs| panic!("{}: read kernel is invalid: {errs:?}", p.display()));
        }
        n += 1;
    }
    assert!(n >= 4, "examples not found in {}", dir.display());
}

/// A new `Op` variant fails to compile here until [`every_op_round_trips`] prints it.
fn covered(op: &Op) {
    match op {
        Op::ConstInt(_) | Op::ConstFloat(_) | Op::ProgramId(_) | Op::Size(_) | Op::ScalarParam(_) | Op::Unary(..) | Op::Binary(..) => {}
        Op::Cmp(..) | Op::Select(..) | Op::Cast(..) | Op::Splat(_) | Op::Iota(_) | Op::Mask(_) | Op::Reduce(..) | Op::Transpose(_) => {}
        Op::Load { .. } | Op::Store { .. } | Op::ReadVar(_) | Op::WriteVar(..) | Op::Mma { .. } | Op::For { .. } => {}
        Op::Slice { .. } | Op::Gather { .. } | Op::Insert { .. } | Op::Scan { .. } => {}
        Op::TmemAlloc { .. } | Op::TmemRelinquish | Op::TmemDealloc { .. } => {}
    }
}

/// Every operation, operator, axis, MMA form, float spelling and size-expression form.
#[test]
fn every_op_round_trips() {
    let mut k = Kernel::new("all$ops", Span::default());
    let (m, n) = (k.declare_size("M"), k.declare_size("N"));
    let sym = |s: &str| Box::new(SizeExpr::Sym(if s == "M" { m } else { n }));
    let shape = vec![SizeExpr::Bin(SizeOp::Cdiv, sym("M"), Box::new(SizeExpr::Const(-3))), SizeExpr::Bin(SizeOp::Rem, sym("N"), Box::new(SizeExpr::Bin(SizeOp::Max, sym("M"), sym("N"))))];
    for (name, kind) in [
        ("x", ParamKind::Tensor { elem: Elem::Bf16, shape: shape.clone(), output: false }),
        ("y", ParamKind::Tensor { elem: Elem::F16, shape, output: true }),
        ("s", ParamKind::Scalar(Elem::F32)),
    ] {
        k.params.push(ParamData { name: name.into(), kind, span: Span::default(), edge: Edge::Zeros });
    }
    k.grid = [SizeExpr::Bin(SizeOp::Sub, sym("M"), sym("N")), SizeExpr::Bin(SizeOp::Min, sym("M"), Box::new(SizeExpr::Bin(SizeOp::Div, sym("N"), sym("M")))), SizeExpr::Bin(SizeOp::Add, sym("M"), Box::new(SizeExpr::Bin(SizeOp::Mul, sym("N"), sym("N"))))];
    k.threads = 256;
    let t = Type::tile(Elem::F32, 64, 32);
    let sp = Span::default();
    let mut b = Builder::new(&mut k);
    let (r, s, tm) = (b.var("%r", Space::Reg, t, sp), b.var("s.t", Space::Smem, t, sp), b.var("acc", Space::Tmem, Type::tile(Elem::Bool, 1, 1), sp));
    b.effect(Op::TmemAlloc { columns: 64 });
    b.effect(Op::TmemRelinquish);
    let i = b.iconst(-7);
    let floats: Vec<Value> = [0.0, -0.0, 1.5e-7, 1e300, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -2.25].into_iter().map(|c| b.fconst(c)).collect();
    let f = floats[0];
    let (_, iv, body) = b.for_loop(i, i, true);
    b.switch_to(body);
    let p = |n| Param::from_u32(n);
    let mut ops = vec![Op::ProgramId(2), Op::Size(tilec::ir::SizeVar::from_u32(1)), Op::ScalarParam(p(2)), Op::Select(iv, f, f), Op::Cast(f, Elem::Bf16), Op::Splat(f), Op::Transpose(f), Op::ReadVar(tm)];
    ops.extend([UnOp::Neg, UnOp::Exp2, UnOp::Log2, UnOp::Exp, UnOp::Abs, UnOp::Sqrt, UnOp::Not].map(|u| Op::Unary(u, f)));
    ops.extend([BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem, BinOp::Min, BinOp::Max, BinOp::Cdiv, BinOp::And, BinOp::Or].map(|o| Op::Binary(o, f, iv)));
    ops.extend([CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge].map(|o| Op::Cmp(o, iv, f)));
    for ax in [Axis::Row, Axis::Col] {
        ops.push(Op::Iota(ax));
        ops.extend([ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min].map(|r| Op::Reduce(r, ax, f)));
    }
    ops.extend([Op::Mask(TriMask::Lower), Op::Mask(TriMask::StrictLower)]);
    ops.extend([Op::Slice { src: f, row: iv, col: i }, Op::Gather { src: f, row: iv, col: i }, Op::Insert { base: f, value: iv, row: i, col: iv, rows: 3, cols: 5 }, Op::Scan { src: f, reverse: false }, Op::Scan { src: f, reverse: true }]);
    for (n, op) in ops.into_iter().enumerate() {
        b.value(op, if n % 2 == 0 { t } else { Type::Scalar(Elem::Bool) });
    }
    let index = vec![Index::Point(iv), Index::Range { start: i, len: 64 }];
    let v = b.value(Op::Load { src: p(0), index: index.clone() }, t);
    b.effect(Op::Store { dst: p(1), index: index.clone(), value: v, mask: None });
    b.effect(Op::Store { dst: p(1), index, value: v, mask: Some(iv) });
    b.effect(Op::Store { dst: p(1), index: vec![], value: v, mask: None });
    b.effect(Op::WriteVar(r, v));
    b.switch_to(b.kernel.body);
    for (accumulate, negate) in [(false, false), (false, true), (true, false), (true, true)] {
        let op = |var, transposed| MmaOperand { var, transposed };
        b.effect(Op::Mma { dst: tm, a: op(s, negate), b: op(s, accumulate), accumulate, negate });
    }
    let (lp, _, inner) = b.for_loop(i, i, false);
    b.switch_to(inner);
    b.value(Op::ConstInt(i64::MIN), Type::Scalar(Elem::I32));
    b.switch_to(b.kernel.body);
    b.effect(Op::TmemDealloc { columns: 64 });
    b.kernel.insts[lp].result = None; // a loop without an induction variable
    k.walk(|i| covered(&k.insts[i].op));
    let text = write::write_kernel(&k);
    let back = read::read_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(write::write_kernel(&back), text);
    assert_eq!((back.insts.len(), back.values.len()), (k.insts.len(), k.values.len()));
}

/// Every prefix and many one-byte edits of a real kernel give a result or an error, never a
/// panic; so does deep nesting.
#[test]
fn reader_never_panics_on_damaged_text() {
    let text = write::write_module(&check_file(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gemm.tile")).module);
    let deep = format!("kernel k()\n  sizes []\n  grid ({}1{}, 1, 1) threads 1\n", "(".repeat(5000), " + 1)".repeat(5000));
    assert!(read::read_module(&deep).is_err());
    let loops = format!("kernel k()\n  sizes []\n  grid (1, 1, 1) threads 1\n{{\n  i0: v0 = const 0 : i32\n{}", (1..5000).map(|n| format!("  i{n}: for v{n} in v0..v0 {{\n")).collect::<String>());
    assert!(read::read_module(&loops).is_err_and(|e| e.message.contains("nested deeper")));
    for end in 0..=text.len() {
        let _ = read::read_module(&text[..end]);
        for b in ["", "}", "{", "v9", "-", ".T", "9999999999", ":", "(", "é"] {
            let _ = read::read_module(&format!("{}{b}{}", &text[..end], &text[(end + 1).min(text.len())..]));
        }
    }
}
