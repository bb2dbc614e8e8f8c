//! One meaning for size arithmetic: the IR's constant folder (`SizeExpr::as_const`, whose
//! operators are the ABI's own `tilec_abi::expr::Op`), the ABI evaluator (`tilec_abi::expr`, used by the runtime's binder
//! and the interpreter) and the interpreter on a DSL kernel all compute what the generated
//! kernel computes with `div.s32` / `rem.s32`: division truncates toward zero.

use std::collections::BTreeMap;

use tilec::ir::{SizeExpr, SizeOp};
use tilec_abi::expr::SizeExpr as AbiExpr;
use tilec_abi::tensor::HostTensor;

/// The one size of [`kernel_t`], `T`.
fn sym(name: &str) -> SizeExpr {
    assert_eq!(name, "T", "the table's expressions are over T only");
    SizeExpr::Sym(tilec::ir::SizeVar::from_u32(0))
}

/// A kernel whose only size is `T`, for naming it in expressions.
fn kernel_t() -> tilec::ir::Kernel {
    let mut k = tilec::ir::Kernel::new("t", tilec::diag::Span::default());
    k.declare_size("T");
    k
}
fn c(v: i64) -> SizeExpr {
    SizeExpr::Const(v)
}
fn bin(op: SizeOp, a: SizeExpr, b: SizeExpr) -> SizeExpr {
    SizeExpr::Bin(op, Box::new(a), Box::new(b))
}

#[test]
fn ir_expressions_agree_with_the_abi_evaluator() {
    // (expression over T, T, the value the kernel computes with truncating division).
    let table = [
        // The review's example: -50 / 64 + 1 = 0 + 1.
        (bin(SizeOp::Add, bin(SizeOp::Div, bin(SizeOp::Sub, sym("T"), c(100)), c(64)), c(1)), 50, -50 / 64 + 1),
        (bin(SizeOp::Rem, bin(SizeOp::Sub, sym("T"), c(100)), c(64)), 50, -50 % 64),
        (bin(SizeOp::Cdiv, bin(SizeOp::Sub, sym("T"), c(200)), c(64)), 50, (-150 + 63) / 64),
        (bin(SizeOp::Cdiv, sym("T"), c(64)), 65, (65 + 63) / 64),
        (bin(SizeOp::Div, c(7), c(-2)), 0, 7 / -2),
        (bin(SizeOp::Max, bin(SizeOp::Sub, c(0), sym("T")), c(-3)), 5, -3),
        (bin(SizeOp::Mul, bin(SizeOp::Min, sym("T"), c(64)), c(-2)), 100, -128),
    ];
    let k = kernel_t();
    for (e, t, want) in table {
        let text = k.size_text(&e);
        let abi = AbiExpr::parse(&text).unwrap_or_else(|err| panic!("the metadata text `{text}` must parse: {err}"));
        assert_eq!(abi.eval(&BTreeMap::from([("T".to_string(), t)])), Ok(want), "{text} at T = {t}");
        // The IR folds the same expression with T substituted as a constant.
        let folded = substitute(&e, t).as_const();
        assert_eq!(folded, Some(want), "IR fold of {text} at T = {t}");
        assert_eq!(tilec::interp::bind::eval_size(&k, &e, &BTreeMap::from([("T".to_string(), t)])), Ok(want), "interpreter, {text}");
    }
}

fn substitute(e: &SizeExpr, t: i64) -> SizeExpr {
    match e {
        SizeExpr::Sym(_) => c(t),
        SizeExpr::Const(v) => c(*v),
        SizeExpr::Bin(op, a, b) => bin(*op, substitute(a, t), substitute(b, t)),
    }
}

#[test]
fn interpreter_binds_a_shape_with_a_negative_intermediate() {
    let src = "kernel k(x: f32[T], o: out f32[(T - 100) / 64 + 1]) grid(1) threads(128) {\n  store o[0] = 2.0;\n}\n";
    let checked = tilec::frontend::check_source(src, &Default::default());
    assert!(checked.ok(), "{:?}", checked.diags);
    let k = &checked.module.kernels[0];
    let inputs = BTreeMap::from([("x".to_string(), HostTensor::zeros(tilec_abi::meta::DType::F32, vec![50]).unwrap())]);
    let run = tilec::interp::run_kernel_with(k, &inputs, &Default::default()).expect("binds and runs");
    // The kernel would see div.s32(50 - 100, 64) + 1 = 1 element; floor division says 0.
    assert_eq!(run.outputs["o"].shape, [1]);
    assert_eq!(run.outputs["o"].to_f64(), [2.0]);
}
