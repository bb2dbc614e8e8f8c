//! Every operator class has an fp64 backward reference, and each one equals the central finite
//! difference of its own forward: for loss(x) = sum g . f(x), d loss / d x_e is compared with the
//! backward's gradient for every element e of every input, at small shapes of each class.

use kverify::references::linear::Act;
use kverify::references::linear_bwd::{act_deriv, act_second_bound};
use kverify::references::reduce_bwd::argmax_unique;
use kverify::references::{all_ops, op_by_id, DimKind, Dims, Op};
use kverify::tensor::Tensor;
use tilec_abi::rng::NormalRng;

/// Small legal dims: every changeable dim at min(native, 3 + its position), the causal tie and
/// the convolution windows kept legal.
fn small(op: &Op) -> Dims {
    let mut d = op.native();
    for (i, s) in op.dims.iter().enumerate() {
        let v = match s.kind {
            DimKind::Fixed => s.native.min(4),
            _ => (3 + i).min(s.native).max(s.min),
        };
        d = d.with(s.name, v);
    }
    if op.id == "sdpa_causal" {
        d = d.with("Lk", d.get("Lq"));
    }
    op.check_dims(&d).unwrap_or_else(|e| panic!("{}: {e}", op.id));
    d
}

fn normals(rng: &mut NormalRng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.normal()).collect()
}

fn loss(op: &Op, d: &Dims, xs: &[Vec<f64>], g: &[Vec<f64>]) -> f64 {
    let shapes = op.input_shapes(d);
    let ts: Vec<Tensor> = xs.iter().zip(&shapes).map(|(v, s)| Tensor::f64(s.clone(), v.clone())).collect();
    let y = op.forward(d, &ts).expect("forward");
    y.outputs.iter().zip(g).map(|(t, w)| t.to_f64_vec().iter().zip(w).map(|(a, b)| a * b).sum::<f64>()).sum()
}

/// Largest |backward - central difference| / (1 + |central difference|) over every element of
/// every input gradient of `op` at its small dims.
fn worst_gradcheck(op: &Op, seed: u64) -> (f64, String) {
    let d = small(op);
    let mut rng = NormalRng::new(seed);
    let mut xs: Vec<Vec<f64>> = op.input_shapes(&d).iter().map(|s| normals(&mut rng, s.iter().product())).collect();
    if op.id == "log" {
        // Inside its domain (the reference is NaN below 0, where no difference exists).
        xs[0].iter_mut().for_each(|v| *v = v.abs() + 0.1);
    }
    let g: Vec<Vec<f64>> = op.output_shapes(&d).iter().map(|s| normals(&mut rng, s.iter().product())).collect();
    let shapes = op.input_shapes(&d);
    let ts: Vec<Tensor> = xs.iter().zip(&shapes).map(|(v, s)| Tensor::f64(s.clone(), v.clone())).collect();
    let gs: Vec<Tensor> = g.iter().zip(op.output_shapes(&d)).map(|(v, s)| Tensor::f64(s, v.clone())).collect();
    let bw = op.backward(&d, &ts, &gs).expect("backward");
    assert_eq!(bw.outputs.len(), xs.len(), "{}: one gradient per input", op.id);
    let h = 1e-6;
    let mut worst = (0.0f64, String::new());
    for (i, x) in xs.iter().enumerate() {
        let grad = bw.outputs[i].to_f64_vec();
        assert_eq!(grad.len(), x.len());
        for e in 0..x.len() {
            let mut p = xs.clone();
            p[i][e] += h;
            let mut m = xs.clone();
            m[i][e] -= h;
            let fd = (loss(op, &d, &p, &g) - loss(op, &d, &m, &g)) / (2.0 * h);
            let rel = (grad[e] - fd).abs() / (1.0 + fd.abs());
            if rel.is_nan() || rel > worst.0 {
                worst = (rel, format!("{} [{d}] grad {} element {e}: backward {} vs central difference {fd}", op.id, op.inputs[i].name, grad[e]));
            }
        }
    }
    worst
}

#[test]
fn every_operator_class_has_a_backward_reference() {
    // All but the index classes (argmax, argmin: piecewise constant, no gradient to compare).
    let missing: Vec<&str> = all_ops().iter().filter(|o| o.backward.is_none()).map(|o| o.id).collect();
    assert_eq!(missing, ["argmax", "argmin"], "no backward: {missing:?}");
    assert!(all_ops().iter().all(|o| o.backward.is_none() == o.index_output()));
}

#[test]
fn every_backward_matches_central_finite_differences() {
    for op in all_ops().into_iter().filter(|o| o.backward.is_some()) {
        for seed in [1u64, 2] {
            let (rel, at) = worst_gradcheck(&op, seed);
            // Central differences with h = 1e-6 in f64: truncation ~h^2, cancellation ~1e-16/h.
            assert!(rel < 1e-6, "{at} (relative {rel:.3e})");
        }
    }
}

#[test]
fn max_backward_is_undefined_on_ties_and_follows_the_first_nan() {
    assert_eq!(argmax_unique(&[1.0, 3.0, 2.0]), Some(1));
    assert_eq!(argmax_unique(&[3.0, 1.0, 3.0]), None);
    assert_eq!(argmax_unique(&[1.0, f64::NAN, 5.0, f64::NAN]), Some(1));
    let op = op_by_id("max").expect("max");
    let d = Dims(vec![("R".into(), 2), ("N".into(), 3)]);
    let x = Tensor::f64(vec![2, 3], vec![2.0, 0.0, 2.0, -1.0, 4.0, 3.0]);
    let g = Tensor::f64(vec![2], vec![5.0, 7.0]);
    let dx = op.backward(&d, &[x], &[g]).expect("backward").outputs[0].to_f64_vec();
    assert!(dx[..3].iter().all(|v| v.is_nan()), "{dx:?}");
    assert_eq!(&dx[3..], &[0.0, 7.0, 0.0]);
}

#[test]
fn activation_second_derivative_bounds_hold_on_a_grid() {
    for act in [Act::Gelu, Act::Silu] {
        let mut worst = 0.0f64;
        let h = 1e-5;
        for i in -4000..=4000 {
            let z = i as f64 * 0.005;
            let second = (act_deriv(act, z + h) - act_deriv(act, z - h)) / (2.0 * h);
            worst = worst.max(second.abs());
        }
        assert!(worst <= act_second_bound(act), "{act:?}: max |act''| {worst} > {}", act_second_bound(act));
        // And not loose by more than 25 %: the bound is the maximum, rounded up.
        assert!(worst > 0.75 * act_second_bound(act), "{act:?}: {worst}");
    }
}

/// The all-zero-gradient tricks (attention, layer norm, RMS norm) fail CMP-02 now that their
/// classes have a reference backward; the margin is the one derived here: with a zero
/// candidate, err = |ref| at every element, so margin = 1 / max_i (|ref_i| / bound_i) over the
/// probes (reached at the first one, the native seed #0, or a later one).
#[test]
fn zero_gradient_tricks_fail_cmp02_with_the_derived_margin() {
    use kverify::battery::{self, Options};
    use kverify::error_model::{element_bound, BoundKind, Precision};
    use kverify::gates::inputs::{gate_seed, generate, grads, Dist};
    use kverify::gates::Status;
    use std::sync::Arc;
    use std::time::Duration;
    for (name, op) in [("zero_grad_sdpa", "sdpa"), ("zero_grad_layer_norm", "layer_norm"), ("zero_grad_rms_norm", "rms_norm")] {
        let t = kverify::redteam::tricks().into_iter().find(|t| t.name == name).expect("trick");
        assert_eq!((t.gate, t.op), ("CMP-02", op));
        let opts = Options { time_limit: Duration::from_secs(10), dims: None, gates: Some(vec!["CMP-02".into()]) };
        let g = battery::run(Arc::new((t.build)()), None, &opts).expect("battery").gates[0].clone();
        assert_eq!(g.status, Status::Fail, "{name}: {}", g.detail);
        // The native seed #0 probe alone already gives a ratio above 1; the gate reports the
        // worst over every probe, so its margin is at most this one's.
        let o = op_by_id(op).expect("op");
        let d = o.native();
        let x = generate(&o, &d, Dist::Normal, gate_seed("CMP-02", 0), Precision::F32.input);
        let gr = grads(&o, &d, gate_seed("CMP-02", 100), Precision::F32.input);
        let r = o.backward(&d, &x.reference, &gr.reference).expect("backward");
        let mut worst = 0.0f64;
        for (t, p) in r.outputs.iter().zip(&r.profiles) {
            for (i, y) in t.to_f64_vec().into_iter().enumerate() {
                worst = worst.max(y.abs() / element_bound(BoundKind::Deterministic, &Precision::F32, p.depth, p.scale[i], y));
            }
        }
        assert!(worst > 1.0, "{name}: {worst}");
        let m = g.margin.expect("margin");
        assert!(m <= 1.0 / worst * (1.0 + 1e-12), "{name}: margin {m} vs native seed#0 {}", 1.0 / worst);
        assert!(g.detail.starts_with("wrong at "), "{}", g.detail);
    }
}

/// The bf16-in / f32-accumulate / bf16-out mirror of every class passes CMP-02 at every shape
/// too (the output rounding is charged at bf16; ties of the max, frequent among bf16 inputs,
/// are left out by the reference's NaN).
#[test]
fn bf16_mirror_of_every_class_passes_cmp02() {
    use kverify::battery::{self, Options};
    use kverify::candidate::inprocess::honest;
    use kverify::error_model::Precision;
    use kverify::gates::Status;
    use std::sync::Arc;
    use std::time::Duration;
    let opts = Options { time_limit: Duration::from_secs(10), dims: None, gates: Some(vec!["CMP-02".into()]) };
    for op in all_ops() {
        let g = battery::run(Arc::new(honest(&op, Precision::BF16_F32ACC)), None, &opts).expect("battery").gates[0].clone();
        let want = if op.index_output() { Status::NotApplicable } else { Status::Pass };
        assert_eq!(g.status, want, "{}: {}", op.id, g.detail);
    }
}
