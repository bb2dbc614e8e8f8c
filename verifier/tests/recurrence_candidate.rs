//! The recurrence classes (gdn, kda, gla, ssd, la) as candidate operators: an honest float32
//! token-serial NumPy recurrence (tests/fixtures/recurrence/recurrence.py) passes every
//! applicable gate of every member, forward and backward, and four tricks on gdn are each caught
//! by the gate meant for them, their failures derived from the oracle. Needs python3 with NumPy
//! (skips with a message otherwise); the registration and input-rule tests do not.

#[allow(dead_code)] // `ext` serves the red-team manifests, not these fixtures
mod common;

use common::{python_ready, root};
use kverify::battery::{self, Options, Verdict};
use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::Candidate;
use kverify::error_model::{element_bound, BoundKind, Precision};
use kverify::gates::inputs::{generate, Dist};
use kverify::gates::{GateResult, Status};
use kverify::references::recurrence::{layout, model_of, RECURRENCE_CLASSES};
use kverify::references::{op_by_id, Dims, Op, RefError, RefOutput};
use kverify::tensor::{DType, Tensor};
use std::sync::Arc;
use std::time::Duration;

fn cand(name: &str) -> Arc<dyn Candidate> {
    let m = Manifest::load(&root().join(format!("tests/fixtures/recurrence/{name}.json"))).expect("manifest");
    Arc::new(ExternalCandidate::new(m, Duration::from_secs(30), 2048))
}

fn opts(gates: Option<&[&str]>) -> Options {
    Options { time_limit: Duration::from_secs(30), dims: None, gates: gates.map(|g| g.iter().map(|s| s.to_string()).collect()) }
}

fn gate<'a>(r: &'a [GateResult], id: &str) -> &'a GateResult {
    r.iter().find(|g| g.id == id).expect("gate ran")
}

/// Largest element of |candidate − reference| / deterministic bound over every output.
fn worst_ratio(r: &RefOutput, outs: &[Tensor]) -> f64 {
    let p = Precision::F32;
    let mut worst = 0.0f64;
    for ((rt, prof), ct) in r.outputs.iter().zip(&r.profiles).zip(outs) {
        for ((y, s), c) in rt.to_f64_vec().iter().zip(&prof.scale).zip(ct.to_f64_vec()) {
            worst = worst.max((c - y).abs() / element_bound(BoundKind::Deterministic, &p, prof.depth, *s, *y));
        }
    }
    worst
}

#[test]
fn every_member_is_registered_with_its_layout_and_refuses_non_finite_inputs() {
    for id in RECURRENCE_CLASSES {
        let op = op_by_id(id).expect("registered");
        let model = model_of(id).expect("member");
        let names: Vec<&str> = op.inputs.iter().map(|i| i.name).collect();
        let (g, beta, n) = layout(model);
        assert_eq!(names.len(), n, "{id}");
        assert_eq!((g.map(|i| names[i]), beta.map(|i| names[i])), (g.map(|_| "g"), beta.map(|_| "beta")), "{id}");
        assert!(op.finite_domain() && op.backward.is_some(), "{id}");
        let d = op.native();
        let mut x = generate(&op, &d, Dist::Normal, 1, DType::F64).reference;
        let mut v = x[2].to_f64_vec();
        v[5] = f64::NAN;
        x[2] = Tensor::f64(x[2].shape.clone(), v);
        match op.forward(&d, &x) {
            Err(RefError::Domain { msg, .. }) => assert!(msg.starts_with("`v` element 5 is NaN"), "{id}: {msg}"),
            other => panic!("{id}: {other:?}"),
        }
    }
}

#[test]
fn generated_inputs_have_the_recurrence_structure_for_every_distribution() {
    let op = op_by_id("kda").expect("kda");
    let d = op.native();
    for dist in [Dist::Normal, Dist::WideRange, Dist::Positive, Dist::Subnormal, Dist::Tiny] {
        let x = generate(&op, &d, dist, 3, DType::F32).reference;
        let k = d.get("K");
        for row in x[1].to_f64_vec().chunks(k) {
            let n2: f64 = row.iter().map(|e| e * e).sum();
            assert!((n2 - 1.0).abs() < 1e-5, "{dist:?}: |k|² = {n2}");
        }
        assert!(x[3].to_f64_vec().iter().all(|g| *g <= 0.0), "{dist:?}: g > 0");
        // sigmoid of the wide-range draws (±2^20) reaches 0 exactly: no write, still legal.
        assert!(x[4].to_f64_vec().iter().all(|b| (0.0..=1.0).contains(b)), "{dist:?}: beta outside [0, 1]");
    }
}

#[test]
fn honest_numpy_members_pass_every_applicable_gate() {
    if !python_ready() {
        return;
    }
    for id in RECURRENCE_CLASSES {
        let r = battery::run(cand(&format!("honest-{id}")), None, &opts(None)).expect("battery");
        eprintln!("{}", battery::table(&r));
        for g in &r.gates {
            assert!(matches!(g.status, Status::Pass | Status::NotApplicable), "{id} {} {:?}: {}", g.id, g.status, g.detail);
        }
        let na: Vec<&str> = r.gates.iter().filter(|g| g.status == Status::NotApplicable).map(|g| g.id).collect();
        assert_eq!(na, ["PRC-02", "RES-02"], "{id}");
        assert_eq!(r.verdict, Verdict::Clean, "{id}");
        // EXC-01: only the poison-then-partial sequence is judged; the injected and row probes
        // (3) are n/a because the oracle refuses non-finite inputs.
        assert!(gate(&r.gates, "EXC-01").detail.contains("; 3 probes n/a (reference"), "{id}: {}", gate(&r.gates, "EXC-01").detail);
        assert!(gate(&r.gates, "ORD-02").detail.contains("backward"), "{id}");
    }
}

/// The trick's answer at `d`, with the inputs of `seed`.
fn call(c: &Arc<dyn Candidate>, op: &Op, d: &Dims, seed: u64) -> (Vec<Tensor>, Vec<Tensor>) {
    let x = generate(op, d, Dist::Normal, seed, DType::F32);
    let mut inputs = x.candidate.clone();
    let outs = c.forward(d, &mut inputs).expect("forward").outputs;
    (x.reference, outs)
}

#[test]
fn s0_undecayed_fails_cmp01_and_is_the_oracle_at_s0_over_the_first_decay() {
    if !python_ready() {
        return;
    }
    let op = op_by_id("gdn").expect("gdn");
    let c = cand("s0_undecayed");
    let r = battery::run(c.clone(), None, &opts(Some(&["CMP-01"]))).expect("battery");
    assert_eq!(r.gates[0].status, Status::Fail, "{}", r.gates[0].detail);
    // Skipping the first decay of S_0 is the recurrence started from S_0 / e^{g_0} (scalar g):
    // the trick's answer is within the f32 bound of the oracle there, and far from it at S_0.
    let d = op.native();
    let (x, outs) = call(&c, &op, &d, 11);
    let (b, h, k, v) = (d.get("B"), d.get("H"), d.get("K"), d.get("V"));
    assert_eq!(b, 1);
    let g = x[3].to_f64_vec();
    let mut s0 = x[5].to_f64_vec();
    for hh in 0..h {
        s0[hh * k * v..(hh + 1) * k * v].iter_mut().for_each(|e| *e /= g[hh].exp());
    }
    let mut shifted = x.clone();
    shifted[5] = Tensor::f64(x[5].shape.clone(), s0);
    assert!(worst_ratio(&op.forward(&d, &shifted).expect("oracle"), &outs) <= 1.0);
    assert!(worst_ratio(&op.forward(&d, &x).expect("oracle"), &outs) > 100.0);
}

#[test]
fn stale_chunk_tail_passes_cmp01_fails_cmp03_and_decays_s_t_once_per_padded_slot() {
    if !python_ready() {
        return;
    }
    let op = op_by_id("gdn").expect("gdn");
    let c = cand("stale_chunk_tail");
    let r = battery::run(c.clone(), None, &opts(Some(&["CMP-01", "CMP-03"]))).expect("battery");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert_eq!(r.gates[1].status, Status::Fail, "{}", r.gates[1].detail);
    // At T = 127 (one padded slot) S_T is the oracle's times e^{g_126}, per head; o is right.
    let d = op.native().with("T", 127);
    let (x, outs) = call(&c, &op, &d, 12);
    let reference = op.forward(&d, &x).expect("oracle");
    let (h, k, v) = (d.get("H"), d.get("K"), d.get("V"));
    let g = x[3].to_f64_vec();
    let mut st = reference.outputs[1].to_f64_vec();
    for hh in 0..h {
        let a = g[126 * h + hh].exp();
        st[hh * k * v..(hh + 1) * k * v].iter_mut().for_each(|e| *e *= a);
    }
    let mut expected = reference.clone();
    expected.outputs[1] = Tensor::f64(reference.outputs[1].shape.clone(), st);
    assert!(worst_ratio(&expected, &outs) <= 1.0);
    assert!(worst_ratio(&reference, &outs) > 100.0);
    let (_, at_128) = call(&c, &op, &op.native(), 12);
    let x128 = generate(&op, &op.native(), Dist::Normal, 12, DType::F32).reference;
    assert!(worst_ratio(&op.forward(&op.native(), &x128).expect("oracle"), &at_128) <= 1.0);
}

#[test]
fn bf16_out_fails_cmp01_by_a_bf16_rounding_of_o() {
    if !python_ready() {
        return;
    }
    let c = cand("bf16_out");
    let r = battery::run(c, None, &opts(Some(&["CMP-01"]))).expect("battery");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("at output 0 "), "the worst element is in o: {}", g.detail);
    // The error is one round-to-nearest in bf16 (8-bit significand: at most u = 2^-8 relative)
    // plus the f32 noise the bound allows, and more than the bound.
    let reference: f64 = g.detail.split("(ref ").nth(1).and_then(|s| s.split(')').next()).and_then(|s| s.parse().ok()).expect("ref in detail");
    let (m, b) = (g.measured.expect("measured"), g.bound.expect("bound"));
    assert!(m > b && m <= 2f64.powi(-8) * reference.abs() * (1.0 + 1e-6) + b, "{m} {b} {reference}");
}

#[test]
fn nondeterministic_bwd_fails_ord02_on_grad_q_only() {
    if !python_ready() {
        return;
    }
    let r = battery::run(cand("nondeterministic_bwd"), None, &opts(Some(&["ORD-02", "CMP-02"]))).expect("battery");
    let (ord, cmp) = (&r.gates[1], &r.gates[0]);
    assert_eq!((ord.id, cmp.id), ("ORD-02", "CMP-02"));
    assert_eq!(ord.status, Status::Fail, "{}", ord.detail);
    assert!(ord.detail.contains("grad q:") && !ord.detail.contains("grad k:") && !ord.detail.contains("output"), "{}", ord.detail);
    assert_eq!(cmp.status, Status::Pass, "every order is a right answer: {}", cmp.detail);
}

#[test]
fn stale_tail_slots_is_right_until_a_poisoned_call_then_fails_exc01() {
    if !python_ready() {
        return;
    }
    let r = battery::run(cand("stale_tail_slots"), None, &opts(Some(&["CMP-01", "CMP-03", "EXC-01"]))).expect("battery");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert_eq!(r.gates[1].status, Status::Pass, "{}", r.gates[1].detail);
    let g = &r.gates[2];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    // The poisoned calls at the base shape [B=1,T=128,H=2] fill slots 0..128 of heads 0 and 1
    // with NaN. Of the partial shapes after them, odd (-1) [B=1,T=127,H=1] masks slot 127 and the
    // minimum [B=1,T=1,H=1] slots 1..64 of head 0, both poisoned: all K·V elements of S_T NaN;
    // odd (+1) [B=3,T=129,H=3] masks slots 129..192, never poisoned. o is never touched.
    let d = op_by_id("gdn").expect("gdn").native();
    let kv = d.get("K") * d.get("V");
    assert_eq!(g.measured, Some((2 * kv) as f64), "{}", g.detail);
    assert!(g.detail.contains(&format!("0 under-propagated, {} over-propagated", 2 * kv)), "{}", g.detail);
}

#[test]
fn the_state_budget_bounds_t_k_v_and_names_the_need() {
    let op = op_by_id("gdn").expect("gdn");
    // K = V = 256 keeps the whole envelope (T = 1024): 1025·65536 = 67,174,400 ≤ 2^27.
    let d = op.native().with("K", 256).with("V", 256).with("T", 1024);
    assert!(op.check_dims(&d).is_ok());
    // Past the envelope (CMP-03's widened range), T = 2048 needs 2049·65536 = 134,283,264 >
    // 2^27 = 134,217,728: the probe is skipped with this reason.
    let past = kverify::gates::cmp03_probes::widened(&op, "T", 65537);
    assert!(past.check_dims(&d.with("T", 2047)).is_ok());
    let e = past.check_dims(&d.with("T", 2048)).expect_err("over budget");
    assert!(e.to_string().contains("= 134283264 state values per head"), "{e}");
}

#[test]
fn a_short_tensor_is_an_error_naming_it_never_a_panic() {
    let d = op_by_id("gdn").expect("gdn").native();
    let model = model_of("gdn").expect("gdn");
    let x = generate(&op_by_id("gdn").expect("gdn"), &d, Dist::Normal, 1, DType::F64).reference;
    let vals: Vec<Vec<f64>> = x.iter().map(|t| t.to_f64_vec()).collect();
    let mut xs: Vec<&[f64]> = vals.iter().map(|v| v.as_slice()).collect();
    xs[2] = &vals[2][1..];
    let e = kverify::references::recurrence::oracle(model, &d, &xs, None).expect_err("short v");
    assert_eq!(e, format!("`v` has 4095 values, its shape [1, 128, 2, 16] needs 4096"));
    let e = kverify::references::recurrence::oracle(model, &d, &xs[..3], None).expect_err("3 inputs");
    assert_eq!(e, "gdn takes 6 inputs, got 3");
}
