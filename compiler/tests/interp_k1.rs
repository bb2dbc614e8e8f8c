//! Interpreter: K#1 (reverse inter-chunk state scan, gdn-math.md §4 B3, GDN scalar gate) built
//! with the IR builder, on a sequence with a partial last chunk and two V tiles, checked against
//! the fp64 reference of `interp_common`.

mod interp_common;

use interp_common::*;
use tilec::diag::Span;
use tilec::interp::{run_kernel_with, Options};
use tilec::ir::builder::Builder;
use tilec::ir::{Axis, BinOp, CmpOp, Elem, Index, Kernel, MmaOperand, Op, SizeOp, Space, Type, UnOp, Value};

const C: u32 = 16;
const K: u32 = 32;
const BV: u32 = 16;

/// The builder-made twin of `k1_scan_scalar` in `dsl-examples/k1_reverse_scan.tile`, with
/// register accumulators (the sm_90a placement) so that small C and K are legal, and the
/// chunk count of dh written as `cdiv(T, C)` instead of a separate size.
fn k1_kernel() -> Kernel {
    let mut k = Kernel::new("k1_scan_scalar", Span::default());
    set_sizes(&mut k, &["B", "T", "H", "V"]);
    let (b_, t_, h_, v_) = (sym(&k, "B"), sym(&k, "T"), sym(&k, "H"), sym(&k, "V"));
    let kc = cst(K as i64);
    let pq = tensor(&mut k, "q", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), kc.clone()], false);
    let pk = tensor(&mut k, "k", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), kc.clone()], false);
    let pw = tensor(&mut k, "w", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), kc.clone()], false);
    let pg = tensor(&mut k, "g", Elem::F32, vec![b_.clone(), t_.clone(), h_.clone()], false);
    let pdo = tensor(&mut k, "dout", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), v_.clone()], false);
    let pdv = tensor(&mut k, "dv", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), v_.clone()], false);
    let pdht = tensor(&mut k, "dht", Elem::F32, vec![b_.clone(), h_.clone(), kc.clone(), v_.clone()], false);
    let nt = bin(SizeOp::Cdiv, t_.clone(), cst(C as i64));
    let pdh = tensor(&mut k, "dh", Elem::Bf16, vec![b_.clone(), nt, h_.clone(), kc.clone(), v_.clone()], true);
    let pdh0 = tensor(&mut k, "dh0", Elem::F32, vec![b_.clone(), h_.clone(), kc, v_.clone()], true);
    let pdv2 = tensor(&mut k, "dv2", Elem::Bf16, vec![b_.clone(), t_.clone(), h_.clone(), v_.clone()], true);
    let pscale = scalar(&mut k, "scale", Elem::F32);
    k.grid = [bin(SizeOp::Cdiv, v_, cst(BV as i64)), bin(SizeOp::Mul, b_, h_), cst(1)];

    let tile = |e, r, c| Type::tile(e, r, c);
    let mut b = Builder::new(&mut k);
    let sp = Span::default();
    let d = b.var("d", Space::Reg, tile(Elem::F32, K, BV), sp);
    let dvn = b.var("dvn", Space::Reg, tile(Elem::F32, C, BV), sp);
    let ks = b.var("ks", Space::Smem, tile(Elem::Bf16, C, K), sp);
    let db = b.var("db", Space::Smem, tile(Elem::Bf16, K, BV), sp);
    let qs = b.var("qs", Space::Smem, tile(Elem::Bf16, C, K), sp);
    let dos = b.var("dos", Space::Smem, tile(Elem::Bf16, C, BV), sp);
    let ws = b.var("ws", Space::Smem, tile(Elem::Bf16, C, K), sp);
    let dvb = b.var("dvb", Space::Smem, tile(Elem::Bf16, C, BV), sp);

    let pid0 = b.value(Op::ProgramId(0), I32);
    let pid1 = b.value(Op::ProgramId(1), I32);
    let cbv = b.iconst(BV as i64);
    let v0 = bop(&mut b, BinOp::Mul, pid0, cbv, I32);
    let hsz = b.value(Op::Size(size(2)), I32);
    let tsz = b.value(Op::Size(size(1)), I32);
    let bi = bop(&mut b, BinOp::Div, pid1, hsz, I32);
    let hi = bop(&mut b, BinOp::Rem, pid1, hsz, I32);
    let zero = b.iconst(0);
    let rng = |start: Value, len: u32| Index::Range { start, len };
    let pt = Index::Point;
    let d_init = b.value(Op::Load { src: pdht, index: vec![pt(bi), pt(hi), rng(zero, K), rng(v0, BV)] }, tile(Elem::F32, K, BV));
    b.effect(Op::WriteVar(d, d_init));
    let cc = b.iconst(C as i64);
    let nchunks = bop(&mut b, BinOp::Cdiv, tsz, cc, I32);
    let (_, n, body) = b.for_loop(zero, nchunks, true);
    let top = b.block();
    b.switch_to(body);
    {
        let b = &mut b;
        let t0 = bop(b, BinOp::Mul, n, cc, I32);
        // valid = row_index + t0 < T   ([C, 1])
        let rows = b.value(Op::Iota(Axis::Row), tile(Elem::I32, C, 1));
        let trow = bop(b, BinOp::Add, rows, t0, tile(Elem::I32, C, 1));
        let valid = b.value(Op::Cmp(CmpOp::Lt, trow, tsz), tile(Elem::Bool, C, 1));
        let gc = b.value(Op::Load { src: pg, index: vec![pt(bi), rng(t0, C), pt(hi)] }, tile(Elem::F32, C, 1));
        let end = bop(b, BinOp::Add, t0, cc, I32);
        let end = bop(b, BinOp::Min, end, tsz, I32);
        let one = b.iconst(1);
        let last = bop(b, BinOp::Sub, end, one, I32);
        let glast = b.value(Op::Load { src: pg, index: vec![pt(bi), pt(last), pt(hi)] }, F32);
        let dcur = b.value(Op::ReadVar(d), tile(Elem::F32, K, BV));
        b.effect(Op::Store { dst: pdh, index: vec![pt(bi), pt(n), pt(hi), rng(zero, K), rng(v0, BV)], value: dcur, mask: None });
        // ks = bf16(k ⊙ select(valid, exp2(glast − gc), 0))
        let kt = b.value(Op::Load { src: pk, index: vec![pt(bi), rng(t0, C), pt(hi), rng(zero, K)] }, tile(Elem::Bf16, C, K));
        let diff = bop(b, BinOp::Sub, glast, gc, tile(Elem::F32, C, 1));
        let decay = b.value(Op::Unary(UnOp::Exp2, diff), tile(Elem::F32, C, 1));
        let fz = b.fconst(0.0);
        let decay = b.value(Op::Select(valid, decay, fz), tile(Elem::F32, C, 1));
        let kd = bop(b, BinOp::Mul, kt, decay, tile(Elem::F32, C, K));
        let kd = b.value(Op::Cast(kd, Elem::Bf16), tile(Elem::Bf16, C, K));
        b.effect(Op::WriteVar(ks, kd));
        let dbf = b.value(Op::Cast(dcur, Elem::Bf16), tile(Elem::Bf16, K, BV));
        b.effect(Op::WriteVar(db, dbf));
        let op = |var, transposed| MmaOperand { var, transposed };
        b.effect(Op::Mma { dst: dvn, a: op(ks, false), b: op(db, false), accumulate: false, negate: false });
        // dvn += dv_local; store dv2
        let dvl = b.value(Op::Load { src: pdv, index: vec![pt(bi), rng(t0, C), pt(hi), rng(v0, BV)] }, tile(Elem::Bf16, C, BV));
        let acc = b.value(Op::ReadVar(dvn), tile(Elem::F32, C, BV));
        let sum = bop(b, BinOp::Add, acc, dvl, tile(Elem::F32, C, BV));
        b.effect(Op::WriteVar(dvn, sum));
        let dvv = b.value(Op::ReadVar(dvn), tile(Elem::F32, C, BV));
        b.effect(Op::Store { dst: pdv2, index: vec![pt(bi), rng(t0, C), pt(hi), rng(v0, BV)], value: dvv, mask: None });
        // d = d · exp2(glast)
        let eg = b.value(Op::Unary(UnOp::Exp2, glast), F32);
        let dd = bop(b, BinOp::Mul, dcur, eg, tile(Elem::F32, K, BV));
        b.effect(Op::WriteVar(d, dd));
        // d += qsᵀ · dos, qs = bf16(q ⊙ select(valid, exp2(gc)·scale, 0))
        let qt = b.value(Op::Load { src: pq, index: vec![pt(bi), rng(t0, C), pt(hi), rng(zero, K)] }, tile(Elem::Bf16, C, K));
        let egc = b.value(Op::Unary(UnOp::Exp2, gc), tile(Elem::F32, C, 1));
        let sc = b.value(Op::ScalarParam(pscale), F32);
        let egs = bop(b, BinOp::Mul, egc, sc, tile(Elem::F32, C, 1));
        let egs = b.value(Op::Select(valid, egs, fz), tile(Elem::F32, C, 1));
        let qg = bop(b, BinOp::Mul, qt, egs, tile(Elem::F32, C, K));
        let qg = b.value(Op::Cast(qg, Elem::Bf16), tile(Elem::Bf16, C, K));
        b.effect(Op::WriteVar(qs, qg));
        let dol = b.value(Op::Load { src: pdo, index: vec![pt(bi), rng(t0, C), pt(hi), rng(v0, BV)] }, tile(Elem::Bf16, C, BV));
        b.effect(Op::WriteVar(dos, dol));
        b.effect(Op::Mma { dst: d, a: op(qs, true), b: op(dos, false), accumulate: true, negate: false });
        // d −= wsᵀ · bf16(dvn)
        let wl = b.value(Op::Load { src: pw, index: vec![pt(bi), rng(t0, C), pt(hi), rng(zero, K)] }, tile(Elem::Bf16, C, K));
        b.effect(Op::WriteVar(ws, wl));
        // Writing the f32 tile into the bf16 shared-memory variable rounds it.
        b.effect(Op::WriteVar(dvb, dvv));
        b.effect(Op::Mma { dst: d, a: op(ws, true), b: op(dvb, false), accumulate: true, negate: true });
    }
    b.switch_to(top);
    let dfin = b.value(Op::ReadVar(d), tile(Elem::F32, K, BV));
    b.effect(Op::Store { dst: pdh0, index: vec![pt(bi), pt(hi), rng(zero, K), rng(v0, BV)], value: dfin, mask: None });
    k
}

#[test]
fn k1_builder_matches_fp64_reference() {
    // T = 100: six full chunks of 16 and a partial one of 4; V = 32: two V tiles; B·H = 2.
    let (bsz, t, h, v) = (1, 100, 2, 32);
    let (x, inputs) = k1_inputs(7, bsz, t, h, K as usize, v, C as usize);
    let kernel = k1_kernel();
    let run = run_kernel_with(&kernel, &inputs, &Options::default()).expect("K#1 runs");
    assert_eq!(run.grid, [2, 2, 1]);
    assert_eq!(run.sizes, vec![1, 100, 2, 32]);
    let got = |n: &str| run.outputs[n].to_f64();
    let (dh, dh0, dv2) = (got("dh"), got("dh0"), got("dv2"));
    assert_eq!(run.outputs["dh"].shape, vec![1, 7, 2, 32, 32]);

    // Against the reference with the kernel's bf16 rounding points: only fp32-vs-fp64
    // arithmetic differs, but that moves some intermediates (bf16(d), bf16(dvn)) across a bf16
    // rounding boundary, one ulp (≤ 2^-7 relative) each, and those crossings feed the next
    // chunks. Measured: ≤ 3.8e-3 of the largest magnitude; the bound 2^-7 (7.8e-3) keeps a
    // 2x margin, while any semantic slip (mask, decay index, sign, transposition) is O(1).
    let m = k1_reference(&x, C as usize, true);
    let errs = [("dh", rel_max_err(&dh, &m.dh)), ("dh0", rel_max_err(&dh0, &m.dh0)), ("dv2", rel_max_err(&dv2, &m.dv2))];
    for (name, e) in errs {
        eprintln!("{name}: max error vs mirrored fp64 = {e:.3e} of max|ref|");
        assert!(e <= 2f64.powi(-7), "{name}: {e:e}");
    }
    // Against exact fp64 math: the bf16 intermediates (k̃, d, q̃, dvn: unit roundoff 2^-8
    // each, four per chunk feeding d) accumulate over seven chunks; 2^-4 of the largest
    // magnitude still separates rounding from a wrong result.
    let e64 = k1_reference(&x, C as usize, false);
    for (name, a, r) in [("dh", &dh, &e64.dh), ("dh0", &dh0, &e64.dh0), ("dv2", &dv2, &e64.dv2)] {
        let e = rel_max_err(a, r);
        eprintln!("{name}: max error vs exact fp64 = {e:.3e} of max|ref|");
        assert!(e <= 2f64.powi(-4), "{name}: {e:e}");
    }
    // The partial chunk's rows beyond T do not exist, and dh0 really depends on the scan
    // (it is not just dht).
    assert!(rel_max_err(&dh0, &x.dht) > 0.1);
}

#[test]
fn k1_reads_its_gate_through_the_partial_chunk() {
    // With the gate of the last valid row perturbed, dh0 must change: Γ_last is read at
    // row min(t0 + C, T) − 1, not at t0 + C − 1 (which is out of bounds and would read 0).
    let (bsz, t, h, v) = (1, 40, 1, 16);
    let (_, mut inputs) = k1_inputs(11, bsz, t, h, K as usize, v, C as usize);
    let kernel = k1_kernel();
    let base = tilec::interp::run_kernel(&kernel, &inputs).unwrap()["dh0"].to_f64();
    let mut g = inputs["g"].to_f64();
    g[t - 1] -= 1.0;
    inputs.insert("g".into(), tilec_abi::tensor::HostTensor::from_f64(tilec_abi::meta::DType::F32, vec![bsz, t, h], &g).unwrap());
    let moved = tilec::interp::run_kernel(&kernel, &inputs).unwrap()["dh0"].to_f64();
    assert!(rel_max_err(&moved, &base) > 0.05);
}
