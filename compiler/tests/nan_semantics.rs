//! `min`, `max`, `row_max`/`col_max`/`row_min`/`col_min` propagate NaN (IEEE 754-2019
//! `minimum`/`maximum`, as PyTorch's `torch.maximum`/`torch.amax`), and `fmin`/`fmax` ignore it
//! (IEEE 754-2008 `minNum`/`maxNum`): in the interpreter, and in the PTX of both targets
//! (`max.NaN.f32` / `min.NaN.f32` vs `max.f32` / `min.f32`). The clamp written as
//! `min(max(x, lo), hi)` keeps a NaN a NaN (tile-ai/tilelang#3024, triton-lang/triton#1566).

use std::collections::BTreeMap;

use tilec::backend::Target;
use tilec::build::{build_source, BuildOptions};
use tilec::frontend::{check_source, Options};
use tilec::interp::{run_kernel_with, Options as InterpOptions};
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const SRC: &str = "
kernel nan_rules(x: f32[4, 8], y: f32[4, 8],
                 mx: out f32[4, 8], mn: out f32[4, 8], fx: out f32[4, 8], fn_: out f32[4, 8],
                 clamp: out f32[4, 8], rmax: out f32[4], rmin: out f32[4], cmax: out f32[1, 8])
    grid(1) threads(32)
{
    let a = load x[:, :];
    let b = load y[:, :];
    store mx[:, :] = max(a, b);
    store mn[:, :] = min(a, b);
    store fx[:, :] = fmax(a, b);
    store fn_[:, :] = fmin(a, b);
    store clamp[:, :] = min(max(a, -1.0), 1.0);
    store rmax[:] = row_max(a);
    store rmin[:] = row_min(a);
    store cmax[:, :] = col_max(a);
}
";

/// x: row 0 holds a NaN at column 3; row 1 is −0 / +0 pairs against y; rows 2-3 plain.
fn inputs() -> (Vec<f32>, Vec<f32>) {
    let mut x = vec![0.0f32; 32];
    let mut y = vec![0.0f32; 32];
    for i in 0..32 {
        x[i] = (i as f32 - 16.0) / 4.0;
        y[i] = (16.0 - i as f32) / 8.0;
    }
    x[3] = f32::NAN;
    y[8 + 1] = f32::NAN; // y's NaN meets a number in row 1
    x[8 + 4] = -0.0;
    y[8 + 4] = 0.0;
    x[8 + 5] = 0.0;
    y[8 + 5] = -0.0;
    (x, y)
}

#[test]
fn the_interpreter_propagates_nan_through_min_max_and_reductions() {
    let checked = check_source(SRC, &Options::default());
    assert!(checked.ok(), "{}", checked.diags.render("nan.tile", SRC, false));
    let k = &checked.module.kernels[0];
    let (x, y) = inputs();
    let t = |v: &[f32]| HostTensor::from_f32(DType::F32, vec![4, 8], v).expect("tensor");
    let ins = BTreeMap::from([("x".to_string(), t(&x)), ("y".to_string(), t(&y))]);
    let run = run_kernel_with(k, &ins, &InterpOptions::default()).expect("runs");
    let out = |n: &str| run.outputs[n].to_f32();
    let (mx, mn, fx, fnn, clamp) = (out("mx"), out("mn"), out("fx"), out("fn_"), out("clamp"));
    for i in 0..32 {
        let (a, b) = (x[i], y[i]);
        if a.is_nan() || b.is_nan() {
            assert!(mx[i].is_nan() && mn[i].is_nan(), "element {i}: max/min of a NaN must be NaN");
            let other = if a.is_nan() { b } else { a };
            assert_eq!((fx[i], fnn[i]), (other, other), "element {i}: fmax/fmin ignore the NaN");
        } else if a == 0.0 && b == 0.0 {
            // −0 < +0 for maximum/minimum: max is +0 unless both are −0, min is −0 unless both +0.
            let (pos, neg) = (a.is_sign_positive() || b.is_sign_positive(), a.is_sign_negative() || b.is_sign_negative());
            assert!(mx[i] == 0.0 && mx[i].is_sign_positive() == pos, "element {i}: max({a:?}, {b:?}) = {:?}", mx[i]);
            assert!(mn[i] == 0.0 && mn[i].is_sign_negative() == neg, "element {i}: min({a:?}, {b:?}) = {:?}", mn[i]);
        } else {
            assert_eq!((mx[i], mn[i]), (a.max(b), a.min(b)), "element {i}");
        }
        let want = if a.is_nan() { f32::NAN } else { a.clamp(-1.0, 1.0) };
        assert!(clamp[i] == want || (clamp[i].is_nan() && want.is_nan()), "clamp of {a}: {} (want {want})", clamp[i]);
    }
    let (rmax, rmin, cmax) = (out("rmax"), out("rmin"), out("cmax"));
    assert!(rmax[0].is_nan() && rmin[0].is_nan(), "row 0 holds a NaN");
    for r in 1..4 {
        let row = &x[r * 8..r * 8 + 8];
        assert_eq!(rmax[r], row.iter().copied().fold(f32::NEG_INFINITY, f32::max), "row {r}");
        assert_eq!(rmin[r], row.iter().copied().fold(f32::INFINITY, f32::min), "row {r}");
    }
    for c in 0..8 {
        let col: Vec<f32> = (0..4).map(|r| x[r * 8 + c]).collect();
        if col.iter().any(|v| v.is_nan()) {
            assert!(cmax[c].is_nan(), "column {c}");
        } else {
            assert_eq!(cmax[c], col.iter().copied().fold(f32::NEG_INFINITY, f32::max), "column {c}");
        }
    }
}

#[test]
fn both_targets_emit_the_nan_propagating_instructions() {
    let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
    let r = build_source(SRC, "nan.tile", &opts).expect("builds");
    for b in &r.built {
        let ptx = &b.compiled.ptx;
        for needle in ["max.NaN.f32", "min.NaN.f32"] {
            assert!(ptx.contains(needle), "{}: no {needle}", b.target);
        }
        // fmax / fmin: the NaN-ignoring forms (`max.f32` without `.NaN`).
        assert!(ptx.lines().any(|l| l.trim_start().starts_with("max.f32")), "{}: no max.f32", b.target);
        assert!(ptx.lines().any(|l| l.trim_start().starts_with("min.f32")), "{}: no min.f32", b.target);
        // ptxas accepts the .NaN forms on both targets (scripts/setup.sh installs it; CI has it).
        if tilec::artifact::find_ptxas().is_some() {
            tilec::artifact::run_ptxas(ptx, b.target).unwrap_or_else(|e| panic!("{}: ptxas: {e}", b.target));
        }
    }
}

#[test]
fn fmax_on_integers_is_a_type_error() {
    let src = "kernel k(x: i32[4, 4], y: out i32[4, 4]) grid(1) threads(32) { let a = load x[:, :]; store y[:, :] = fmax(a, a); }";
    let c = check_source(src, &Options::default());
    assert!(c.diags.iter().any(|d| d.message.contains("`fmax` needs float operands")), "{}", c.diags.render("k.tile", src, false));
}
