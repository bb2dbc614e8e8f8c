//! Back-end tests on builder-made kernels: a tiled GEMM with a K loop and a small elementwise
//! kernel, compiled for both targets; PTX checked for the instructions the strategy needs, and
//! assembled with ptxas when it is installed (`TILEC_PTXAS` or PATH).

use tilec::backend::{compile_kernel, tmem_layout, Target, TmemLayout};
use tilec::diag::Span;
use tilec::ir::builder::Builder;
use tilec::ir::{validate, Axis, BinOp, Edge, Elem, Index, Kernel, MmaOperand, Op, ParamData, ParamKind, SizeExpr, SizeOp, Space, Type, UnOp};

/// A tensor parameter whose shape names symbolic sizes (declared in order of first use).
fn tensor(k: &mut Kernel, name: &str, elem: Elem, shape: &[&str], output: bool) -> tilec::ir::Param {
    let shape = shape.iter().map(|s| SizeExpr::Sym(k.declare_size(s))).collect();
    k.params.push(ParamData { name: name.into(), kind: ParamKind::Tensor { elem, shape, output }, span: Span::default(), edge: Edge::Zeros })
}

/// The symbolic size named `s` of `k`.
fn sym(k: &Kernel, s: &str) -> SizeExpr {
    SizeExpr::Sym(k.size_named(s).unwrap_or_else(|| panic!("no size {s}")))
}

/// c[M, N] = a[M, K] @ b[K, N], tiles 128 x 64 x 64, accumulator in `acc_space`.
pub fn gemm(acc_space: Space) -> Kernel {
    let mut k = Kernel::new("gemm_b", Span::default());
    let a = tensor(&mut k, "a", Elem::Bf16, &["M", "K"], false);
    let b = tensor(&mut k, "b", Elem::Bf16, &["K", "N"], false);
    let c = tensor(&mut k, "c", Elem::F32, &["M", "N"], true);
    let cdiv = |s: &str, n| SizeExpr::Bin(SizeOp::Cdiv, Box::new(sym(&k, s)), Box::new(SizeExpr::Const(n)));
    k.grid = [cdiv("M", 128), cdiv("N", 64), SizeExpr::Const(1)];
    k.threads = 128;
    let mut bld = Builder::new(&mut k);
    let sp = Span::default();
    let acc = bld.var("acc", acc_space, Type::tile(Elem::F32, 128, 64), sp);
    let at = bld.var("at", Space::Smem, Type::tile(Elem::Bf16, 128, 64), sp);
    let bt = bld.var("bt", Space::Smem, Type::tile(Elem::Bf16, 64, 64), sp);
    let pm = bld.value(Op::ProgramId(0), Type::Scalar(Elem::I32));
    let pn = bld.value(Op::ProgramId(1), Type::Scalar(Elem::I32));
    let c128 = bld.iconst(128);
    let c64 = bld.iconst(64);
    let m0 = bld.value(Op::Binary(BinOp::Mul, pm, c128), Type::Scalar(Elem::I32));
    let n0 = bld.value(Op::Binary(BinOp::Mul, pn, c64), Type::Scalar(Elem::I32));
    let zero = bld.fconst(0.0);
    let z = bld.value(Op::Splat(zero), Type::tile(Elem::F32, 128, 64));
    bld.effect(Op::WriteVar(acc, z));
    let kk = bld.value(Op::Size(tilec::ir::SizeVar::from_u32(1)), Type::Scalar(Elem::I32));
    let steps = bld.value(Op::Binary(BinOp::Cdiv, kk, c64), Type::Scalar(Elem::I32));
    let lo = bld.iconst(0);
    let (_, iv, body) = bld.for_loop(lo, steps, false);
    let top = bld.block();
    bld.switch_to(body);
    let k0 = bld.value(Op::Binary(BinOp::Mul, iv, c64), Type::Scalar(Elem::I32));
    let ta = bld.value(Op::Load { src: a, index: vec![Index::Range { start: m0, len: 128 }, Index::Range { start: k0, len: 64 }] }, Type::tile(Elem::Bf16, 128, 64));
    bld.effect(Op::WriteVar(at, ta));
    let tb = bld.value(Op::Load { src: b, index: vec![Index::Range { start: k0, len: 64 }, Index::Range { start: n0, len: 64 }] }, Type::tile(Elem::Bf16, 64, 64));
    bld.effect(Op::WriteVar(bt, tb));
    bld.effect(Op::Mma { dst: acc, a: MmaOperand { var: at, transposed: false }, b: MmaOperand { var: bt, transposed: false }, accumulate: true, negate: false });
    bld.switch_to(top);
    let r = bld.value(Op::ReadVar(acc), Type::tile(Elem::F32, 128, 64));
    bld.effect(Op::Store { dst: c, index: vec![Index::Range { start: m0, len: 128 }, Index::Range { start: n0, len: 64 }], value: r, mask: None });
    k
}

/// y[N] = bf16(exp2(x) * s + row) with a row-sum side output: exercises elementwise ops,
/// broadcasting, casts, a reduction and masked edges.
pub fn elementwise() -> Kernel {
    let mut k = Kernel::new("ew_b", Span::default());
    let x = tensor(&mut k, "x", Elem::F32, &["R", "C"], false);
    let y = tensor(&mut k, "y", Elem::Bf16, &["R", "C"], true);
    let rs = tensor(&mut k, "rs", Elem::F32, &["R"], true);
    let s = k.params.push(ParamData { name: "s".into(), kind: ParamKind::Scalar(Elem::F32), span: Span::default(), edge: Edge::Error });
    k.grid = [SizeExpr::Bin(SizeOp::Cdiv, Box::new(sym(&k, "R")), Box::new(SizeExpr::Const(32))), SizeExpr::Const(1), SizeExpr::Const(1)];
    k.threads = 128;
    let mut b = Builder::new(&mut k);
    let t = Type::tile(Elem::F32, 32, 16);
    let p = b.value(Op::ProgramId(0), Type::Scalar(Elem::I32));
    let c32 = b.iconst(32);
    let r0 = b.value(Op::Binary(BinOp::Mul, p, c32), Type::Scalar(Elem::I32));
    let c0 = b.iconst(0);
    let xt = b.value(Op::Load { src: x, index: vec![Index::Range { start: r0, len: 32 }, Index::Range { start: c0, len: 16 }] }, t);
    let e = b.value(Op::Unary(UnOp::Exp2, xt), t);
    let sv = b.value(Op::ScalarParam(s), Type::Scalar(Elem::F32));
    let es = b.value(Op::Binary(BinOp::Mul, e, sv), t);
    let row = b.value(Op::Iota(Axis::Row), Type::tile(Elem::I32, 32, 1));
    let rowf = b.value(Op::Cast(row, Elem::F32), Type::tile(Elem::F32, 32, 1));
    let sum = b.value(Op::Binary(BinOp::Add, es, rowf), t);
    let yb = b.value(Op::Cast(sum, Elem::Bf16), Type::tile(Elem::Bf16, 32, 16));
    b.effect(Op::Store { dst: y, index: vec![Index::Range { start: r0, len: 32 }, Index::Range { start: c0, len: 16 }], value: yb, mask: None });
    let red = b.value(Op::Reduce(tilec::ir::ReduceOp::Sum, Axis::Row, xt), Type::tile(Elem::F32, 32, 1));
    b.effect(Op::Store { dst: rs, index: vec![Index::Range { start: r0, len: 32 }], value: red, mask: None });
    k
}

fn ptxas() -> Option<std::path::PathBuf> {
    tilec::artifact::find_ptxas()
}

/// Validates a builder-made kernel and compiles it for `t` with the per-target plans the
/// pipeline driver would compute.
fn compile(k: &Kernel, layout: &TmemLayout, t: Target) -> tilec::backend::Compiled {
    let v = validate::validate(k).unwrap_or_else(|e| panic!("{e:?}"));
    let plan = tilec::passes::target_plan::run(&v, t).unwrap_or_else(|d| panic!("{}", d.message));
    compile_kernel(&v, layout, &plan).unwrap()
}

fn assemble(ptx: &str, target: Target) {
    let Some(_) = ptxas() else {
        eprintln!("ptxas not found (run scripts/setup.sh): skipping assembly");
        return;
    };
    let info = tilec::artifact::run_ptxas(ptx, target).unwrap_or_else(|e| panic!("ptxas rejected the PTX: {e}\n{ptx}"));
    assert!(info.1.registers > 0);
}

#[test]
fn gemm_sm90a_uses_wgmma_for_a_tmem_accumulator_and_mma_sync_otherwise() {
    // A 128 x 64 f32 accumulator in `tmem`: register-resident on sm_90a, two units of
    // m64n64k16 per K step, no mma.sync.
    let k = gemm(Space::Tmem);
    validate::validate(&k).unwrap();
    let out = compile(&k, &TmemLayout::prefix_sums(&k).unwrap(), Target::Sm90a);
    assert!(out.ptx.contains(".target sm_90a"), "{}", out.ptx);
    assert!(out.ptx.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), "{}", out.ptx);
    assert!(out.ptx.contains("wgmma.wait_group.sync.aligned"));
    assert!(out.ptx.contains("wgmma.fence.sync.aligned") && out.ptx.contains("wgmma.commit_group.sync.aligned"));
    assert!(!out.ptx.contains("mma.sync.aligned.m16n8k16"));
    assert!(out.ptx.contains(".entry gemm_b"));
    assert!(!out.ptx.contains("tcgen05"));
    // The same product into a `reg` accumulator (held in shared memory) stays on mma.sync.
    let ks = gemm(Space::Reg);
    let outs = compile(&ks, &TmemLayout::prefix_sums(&ks).unwrap(), Target::Sm90a);
    assert!(outs.ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    assert!(!outs.ptx.contains("wgmma"));
    assemble(&outs.ptx, Target::Sm90a);
    // acc (32 KiB f32) + at (16 KiB) + bt (8 KiB) at least.
    assert!(out.smem_bytes >= 56 * 1024, "{}", out.smem_bytes);
    assemble(&out.ptx, Target::Sm90a);
}

#[test]
fn gemm_sm100a_uses_tcgen05() {
    let mut k = gemm(Space::Tmem);
    let layout = tmem_layout::insert_lifecycle(&mut k).unwrap();
    validate::validate(&k).unwrap();
    assert_eq!(layout.alloc_columns, 64);
    let out = compile(&k, &layout, Target::Sm100a);
    for needle in ["tcgen05.alloc.cta_group::1", "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit", "tcgen05.ld.sync.aligned.32x32b", "tcgen05.dealloc", "tcgen05.relinquish_alloc_permit", "mbarrier.try_wait.parity"] {
        assert!(out.ptx.contains(needle), "missing {needle}");
    }
    assert_eq!(out.ptx.matches("tcgen05.alloc.").count(), 1);
    assert_eq!(out.ptx.matches("tcgen05.dealloc.").count(), 1);
    assemble(&out.ptx, Target::Sm100a);
}

#[test]
fn tcgen05_is_refused_off_target() {
    // Register accumulators never need tcgen05; the gate itself is checked directly.
    let e = tilec::backend::sm100::require_tcgen05(Target::Sm90a, "tcgen05.mma").unwrap_err();
    assert!(e.to_string().contains("only sm_100a"), "{e}");
}

#[test]
fn elementwise_both_targets() {
    let k = elementwise();
    validate::validate(&k).unwrap();
    for t in Target::ALL {
        let out = compile(&k, &TmemLayout::default(), t);
        assert!(out.ptx.contains("cvt.rn.bf16.f32"), "{}", out.ptx);
        // The accurate exp2 works in f64; no ex2.approx.
        assert!(!out.ptx.contains("ex2.approx"));
        assert!(out.ptx.contains("bar.sync"));
        assemble(&out.ptx, t);
    }
}

#[test]
fn back_end_errors_name_the_instruction_and_its_span() {
    // An f16 accumulator passes the validator (it is a target rule, not an IR rule) but neither
    // lowering takes it: the error must point at the MMA, not at the kernel.
    let mut k = gemm(Space::Reg);
    let acc = k.vars.keys().next().expect("acc");
    k.vars[acc].ty = Type::tile(Elem::F16, 128, 64);
    let reads: Vec<_> = k.insts.values().filter(|d| matches!(d.op, Op::ReadVar(v) if v == acc)).filter_map(|d| d.result).collect();
    for r in reads {
        k.values[r].ty = Type::tile(Elem::F16, 128, 64);
    }
    let zeros: Vec<_> = k.insts.values().filter(|d| matches!(d.op, Op::Splat(_))).filter_map(|d| d.result).collect();
    for z in zeros {
        k.values[z].ty = Type::tile(Elem::F16, 128, 64);
    }
    let mma = k.insts.iter().find(|(_, d)| matches!(d.op, Op::Mma { .. })).map(|(i, _)| i).expect("an MMA");
    let span = Span::new(40, 52);
    k.inst_spans[mma] = span;
    let v = validate::validate(&k).expect("an f16 accumulator is valid IR");
    let plan = tilec::passes::target_plan::run(&v, Target::Sm90a).expect("plans");
    let e = compile_kernel(&v, &TmemLayout::default(), &plan).expect_err("f16 accumulators are not lowered");
    assert_eq!(e.span(), Some(span), "{e}");
    assert!(e.to_string().contains(&format!("lowering {mma}")) && e.to_string().contains("need f32"), "{e}");
}
