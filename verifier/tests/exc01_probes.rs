//! EXC-01's probes reach their cases: rows that are entirely non-finite (all -inf, all +inf, NaN
//! beside +inf), a poison-then-partial sequence that exposes a stale over-read, over-propagation
//! charged exactly as strictly as under-propagation, and every probe leaving both finite and
//! non-finite reference outputs to compare.

use kverify::battery::{self, Options};
use kverify::candidate::harness::Harness;
use kverify::candidate::inprocess::{honest, to_f32_vec, FwdFn, InProcess};
use kverify::candidate::Candidate;
use kverify::error_model::Precision;
use kverify::gates::exc01_probes::{nonfinite_rows, partial_shapes, ROWS};
use kverify::gates::inputs::{gate_seed, generate, Dist};
use kverify::gates::{Ctx, GateResult, Status};
use kverify::redteam::op_tricks::SUM_BLOCK;
use kverify::redteam::{honest_twins, tricks};
use kverify::references::{all_ops, op_by_id, RefError};
use kverify::tensor::{DType, Tensor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn exc01(c: InProcess) -> GateResult {
    let opts = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["EXC-01".into()]) };
    battery::run(Arc::new(c), None, &opts).expect("battery").gates[0].clone()
}

fn trick(name: &str) -> InProcess {
    let t = tricks().into_iter().find(|t| t.name == name).expect("trick");
    assert_eq!(t.gate, "EXC-01");
    (t.build)()
}

/// (finite, non-finite) reference outputs of `x` at `d`.
/// (rows whose reference index points at a NaN, rows) for an index class.
fn nan_answers(op: &kverify::references::Op, d: &kverify::references::Dims, x: &[Tensor]) -> (usize, usize) {
    let r = op.forward(d, x).expect("reference");
    let (rows, n) = (d.get("R"), d.get("N"));
    let v = x[0].to_f64_vec();
    let idx = r.outputs[0].to_f64_vec();
    (idx.iter().enumerate().filter(|(i, &j)| v[i * n + j as usize].is_nan()).count(), rows)
}

fn split(op: &kverify::references::Op, d: &kverify::references::Dims, x: &[Tensor]) -> (usize, usize) {
    let r = op.forward(d, x).expect("reference");
    let v: Vec<f64> = r.outputs.iter().flat_map(|t| t.to_f64_vec()).collect();
    let fin = v.iter().filter(|y| y.is_finite()).count();
    (fin, v.len() - fin)
}

#[test]
fn every_probe_leaves_finite_and_nonfinite_outputs_in_every_class() {
    for op in all_ops() {
        let d = op.native();
        if op.finite_domain() {
            // The recurrence classes: the oracle refuses every non-finite probe (n/a, rule 1);
            // EXC-01 judges them only after a poisoned call (tests/recurrence_candidate.rs).
            for s in 0..2u64 {
                let x = generate(&op, &d, Dist::NonFinite, gate_seed("EXC-01", s), DType::F32);
                assert!(matches!(op.forward(&d, &x.reference), Err(RefError::Domain { .. })), "{} seed#{s}", op.id);
            }
            let x = nonfinite_rows(&op, &d, gate_seed("EXC-01", 2), DType::F32);
            assert!(matches!(op.forward(&d, &x.reference), Err(RefError::Domain { .. })), "{} rows", op.id);
            continue;
        }
        for s in 0..2u64 {
            let x = generate(&op, &d, Dist::NonFinite, gate_seed("EXC-01", s), DType::F32);
            if op.index_output() {
                // Integer indices are never non-finite: the NaN decides the index (the first
                // NaN of its row); some rows answer a NaN position, some a finite maximum.
                let (hit, rows) = nan_answers(&op, &d, &x.reference);
                assert!(hit > 0 && hit < rows, "{} seed#{s}: {hit} of {rows} rows answer a NaN", op.id);
                continue;
            }
            let (f, n) = split(&op, &d, &x.reference);
            assert!(f > 0 && n > 0, "{} seed#{s}: {f} finite, {n} non-finite", op.id);
        }
        let x = nonfinite_rows(&op, &d, gate_seed("EXC-01", 2), DType::F32);
        if op.index_output() {
            let (hit, rows) = nan_answers(&op, &d, &x.reference);
            assert!(hit > 0 && hit < rows, "{} rows: {hit} of {rows} rows answer a NaN", op.id);
            continue;
        }
        let (f, n) = split(&op, &d, &x.reference);
        assert!(f > 0 && n > 0, "{} rows: {f} finite, {n} non-finite", op.id);
    }
}

#[test]
fn nonfinite_rows_are_all_minus_inf_all_plus_inf_and_nan_beside_plus_inf() {
    let op = op_by_id("softmax").expect("softmax");
    let d = op.native();
    let x = nonfinite_rows(&op, &d, 1, DType::F32);
    let v = x.reference[0].to_f64_vec();
    let n = d.get("N");
    assert!(v[..n].iter().all(|e| *e == f64::NEG_INFINITY));
    assert!(v[n..2 * n].iter().all(|e| *e == f64::INFINITY));
    assert!(v[2 * n].is_nan() && v[2 * n + 1..3 * n].iter().all(|e| *e == f64::INFINITY));
    assert!(v[ROWS * n..].iter().all(|e| e.is_finite()));
    assert_eq!(x.candidate[0].to_f64_vec()[..3 * n].iter().filter(|e| e.is_finite()).count(), 0);
    // The reference softmax is NaN on exactly those rows.
    let y = op.forward(&d, &x.reference).expect("ref").outputs[0].to_f64_vec();
    assert_eq!(y.iter().filter(|e| e.is_nan()).count(), ROWS * n);
}

#[test]
fn masked_row_zero_softmax_under_propagates_one_row() {
    let g = exc01(trick("masked_row_zero_softmax"));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    // The all -inf row: 256 NaNs of the reference come out 0; nothing else differs.
    let n = op_by_id("softmax").expect("op").native().get("N");
    assert_eq!(g.measured, Some(n as f64));
    assert!(g.detail.contains(&format!("{n} under-propagated, 0 over-propagated, 0 of the wrong class")), "{}", g.detail);
    assert!(g.detail.contains("first: non-finite rows output 0 element 0: reference Nan, candidate Finite"), "{}", g.detail);
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-softmax").expect("twin");
    let g = exc01(twin);
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
}

#[test]
fn stale_over_read_is_caught_only_after_a_poisoned_call() {
    let op = op_by_id("sum").expect("sum");
    // Without poison, the trick is right at a partial size (its scratch holds finite values).
    let fresh = trick("stale_over_read");
    let d = op.native();
    let x = generate(&op, &d, Dist::Normal, 1, DType::F32);
    let mut xs = x.candidate.clone();
    (fresh.fwd)(&d, &mut xs).expect("native");
    let dp = d.with("N", d.get("N") - 1);
    let y = generate(&op, &dp, Dist::Normal, 2, DType::F32);
    let mut ys = y.candidate.clone();
    let out = (fresh.fwd)(&dp, &mut ys).expect("partial").outputs[0].to_f64_vec();
    assert!(out.iter().all(|v| v.is_finite()));

    // The sequence: poison at 256, then R=65,N=257 (its tail past 256 is fresh zeros: no NaN),
    // poison, R=63,N=255 (reads the poisoned element 255 in every row), poison, R=1,N=1 (reads
    // 63 poisoned elements): 63 + 1 rows over-propagate.
    let harness = Harness::new(Arc::new(honest(&op, Precision::F32)), Duration::from_secs(5));
    let ctx = Ctx { op: &op, harness: &harness, precision: Precision::F32, dims: d.clone(), meta: None };
    let shapes: Vec<String> = partial_shapes(&ctx).iter().map(|(l, d)| format!("{l} [{d}]")).collect();
    assert_eq!(shapes, ["odd (+1) [R=65,N=257]", "odd (-1) [R=63,N=255]", "minimum [R=1,N=1]"]);
    const { assert!(255 % SUM_BLOCK != 0 && 1 % SUM_BLOCK != 0) };
    let g = exc01(trick("stale_over_read"));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(g.measured, Some(64.0), "{}", g.detail);
    assert!(g.detail.contains("0 under-propagated, 64 over-propagated"), "{}", g.detail);
    assert!(g.detail.contains("first: after poison: odd (-1) [R=63,N=255] output 0 element 0: reference Finite, candidate Nan"), "{}", g.detail);
    // Its twin skips the tail: clean over the 2 + 1 + 2 x 3 probes.
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-chunked-sum").expect("twin");
    let g = exc01(twin);
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains("0 class mismatches in ") && g.detail.contains(" elements of 9 probes"), "{}", g.detail);
}

/// The honest softmax mirror with its first answer changed by `f` (one element).
fn perturb_first(name: &str, f: fn(&mut [f32])) -> InProcess {
    let mut h = honest(&op_by_id("softmax").expect("op"), Precision::F32);
    h.name = name.into();
    let inner = h.fwd.clone();
    let done = Arc::new(AtomicBool::new(false));
    let fwd: FwdFn = Arc::new(move |d, x| {
        let mut out = inner(d, x)?;
        if !done.swap(true, Ordering::SeqCst) {
            let mut v = to_f32_vec(&out.outputs[0]);
            f(&mut v);
            out.outputs[0] = Tensor::f32(out.outputs[0].shape.clone(), v);
        }
        Ok(out)
    });
    h.fwd = fwd;
    h
}

#[test]
fn over_propagation_is_charged_as_strictly_as_under_propagation() {
    let over = perturb_first("one-extra-nan", |v| {
        let i = v.iter().position(|e| e.is_finite()).expect("a finite output");
        v[i] = f32::NAN;
    });
    let under = perturb_first("one-swallowed-nan", |v| {
        let i = v.iter().position(|e| e.is_nan()).expect("a NaN output");
        v[i] = 0.0;
    });
    assert!(over.has_backward());
    let (go, gu) = (exc01(over), exc01(under));
    for (g, what) in [(&go, "0 under-propagated, 1 over-propagated"), (&gu, "1 under-propagated, 0 over-propagated")] {
        assert_eq!(g.status, Status::Fail, "{}", g.detail);
        assert_eq!(g.measured, Some(1.0));
        assert!(g.detail.contains(what), "{}", g.detail);
    }
}
