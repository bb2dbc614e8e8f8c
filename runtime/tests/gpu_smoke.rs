//! GPU smoke tests: launch the hand-written `axpb` PTX (tests/fixtures) and check values.
//!
//! They need an NVIDIA GPU, so they are `#[ignore]`d and a plain `cargo test` reports them as
//! ignored rather than passed. Run them where a GPU is, with
//! `cargo test -p tilec-runtime --test gpu_smoke -- --ignored`; there a missing driver or GPU
//! is a failure, not a skip.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};

use tilec_runtime::artifact::Artifact;
use tilec_runtime::bind::{Args, BindError, Scalar};
use tilec_runtime::launch::{CodeKind, Gpu, RuntimeError};
use tilec_runtime::meta::DType;
use tilec_runtime::tensor::HostTensor;

/// A fixture file. `TILEC_RUNTIME_FIXTURES` overrides the folder, for a test binary built here
/// and run on the device machine, where the checkout lives at another path.
fn fixture(name: &str) -> PathBuf {
    std::env::var_os("TILEC_RUNTIME_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .join(name)
}

/// Device 0. A test that asked for a GPU and got none fails: it was run with `--ignored` on
/// purpose, so passing without having launched anything would be a false green.
fn gpu(test: &str) -> Gpu {
    match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => panic!("{test} needs an NVIDIA GPU and could not open one: {e}"),
    }
}

fn axpb_args(n: usize, a: f32, b: f32) -> (Args, Vec<f32>) {
    // Varied values, including ones whose product needs rounding (thirds).
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 500.0) / 3.0).collect();
    let mut args = Args::default();
    args.tensors.insert("x".into(), HostTensor::from_f32(DType::F32, vec![n], &x).unwrap());
    args.scalars.insert("a".into(), Scalar::F32(a));
    args.scalars.insert("b".into(), Scalar::F32(b));
    (args, x)
}

#[test]
#[ignore = "needs an NVIDIA GPU; run with --ignored on the H200"]
fn axpb_runs_and_matches_fma_bitwise() {
    let gpu = gpu("axpb_runs_and_matches_fma_bitwise");
    let artifact = Artifact::open(&fixture("axpb.meta.json")).unwrap();
    let kernel = gpu.load(&artifact, CodeKind::Auto).unwrap();
    // N = 1000 is not a multiple of the 128-thread block: the last CTA must mask its tail.
    let (a, b) = (1.7f32, -0.3f32);
    let (args, x) = axpb_args(1000, a, b);
    let out = gpu.run(&kernel, &args).unwrap();
    assert_eq!(out.grid, [8, 1, 1]);
    let y = out.outputs["y"].to_f32();
    assert_eq!(y.len(), 1000);
    for (i, (&yi, &xi)) in y.iter().zip(&x).enumerate() {
        assert_eq!(yi.to_bits(), a.mul_add(xi, b).to_bits(), "element {i}: got {yi}, want fma({a}, {xi}, {b})");
    }
    let again = gpu.run(&kernel, &args).unwrap();
    assert_eq!(again.outputs["y"].bytes, out.outputs["y"].bytes, "repeated runs must be bitwise identical");
    let t = gpu.bench(&kernel, &args, 5).unwrap();
    assert_eq!(t.ms.len(), 5);
    assert!(t.median_ms().is_some_and(|m| m > 0.0));
}

#[test]
#[ignore = "needs an NVIDIA GPU; run with --ignored on the H200"]
fn bad_arguments_are_refused_before_launch() {
    let gpu = gpu("bad_arguments_are_refused_before_launch");
    let artifact = Artifact::open(&fixture("axpb.meta.json")).unwrap();
    let kernel = gpu.load(&artifact, CodeKind::Ptx).unwrap();
    let (mut args, _) = axpb_args(10, 1.0, 0.0);
    args.tensors.insert("x".into(), HostTensor::zeros(DType::Bf16, vec![10]).unwrap());
    match gpu.run(&kernel, &args) {
        Err(RuntimeError::Bind(BindError::WrongDtype { param, .. })) => assert_eq!(param, "x"),
        other => panic!("expected a dtype error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU; run with --ignored on the H200"]
fn broken_ptx_reports_the_jit_log() {
    let gpu = gpu("broken_ptx_reports_the_jit_log");
    let dir = std::env::temp_dir().join(format!("tilec-runtime-badptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("axpb.meta.json"), dir.join("axpb.meta.json")).unwrap();
    let ptx = std::fs::read_to_string(fixture("axpb.ptx")).unwrap().replace("fma.rn.f32", "fma.rz.bogus.f32");
    std::fs::write(dir.join("axpb.ptx"), ptx).unwrap();
    let artifact = Artifact::open(&dir.join("axpb.meta.json")).unwrap();
    match gpu.load(&artifact, CodeKind::Ptx) {
        Err(RuntimeError::Load { log, message, .. }) => {
            eprintln!("driver said: {message}\nJIT log: {log}");
            assert!(!log.is_empty(), "the JIT error log should explain the failure");
        }
        other => panic!("expected a load error, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
