//! Interpreter: semantics of individual operations on tiny builder-made kernels, and the
//! errors a run reports instead of panicking or hanging.

mod interp_common;

use std::collections::BTreeMap;

use interp_common::*;
use tilec::diag::Span;
use tilec::interp::{run_kernel, run_kernel_with, ExecError, InterpError, Options};
use tilec::ir::builder::Builder;
use tilec::ir::{Axis, BinOp, Elem, Index, Kernel, Op, ReduceOp, Space, TriMask, Type, Value};
use tilec_abi::bind::BindError;
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

/// A one-CTA kernel with an `out f32[R, C]` tensor `o`; `body` builds a tile stored at [0, 0].
fn one_cta(rows: u32, cols: u32, out: Elem, body: impl FnOnce(&mut Builder) -> Value) -> Kernel {
    let mut k = Kernel::new("t", Span::default());
    let po = tensor(&mut k, "o", out, vec![cst(rows as i64), cst(cols as i64)], true);
    let mut b = Builder::new(&mut k);
    let v = body(&mut b);
    let z = b.iconst(0);
    b.effect(Op::Store { dst: po, index: vec![Index::Range { start: z, len: rows }, Index::Range { start: z, len: cols }], value: v, mask: None });
    k
}

fn out(k: &Kernel) -> Vec<f64> {
    run_kernel(k, &BTreeMap::new()).expect("runs")["o"].to_f64()
}

#[test]
fn iota_mask_select_reduce_transpose() {
    let t = |e, r, c| Type::tile(e, r, c);
    // select(strict_lower, row*10 + col, -1), then transposed
    let k = one_cta(3, 3, Elem::F32, |b| {
        let r = b.value(Op::Iota(Axis::Row), t(Elem::I32, 3, 3));
        let c = b.value(Op::Iota(Axis::Col), t(Elem::I32, 3, 3));
        let ten = b.iconst(10);
        let r10 = bop(b, BinOp::Mul, r, ten, t(Elem::I32, 3, 3));
        let x = bop(b, BinOp::Add, r10, c, t(Elem::I32, 3, 3));
        let m = b.value(Op::Mask(TriMask::StrictLower), t(Elem::Bool, 3, 3));
        let neg = b.fconst(-1.0);
        let s = b.value(Op::Select(m, x, neg), t(Elem::F32, 3, 3));
        b.value(Op::Transpose(s), t(Elem::F32, 3, 3))
    });
    assert_eq!(out(&k), vec![-1.0, 10.0, 20.0, -1.0, -1.0, 21.0, -1.0, -1.0, -1.0]);
    // Lower mask includes the diagonal; row sums broadcast back over columns.
    let k = one_cta(2, 2, Elem::F32, |b| {
        let m = b.value(Op::Mask(TriMask::Lower), t(Elem::Bool, 2, 2));
        let one = b.fconst(1.0);
        let zero = b.fconst(0.0);
        let x = b.value(Op::Select(m, one, zero), t(Elem::F32, 2, 2));
        let s = b.value(Op::Reduce(ReduceOp::Sum, Axis::Row, x), t(Elem::F32, 2, 1));
        let c = b.value(Op::Reduce(ReduceOp::Max, Axis::Col, x), t(Elem::F32, 1, 2));
        bop(b, BinOp::Add, s, c, t(Elem::F32, 2, 2))
    });
    assert_eq!(out(&k), vec![2.0, 2.0, 3.0, 3.0]);
}

#[test]
fn bf16_storage_rounds_to_nearest_even() {
    // 1 + 2^-8 is a bf16 tie: a bf16 variable and a bf16 tensor both get 1.0; 1 + 3·2^-8
    // rounds up to the even neighbour 1 + 2^-6.
    for (x, want) in [(1.0 + 2f64.powi(-8), 1.0), (1.0 + 3.0 * 2f64.powi(-8), 1.0 + 2f64.powi(-6))] {
        let k = one_cta(1, 1, Elem::F32, |b| {
            let v = b.var("s", Space::Smem, Type::tile(Elem::Bf16, 1, 1), Span::default());
            let c = b.fconst(x);
            let tile = b.value(Op::Splat(c), Type::tile(Elem::F32, 1, 1));
            b.effect(Op::WriteVar(v, tile));
            b.value(Op::ReadVar(v), Type::tile(Elem::Bf16, 1, 1))
        });
        assert_eq!(out(&k), vec![want]);
        let k = one_cta(1, 1, Elem::Bf16, |b| {
            let c = b.fconst(x);
            b.value(Op::Splat(c), Type::tile(Elem::F32, 1, 1))
        });
        assert_eq!(out(&k), vec![want]);
    }
}

#[test]
fn out_of_bounds_points_load_zero_and_skip_stores() {
    let mut k = Kernel::new("t", Span::default());
    set_sizes(&mut k, &["N"]);
    let n_ = sym(&k, "N");
    let pi = tensor(&mut k, "x", Elem::F32, vec![n_.clone()], false);
    let po = tensor(&mut k, "o", Elem::F32, vec![n_], true);
    let mut b = Builder::new(&mut k);
    let n = b.value(Op::Size(size(0)), I32);
    let zero = b.iconst(0);
    let one = b.iconst(1);
    // o[0] = x[N] (out of bounds: 0) + x[N-1];  o[N] = 5 (skipped); o[1..+4] = x[1..+4] * 2
    let past = b.value(Op::Load { src: pi, index: vec![Index::Point(n)] }, F32);
    let nm1 = bop(&mut b, BinOp::Sub, n, one, I32);
    let last = b.value(Op::Load { src: pi, index: vec![Index::Point(nm1)] }, F32);
    let s = bop(&mut b, BinOp::Add, past, last, F32);
    b.effect(Op::Store { dst: po, index: vec![Index::Point(zero)], value: s, mask: None });
    let five = b.fconst(5.0);
    b.effect(Op::Store { dst: po, index: vec![Index::Point(n)], value: five, mask: None });
    let x = b.value(Op::Load { src: pi, index: vec![Index::Range { start: one, len: 4 }] }, Type::tile(Elem::F32, 4, 1));
    let two = b.fconst(2.0);
    let x2 = bop(&mut b, BinOp::Mul, x, two, Type::tile(Elem::F32, 4, 1));
    let xt = b.value(Op::Transpose(x2), Type::tile(Elem::F32, 1, 4)); // a row vector stores too
    b.effect(Op::Store { dst: po, index: vec![Index::Range { start: one, len: 4 }], value: xt, mask: None });
    let inputs = BTreeMap::from([("x".to_string(), HostTensor::from_f32(DType::F32, vec![3], &[1.0, 2.0, 3.0]).unwrap())]);
    let o = run_kernel(&k, &inputs).unwrap()["o"].to_f64();
    assert_eq!(o, vec![3.0, 4.0, 6.0]);
}

/// A kernel with one loop `for i in 0..hi { body }`; `hi` is an i32 constant.
fn looping(hi: i64, body: impl FnOnce(&mut Builder, Value)) -> Kernel {
    let mut k = Kernel::new("loop", Span::default());
    let mut b = Builder::new(&mut k);
    let lo = b.iconst(0);
    let hi = b.iconst(hi);
    let (_, i, blk) = b.for_loop(lo, hi, false);
    b.switch_to(blk);
    body(&mut b, i);
    k
}

#[test]
fn runtime_errors_are_reported() {
    // Reading a variable nobody wrote: refused by the validator before anything runs (the
    // planners rely on a write declaring every variable).
    let k = looping(1, |b, _| {
        let v = b.var("acc", Space::Tmem, Type::tile(Elem::F32, 64, 8), Span::default());
        b.value(Op::ReadVar(v), Type::tile(Elem::F32, 64, 8));
    });
    let e = run_kernel(&k, &BTreeMap::new()).unwrap_err();
    assert!(matches!(&e, InterpError::Invalid { errors, .. } if errors.len() == 1 && errors[0].message.contains("reads variable var0 (`acc`) before any write declares it")), "{e}");
    // Integer division by the induction variable, which is 0 on the first iteration.
    let k = looping(3, |b, i| {
        let c = b.iconst(7);
        bop(b, BinOp::Div, c, i, I32);
    });
    assert!(matches!(run_kernel(&k, &BTreeMap::new()), Err(InterpError::Exec { source: ExecError::DivisionByZero, .. })));
    // i32 overflow.
    let k = looping(1, |b, _| {
        let c = b.iconst(i64::from(i32::MAX));
        bop(b, BinOp::Add, c, c, I32);
    });
    assert!(matches!(run_kernel(&k, &BTreeMap::new()), Err(InterpError::Exec { source: ExecError::IntegerOverflow(_), .. })));
}

#[test]
fn runaway_loops_hit_the_step_budget() {
    let k = looping(i64::from(i32::MAX), |b, i| {
        let one = b.iconst(1);
        bop(b, BinOp::Add, i, one, I32);
    });
    let opts = Options { max_steps: 10_000, ..Options::default() };
    let e = run_kernel_with(&k, &BTreeMap::new(), &opts).unwrap_err();
    assert_eq!(e, InterpError::StepLimit { limit: 10_000 });
}

#[test]
fn input_checks() {
    let mut k = Kernel::new("t", Span::default());
    set_sizes(&mut k, &["N"]);
    let n_ = sym(&k, "N");
    tensor(&mut k, "x", Elem::F32, vec![n_, cst(4)], false);
    scalar(&mut k, "alpha", Elem::F32);
    let x = || HostTensor::zeros(DType::F32, vec![2, 4]).unwrap();
    let alpha = || HostTensor::from_f32(DType::F32, vec![], &[0.5]).unwrap();
    let ok = BTreeMap::from([("x".to_string(), x()), ("alpha".to_string(), alpha())]);
    assert!(run_kernel(&k, &ok).is_ok());
    let mut m = ok.clone();
    m.insert("y".into(), x());
    assert!(matches!(run_kernel(&k, &m), Err(InterpError::Bind(BindError::Unknown { name, .. })) if name == "y"));
    let mut m = ok.clone();
    m.insert("x".into(), HostTensor::zeros(DType::F32, vec![2, 5]).unwrap());
    assert!(matches!(run_kernel(&k, &m), Err(InterpError::Bind(BindError::WrongExtent { dim: 1, expected: 4, found: 5, .. }))));
    let mut m = ok.clone();
    m.insert("x".into(), HostTensor::zeros(DType::F32, vec![8]).unwrap());
    assert!(matches!(run_kernel(&k, &m), Err(InterpError::Bind(BindError::WrongRank { expected: 2, .. }))));
    let mut m = ok;
    m.insert("alpha".into(), HostTensor::zeros(DType::F32, vec![2]).unwrap());
    // Two values for a scalar: not a scalar, so a tensor where a scalar belongs.
    assert!(matches!(run_kernel(&k, &m), Err(InterpError::Bind(BindError::WrongKind { expected: "scalar", found: "tensor", .. }))));
}

#[test]
fn invalid_ir_is_rejected_before_running() {
    // A value used outside the loop that defines it.
    let mut k = Kernel::new("bad", Span::default());
    let mut b = Builder::new(&mut k);
    let lo = b.iconst(0);
    let (_, i, blk) = b.for_loop(lo, lo, false);
    let top = b.block();
    b.switch_to(blk);
    b.switch_to(top);
    bop(&mut b, BinOp::Add, i, i, I32);
    assert!(matches!(run_kernel(&k, &BTreeMap::new()), Err(InterpError::Invalid { .. })));
}
