//! EXC-02 reaches subnormal *outputs* in every operator class: the probe of each class makes the
//! reference output subnormal where the general probes cannot; a softmax whose exp flushes
//! subnormals to zero fails EXC-02 there and only there, its honest twin passes with the number
//! of subnormal outputs derived here from the reference.

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::inprocess::{honest, InProcess};
use kverify::error_model::{element_bound, BoundKind, Precision};
use kverify::gates::exc02_probes::{probes, subnormal_output, NO_SUBNORMAL_OUTPUT};
use kverify::gates::inputs::gate_seed;
use kverify::gates::{GateResult, Status};
use kverify::redteam::{honest_twins, tricks};
use kverify::references::{all_ops, op_by_id, Dims, Op};
use kverify::tensor::{DType, Tensor};
use std::sync::Arc;
use std::time::Duration;

fn exc02(c: InProcess) -> GateResult {
    let opts = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["EXC-02".into()]) };
    battery::run(Arc::new(c), None, &opts).expect("battery").gates[0].clone()
}

/// Per probe label: the number of reference outputs that are subnormal in `out` and above the
/// deterministic bound (what EXC-02 checks), at the op's native dims.
fn subnormal_outputs(op: &Op, p: &Precision) -> Vec<(&'static str, usize)> {
    let d = op.native();
    probes(op, &d, p, |s| gate_seed("EXC-02", s))
        .into_iter()
        .map(|pr| {
            let r = op.forward(&d, &pr.inputs.reference).expect("reference");
            let mut n = 0;
            for (t, prof) in r.outputs.iter().zip(&r.profiles) {
                for (i, y) in t.to_f64_vec().into_iter().enumerate() {
                    let yr = p.output.round(y);
                    let b = element_bound(BoundKind::Deterministic, p, prof.depth, prof.scale[i], y);
                    if y.is_finite() && y.abs() > b && yr != 0.0 && yr.abs() < p.output.min_normal() {
                        n += 1;
                    }
                }
            }
            (pr.label, n)
        })
        .collect()
}

/// At f32 every class but log_softmax and log reaches a subnormal output; at bf16 (7 subnormal
/// binades, so 256 same-sign subnormals sum to a normal) the classes with a probe of their own do.
#[test]
fn every_class_but_log_softmax_and_log_reaches_a_subnormal_output() {
    for p in [Precision::F32, Precision::BF16_F32ACC] {
        for op in all_ops() {
            if p != Precision::F32 && subnormal_output(&op, &op.native(), 0, &p).is_none() {
                continue;
            }
            let counts = subnormal_outputs(&op, &p);
            let total: usize = counts.iter().map(|c| c.1).sum();
            if NO_SUBNORMAL_OUTPUT.contains(&op.id) {
                assert_eq!(total, 0, "{}: {counts:?}", op.id);
            } else {
                assert!(total > 0, "{} at {p:?}: no subnormal output in {counts:?}", op.id);
            }
            // Where the general probes miss, the class has its own probe, and that probe hits.
            let general: usize = counts.iter().filter(|c| c.0 != "subnormal output").map(|c| c.1).sum();
            let has_own = subnormal_output(&op, &op.native(), 0, &p).is_some();
            assert!(general > 0 || has_own || total == 0, "{}: {counts:?}", op.id);
            if has_own {
                let own = counts.iter().find(|c| c.0 == "subnormal output").map(|c| c.1);
                assert!(own.unwrap_or(0) > 0, "{} at {p:?}: class probe misses: {counts:?}", op.id);
            }
        }
    }
}

#[test]
fn softmax_of_zero_and_minus_ninety_is_subnormal() {
    let op = op_by_id("softmax").expect("softmax");
    let d = Dims(vec![("R".into(), 1), ("N".into(), 2)]);
    let y = op.forward(&d, &[Tensor::f64(vec![1, 2], vec![0.0, -90.0])]).expect("ref").outputs[0].to_f64_vec();
    assert!((y[1] - 8.19401e-40).abs() < 1e-44, "{}", y[1]);
    let y32 = DType::F32.round(y[1]);
    assert!(y32 > 0.0 && y32 < DType::F32.min_normal());
}

#[test]
fn ftz_softmax_fails_exc02_at_the_subnormal_output_probe_and_its_twin_passes() {
    let t = tricks().into_iter().find(|t| t.name == "ftz_softmax").expect("trick");
    assert_eq!(t.gate, "EXC-02");
    let g = exc02((t.build)());
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("first: subnormal output output 0 element "), "{}", g.detail);
    assert!(g.detail.contains("candidate 0e0"), "{}", g.detail);
    // Every subnormal output of the class probe is flushed: the mismatch count is that number.
    let op = op_by_id("softmax").expect("softmax");
    let counts = subnormal_outputs(&op, &Precision::F32);
    let own = counts.iter().find(|c| c.0 == "subnormal output").expect("class probe").1;
    let general: usize = counts.iter().filter(|c| c.0 != "subnormal output").map(|c| c.1).sum();
    assert_eq!(general, 0, "the general probes never make a softmax output subnormal");
    assert_eq!(own, 64 * 255, "{counts:?}");
    assert_eq!(g.measured, Some(own as f64));

    let twin = honest_twins().into_iter().find(|h| h.name == "honest-softmax").expect("twin");
    let g = exc02(twin);
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains(&format!("({own} subnormal outputs expected)")), "{}", g.detail);
}

#[test]
fn honest_mirrors_pass_exc02_with_their_class_probes() {
    for id in ["layer_norm", "rms_norm", "sdpa", "sdpa_causal", "gemm_bias_relu", "gemm_bias_gelu", "gemm_bias_silu"] {
        let op = op_by_id(id).expect("op");
        let g = exc02(honest(&op, Precision::F32));
        assert_eq!(g.status, Status::Pass, "{id}: {}", g.detail);
        let total: usize = subnormal_outputs(&op, &Precision::F32).iter().map(|c| c.1).sum();
        assert!(g.detail.contains(&format!("({total} subnormal outputs expected)")), "{id}: {}", g.detail);
    }
    // The bf16-in / f32-accumulate / bf16-out mirror of every class passes too.
    let opts = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["EXC-02".into()]) };
    for op in all_ops() {
        let r = battery::run(Arc::new(honest(&op, Precision::BF16_F32ACC)), None, &opts).expect("battery");
        assert_eq!(r.verdict, Verdict::Clean, "{}", battery::table(&r));
    }
}
