//! Interpreter: a builder-made tiled GEMM over a grid of partial tiles, checked against an
//! fp64 matmul within the bf16/fp32 rounding bound, and bit for bit against the specified
//! accumulation order of each target's MMA numerics.

mod interp_common;

use interp_common::*;
use tilec::diag::Span;
use tilec::backend::Target;
use tilec::interp::{run_kernel_with, InterpError, Options, TmemCounts};
use tilec::ir::builder::Builder;
use tilec::ir::{BinOp, Elem, Index, Kernel, MmaOperand, Op, SizeOp, Space, Type};
use tilec_abi::bind::BindError;
use tilec_abi::meta::DType;

const BM: u32 = 64;
const BN: u32 = 32;
const BK: u32 = 16;

/// `c[M, N] = a[M, K] @ b` with BM x BN tiles per CTA and a K loop of BK steps.
///
/// `b_transposed`: b is stored `[N, K]` and read as the transposed MMA operand, and the first
/// K step is peeled with `accumulate = false` (instead of zero-initialising the accumulator).
/// The TMEM lifecycle (alloc, relinquish, dealloc) brackets the body as the planner emits it.
fn gemm_kernel(out_elem: Elem, b_transposed: bool, acc_space: Space) -> Kernel {
    let mut k = Kernel::new("gemm", Span::default());
    set_sizes(&mut k, &["M", "K", "N"]);
    let (m, kk, n) = (sym(&k, "M"), sym(&k, "K"), sym(&k, "N"));
    let pa = tensor(&mut k, "a", Elem::Bf16, vec![m.clone(), kk.clone()], false);
    let b_shape = if b_transposed { vec![n.clone(), kk.clone()] } else { vec![kk, n.clone()] };
    let pb = tensor(&mut k, "b", Elem::Bf16, b_shape, false);
    let pc = tensor(&mut k, "c", out_elem, vec![m.clone(), n.clone()], true);
    k.grid = [bin(SizeOp::Cdiv, m, cst(BM as i64)), bin(SizeOp::Cdiv, n, cst(BN as i64)), cst(1)];
    let mut b = Builder::new(&mut k);
    b.effect(Op::TmemAlloc { columns: 32 });
    b.effect(Op::TmemRelinquish);
    let acc = b.var("acc", acc_space, Type::tile(Elem::F32, BM, BN), Span::default());
    let sa = b.var("sa", Space::Smem, Type::tile(Elem::Bf16, BM, BK), Span::default());
    let sb_ty = if b_transposed { Type::tile(Elem::Bf16, BN, BK) } else { Type::tile(Elem::Bf16, BK, BN) };
    let sb = b.var("sb", Space::Smem, sb_ty, Span::default());
    let pid0 = b.value(Op::ProgramId(0), I32);
    let pid1 = b.value(Op::ProgramId(1), I32);
    let (cbm, cbn, cbk) = (b.iconst(BM as i64), b.iconst(BN as i64), b.iconst(BK as i64));
    let m0 = bop(&mut b, BinOp::Mul, pid0, cbm, I32);
    let n0 = bop(&mut b, BinOp::Mul, pid1, cbn, I32);
    let ksz = b.value(Op::Size(size(1)), I32);
    let nk = bop(&mut b, BinOp::Cdiv, ksz, cbk, I32);
    // One K step: stage the operand tiles and issue the MMA.
    let step = |b: &mut Builder, kk, accumulate: bool| {
        let k0 = bop(b, BinOp::Mul, kk, cbk, I32);
        let at = b.value(
            Op::Load { src: pa, index: vec![Index::Range { start: m0, len: BM }, Index::Range { start: k0, len: BK }] },
            Type::tile(Elem::Bf16, BM, BK),
        );
        b.effect(Op::WriteVar(sa, at));
        let index = if b_transposed {
            vec![Index::Range { start: n0, len: BN }, Index::Range { start: k0, len: BK }]
        } else {
            vec![Index::Range { start: k0, len: BK }, Index::Range { start: n0, len: BN }]
        };
        let bt = b.value(Op::Load { src: pb, index }, sb_ty);
        b.effect(Op::WriteVar(sb, bt));
        b.effect(Op::Mma {
            dst: acc,
            a: MmaOperand { var: sa, transposed: false },
            b: MmaOperand { var: sb, transposed: b_transposed },
            accumulate,
            negate: false,
        });
    };
    let lo = if b_transposed {
        let zero = b.iconst(0);
        step(&mut b, zero, false);
        b.iconst(1)
    } else {
        let z = b.fconst(0.0);
        let zeros = b.value(Op::Splat(z), Type::tile(Elem::F32, BM, BN));
        b.effect(Op::WriteVar(acc, zeros));
        b.iconst(0)
    };
    let (_, kk, body) = b.for_loop(lo, nk, false);
    let top = b.block();
    b.switch_to(body);
    step(&mut b, kk, true);
    b.switch_to(top);
    let res = b.value(Op::ReadVar(acc), Type::tile(Elem::F32, BM, BN));
    b.effect(Op::Store { dst: pc, index: vec![Index::Range { start: m0, len: BM }, Index::Range { start: n0, len: BN }], value: res, mask: None });
    b.effect(Op::TmemDealloc { columns: 32 });
    k
}

struct Case {
    a: Vec<f64>,
    b: Vec<f64>,
    inputs: tilec::interp::Inputs,
}

/// Random bf16 a `[m, kd]` and b `[kd, n]` (stored `[n, kd]` when `bt`).
fn case(seed: u64, m: usize, kd: usize, n: usize, bt: bool) -> Case {
    let mut rng = Rng(seed);
    let (ta, a) = random_tensor(&mut rng, DType::Bf16, &[m, kd], 1.0);
    let b_shape = if bt { [n, kd] } else { [kd, n] };
    let (tb, b_stored) = random_tensor(&mut rng, DType::Bf16, &b_shape, 1.0);
    let b = if bt { (0..kd * n).map(|i| b_stored[(i % n) * kd + i / n]).collect() } else { b_stored };
    let mut inputs = tilec::interp::Inputs::new();
    inputs.insert("a".into(), ta);
    inputs.insert("b".into(), tb);
    Case { a, b, inputs }
}

#[test]
fn gemm_bf16_out_within_rounding_bound() {
    let (m, kd, n) = (100, 50, 70); // every dimension leaves a partial tile
    let c = case(1, m, kd, n, false);
    let k = gemm_kernel(Elem::Bf16, false, Space::Tmem);
    let run = run_kernel_with(&k, &c.inputs, &Options::default()).expect("gemm runs");
    assert_eq!(run.grid, [2, 3, 1]);
    assert_eq!(run.ctas.len(), 6);
    for s in &run.ctas {
        assert_eq!(s.tmem, TmemCounts { alloc: 1, relinquish: 1, dealloc: 1 }, "CTA {:?}", s.pid);
    }
    let out = &run.outputs["c"];
    assert_eq!((out.dtype, out.shape.as_slice()), (DType::Bf16, &[m, n][..]));
    let got = out.to_f64();
    let (exact, absprod) = matmul_f64(&c.a, &c.b, m, kd, n);
    // fp32 accumulation of kd exact products: |x − C| ≤ γ_kd·S; the bf16 store adds
    // ≤ 2^-8·|x| (unit roundoff of an 8-bit significand).
    let g = gamma_f32(kd);
    let mut worst = 0.0f64;
    for i in 0..m * n {
        let bound = 2f64.powi(-8) * (exact[i].abs() + g * absprod[i]) + g * absprod[i];
        let err = (got[i] - exact[i]).abs();
        assert!(err <= bound, "c[{}, {}] = {} vs fp64 {}: error {err:e} > bound {bound:e}", i / n, i % n, got[i], exact[i]);
        worst = worst.max(err / bound);
    }
    // The bound is not vacuous: the bf16 store alone uses a good part of it somewhere.
    assert!(worst > 0.25, "worst error/bound ratio {worst}");
}

#[test]
fn gemm_transposed_b_f32_out_matches_specified_order_bitwise() {
    let (m, kd, n) = (70, 40, 45);
    let c = case(2, m, kd, n, true);
    let (exact, absprod) = matmul_f64(&c.a, &c.b, m, kd, n);
    let steps = kd.div_ceil(BK as usize);
    // (target, accumulator space, seeded): a `tmem` accumulator is tcgen05's on sm_100a and a
    // wgmma register accumulator on sm_90a — both take the old value as the step's input; a
    // `reg` accumulator takes mma.sync on both, which sums the step from +0 and adds the old
    // accumulator in f32 afterwards.
    let cases = [(Target::Sm90a, Space::Tmem, true), (Target::Sm100a, Space::Tmem, true), (Target::Sm90a, Space::Reg, false), (Target::Sm100a, Space::Reg, false)];
    let mut outs = Vec::new();
    for (target, space, seeded) in cases {
        let k = gemm_kernel(Elem::F32, true, space);
        let opts = Options { target, ..Options::default() };
        let run = run_kernel_with(&k, &c.inputs, &opts).expect("gemm runs");
        let got = run.outputs["c"].to_f32();
        // The specified order: each MMA here is one K = 16 step, whose exact products (bf16
        // products are exact in f32; padding products are +0) are summed in f64 with the
        // step's input and rounded once to f32. The first step overwrites.
        for i in 0..m {
            for j in 0..n {
                let mut d = 0.0f32;
                for s in 0..steps {
                    let mut part = 0.0f64;
                    for p in s * BK as usize..((s + 1) * BK as usize).min(kd) {
                        part += c.a[i * kd + p] * c.b[p * n + j];
                    }
                    d = match (s, seeded) {
                        (0, _) => part as f32,
                        (_, false) => d + part as f32,
                        (_, true) => (f64::from(d) + part) as f32,
                    };
                }
                assert_eq!(got[i * n + j].to_bits(), d.to_bits(), "{target} {space:?}: c[{i}, {j}]");
                let e = (f64::from(got[i * n + j]) - exact[i * n + j]).abs();
                assert!(e <= gamma_f32(kd) * absprod[i * n + j], "{target}: c[{i}, {j}] outside the fp32 bound");
            }
        }
        outs.push(got);
    }
    // One order per accumulator kind, whatever the target; random data tells the two apart.
    assert_eq!(outs[0], outs[1]);
    assert_eq!(outs[2], outs[3]);
    assert_ne!(outs[0], outs[2]);
}

#[test]
fn gemm_rejects_inconsistent_inputs() {
    let c = case(3, 10, 20, 30, false);
    let k = gemm_kernel(Elem::F32, false, Space::Tmem);
    let mut bad = c.inputs.clone();
    // b's first extent must equal a's second (K): the two sources of K disagree.
    bad.insert("b".into(), tilec_abi::tensor::HostTensor::zeros(DType::Bf16, vec![21, 30]).unwrap());
    let e = tilec::interp::run_kernel(&k, &bad).unwrap_err();
    assert!(
        matches!(&e, InterpError::Bind(BindError::InconsistentSize { size, first_value: 20, second_value: 21, .. }) if size == "K"),
        "{e}"
    );
    let mut bad = c.inputs.clone();
    bad.insert("a".into(), tilec_abi::tensor::HostTensor::zeros(DType::F32, vec![10, 20]).unwrap());
    let e = tilec::interp::run_kernel(&k, &bad).unwrap_err();
    assert!(matches!(&e, InterpError::Bind(BindError::WrongDtype { param, expected: DType::Bf16, found: DType::F32 }) if param == "a"), "{e}");
    let mut bad = c.inputs;
    bad.remove("a");
    let e = tilec::interp::run_kernel(&k, &bad).unwrap_err();
    assert_eq!(e.to_string(), "missing input parameter `a`: expected bf16 tensor [M, K]");
}
