//! Interpreter on DSL programs: `dsl-examples/gemm.tile` and `k1_scan_scalar` of
//! `dsl-examples/k1_reverse_scan.tile`, compiled by the front end (parse, lower, TMEM plan) and
//! run over their whole grids against the fp64 references.

mod interp_common;

use std::collections::BTreeMap;

use interp_common::*;
use tilec::interp::{run_kernel_with, Options, TmemCounts};
use tilec::ir::Kernel;
use tilec_abi::meta::DType;

fn kernel(file: &str, name: &str) -> Kernel {
    let path = format!("{}/../dsl-examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let checked = tilec::frontend::check_source(&src, &tilec::frontend::Options::default());
    assert!(checked.ok(), "{file} does not compile");
    checked.module.kernels.into_iter().find(|k| k.name == name).unwrap_or_else(|| panic!("no kernel {name} in {file}"))
}

#[test]
fn dsl_gemm_matches_fp64() {
    let k = kernel("gemm.tile", "gemm");
    let (m, kd, n) = (200, 100, 300); // 2 x 2 CTAs of 128 x 256, K steps of 64: all partial
    let mut rng = Rng(21);
    let (ta, a) = random_tensor(&mut rng, DType::Bf16, &[m, kd], 1.0);
    let (tb, b) = random_tensor(&mut rng, DType::Bf16, &[kd, n], 1.0);
    let inputs = BTreeMap::from([("a".to_string(), ta), ("b".to_string(), tb)]);
    let run = run_kernel_with(&k, &inputs, &Options::default()).expect("gemm.tile runs");
    assert_eq!(run.grid, [2, 2, 1]);
    // The planner's lifecycle runs exactly once per CTA.
    assert!(run.ctas.iter().all(|c| c.tmem == TmemCounts { alloc: 1, relinquish: 1, dealloc: 1 }));
    let got = run.outputs["c"].to_f64();
    let (exact, absprod) = matmul_f64(&a, &b, m, kd, n);
    let g = gamma_f32(kd);
    for i in 0..m * n {
        assert!((got[i] - exact[i]).abs() <= g * absprod[i], "c[{}, {}]: {} vs {}", i / n, i % n, got[i], exact[i]);
    }
}

#[test]
fn dsl_k1_scalar_matches_fp64() {
    let k = kernel("k1_reverse_scan.tile", "k1_scan_scalar");
    // C = 64, K = 128, BV = 32 in the file. T = 100: one full and one partial chunk;
    // V = 80: two full V tiles and a partial one; B·H = 2.
    let (bsz, t, h, kd, v, c) = (1, 100, 2, 128, 80, 64);
    let (x, inputs) = k1_inputs(5, bsz, t, h, kd, v, c);
    // A dense call: one sequence [0, T) (cu, co) and dh's chunk count NS from the chunk table.
    let inputs = with_dense_tables(&k, inputs, t, c);
    let run = run_kernel_with(&k, &inputs, &Options::default()).expect("k1_scan_scalar runs");
    assert_eq!(run.outputs["dh"].shape, [bsz, t.div_ceil(c), h, kd, v]);
    assert_eq!(run.grid, [v.div_ceil(32) as i64, 2, 1]);
    assert!(run.ctas.iter().all(|c| c.tmem == TmemCounts { alloc: 1, relinquish: 1, dealloc: 1 }));
    let m = k1_reference(&x, c, true);
    let e = k1_reference(&x, c, false);
    for (name, mirror, exact) in [("dh", &m.dh, &e.dh), ("dh0", &m.dh0, &e.dh0), ("dv2", &m.dv2, &e.dv2)] {
        let got = run.outputs[name].to_f64();
        let (em, ee) = (rel_max_err(&got, mirror), rel_max_err(&got, exact));
        eprintln!("{name}: vs mirrored fp64 {em:.3e}, vs exact fp64 {ee:.3e} (of max|ref|)");
        // Tolerances as in interp_k1.rs (bf16 rounding-boundary crossings; bf16 intermediates).
        assert!(em <= 2f64.powi(-7), "{name}: {em:e}");
        assert!(ee <= 2f64.powi(-4), "{name}: {ee:e}");
    }
}

#[test]
fn a_size_only_an_output_uses_must_be_given() {
    let src = "kernel k(x: f32[N, 64], y: out f32[M, 64]) grid(1) { store y[0..+64, :] = load x[0..+64, :]; }";
    let c = tilec::frontend::check_source(src, &tilec::frontend::Options::default());
    assert!(c.ok());
    let x = tilec_abi::tensor::HostTensor::from_f64(tilec_abi::meta::DType::F32, vec![64, 64], &[1.0; 64 * 64]).unwrap();
    let inputs = BTreeMap::from([("x".to_string(), x)]);
    let e = tilec::interp::run_kernel(&c.module.kernels[0], &inputs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "size `M` (used by parameter `y` dim 0 = `M`) cannot be inferred from the arguments; give it explicitly with `--size M=<n>`"
    );
    let opts = Options { sizes: BTreeMap::from([("M".to_string(), 64)]), ..Options::default() };
    let run = run_kernel_with(&c.module.kernels[0], &inputs, &opts).expect("runs with M given");
    assert_eq!(run.outputs["y"].to_f64(), vec![1.0; 64 * 64]);
}
