//! Float `%` is one sequence on every side (`ir::BinOp::Rem`): `fma(−trunc(x / y), y, x)` with the
//! quotient rounded to f32, and `x` where `y` is ±inf. The back end spells it out (`div.rn`,
//! `cvt.rzi`, `fma.rn` in the PTX of both targets) instead of leaving `frem` to LLVM's lowering,
//! and the interpreter computes it bit for bit — where it used to compute C's exact `fmod`, which
//! differs once the rounded quotient reaches the next integer (a reviewer's find, 2026-12-06).

use std::collections::BTreeMap;

use tilec::backend::Target;
use tilec::build::{build_source, BuildOptions};
use tilec::frontend::{check_source, Options};
use tilec::interp::{run_kernel_with, Options as InterpOptions};
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const SRC: &str = "
kernel frem(x: f32[8], y: f32[8], z: out f32[8]) grid(1) threads(32) {
    store z[:] = load x[:] % load y[:];
}
";

#[test]
fn the_interpreter_computes_the_truncated_quotient_remainder() {
    let checked = check_source(SRC, &Options::default());
    assert!(checked.ok(), "{}", checked.diags.render("frem.tile", SRC, false));
    let x = [7.0f32, -7.25, 5.0, -3.5, 1.0, f32::INFINITY, 9.0, 0.5];
    let y = [0.1f32, 4.0, 2.5, f32::INFINITY, 0.0, 2.0, -0.3, f32::NEG_INFINITY];
    let t = |v: &[f32]| HostTensor::from_f32(DType::F32, vec![8], v).expect("tensor");
    let ins = BTreeMap::from([("x".to_string(), t(&x)), ("y".to_string(), t(&y))]);
    let run = run_kernel_with(&checked.module.kernels[0], &ins, &InterpOptions::default()).expect("runs");
    let z = run.outputs["z"].to_f32();
    // Each expected value from its definition in f64: x − trunc(f32(x / y))·y is exact in f64
    // for these operands (24-bit values, small quotients), and the FMA rounds it to f32 once.
    for i in 0..8 {
        let (a, b) = (x[i], y[i]);
        if b.is_infinite() {
            assert_eq!(z[i], a, "element {i}: x % ±inf is x");
        } else if b == 0.0 || a.is_infinite() {
            assert!(z[i].is_nan(), "element {i}: {a} % {b} is NaN");
        } else {
            let q = (a / b).trunc();
            let want = (f64::from(a) - f64::from(q) * f64::from(b)) as f32;
            assert_eq!(z[i].to_bits(), want.to_bits(), "element {i}: {a} % {b}");
        }
    }
    // 7 / 0.1f rounds up to 70: the result is a small negative number, not fmod's 0.0999999.
    assert!(z[0] < 0.0 && (7.0f32 % 0.1f32) > 0.099, "{} vs fmod {}", z[0], 7.0f32 % 0.1f32);
}

#[test]
fn both_targets_emit_the_sequence() {
    let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
    let r = build_source(SRC, "frem.tile", &opts).expect("builds");
    for b in &r.built {
        // Follow the registers, so that a swapped operand fails, not only a missing instruction:
        // q = x / y; t = trunc(q); n = −t; r = fma(n, y, x); x where |y| = inf, else r.
        let ins: Vec<Vec<&str>> = b.compiled.ptx.lines().map(|l| l.trim().trim_end_matches(';').split([' ', '\t', ',']).filter(|w| !w.is_empty()).collect::<Vec<_>>()).filter(|w| !w.is_empty()).collect();
        let find = |op: &str, first_src: &str| ins.iter().find(|w| w[0] == op && w.get(2) == Some(&first_src)).unwrap_or_else(|| panic!("{}: no `{op}` of {first_src}", b.target));
        let div = ins.iter().find(|w| w[0] == "div.rn.f32").unwrap_or_else(|| panic!("{}: no div.rn.f32", b.target));
        let (q, x, y) = (div[1], div[2], div[3]);
        let t = find("cvt.rzi.f32.f32", q)[1];
        let n = find("neg.f32", t)[1];
        let fma = find("fma.rn.f32", n);
        assert_eq!((fma[3], fma[4]), (y, x), "{}: fma(−t, y, x)", b.target);
        let sel = ins.iter().find(|w| w[0] == "selp.f32" && w.get(3) == Some(&fma[1])).unwrap_or_else(|| panic!("{}: no select of the fma", b.target));
        assert_eq!(sel[2], x, "{}: x where y is infinite", b.target);
    }
}
