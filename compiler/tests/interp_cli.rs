//! `tilec run --interp`: safetensors in, front end, interpreter, safetensors out, exit codes.

mod interp_common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use interp_common::*;
use tilec::cli::run::{run, RunArgs};
use tilec_abi::meta::DType;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("interp_cli_{name}"))
}

fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(file)
}

fn args(file: PathBuf, inputs: PathBuf, out: PathBuf) -> RunArgs {
    RunArgs { file, interp: true, inputs, out, kernel: None, sizes: vec![], max_steps: 1_000_000, target: tilec::backend::Target::Sm90a }
}

#[test]
fn run_gemm_file_end_to_end() {
    let (m, kd, n) = (130, 70, 20);
    let mut rng = Rng(99);
    let (ta, a) = random_tensor(&mut rng, DType::Bf16, &[m, kd], 1.0);
    let (tb, b) = random_tensor(&mut rng, DType::Bf16, &[kd, n], 1.0);
    let inp = tmp("gemm_in.safetensors");
    let out = tmp("gemm_out.safetensors");
    tilec_abi::st::write(&inp, &BTreeMap::from([("a".to_string(), ta), ("b".to_string(), tb)])).unwrap();
    let code = run(&args(example("gemm.tile"), inp, out.clone()));
    assert_eq!(code, ExitCode::SUCCESS);
    let res = tilec_abi::st::read(&out).unwrap();
    let c = &res["c"];
    assert_eq!((c.dtype, c.shape.clone()), (DType::F32, vec![m, n]));
    let (exact, absprod) = matmul_f64(&a, &b, m, kd, n);
    let got = c.to_f64();
    for i in 0..m * n {
        assert!((got[i] - exact[i]).abs() <= gamma_f32(kd) * absprod[i]);
    }
}

#[test]
fn run_reports_errors_with_exit_codes() {
    let inp = tmp("err_in.safetensors");
    let (ta, _) = random_tensor(&mut Rng(1), DType::Bf16, &[4, 4], 1.0);
    tilec_abi::st::write(&inp, &BTreeMap::from([("a".to_string(), ta)])).unwrap();
    let out = tmp("err_out.safetensors");
    // Missing input `b`: a run error.
    assert_eq!(run(&args(example("gemm.tile"), inp.clone(), out.clone())), ExitCode::from(1));
    // Without --interp.
    let mut a = args(example("gemm.tile"), inp.clone(), out.clone());
    a.interp = false;
    assert_eq!(run(&a), ExitCode::from(2));
    // Two kernels in the file and none chosen; then an unknown one.
    let mut a = args(example("k1_reverse_scan.tile"), inp.clone(), out.clone());
    assert_eq!(run(&a), ExitCode::from(2));
    a.kernel = Some("nope".into());
    assert_eq!(run(&a), ExitCode::from(2));
    // Unreadable inputs.
    assert_eq!(run(&args(example("gemm.tile"), tmp("does_not_exist"), out)), ExitCode::from(2));
}

#[test]
fn unknown_size_name_is_an_error_not_ignored() {
    let mut rng = Rng(5);
    let (ta, _) = random_tensor(&mut rng, DType::Bf16, &[4, 16], 1.0);
    let (tb, _) = random_tensor(&mut rng, DType::Bf16, &[16, 8], 1.0);
    let inp = tmp("size_typo_in.safetensors");
    let out = tmp("size_typo_out.safetensors");
    let _ = std::fs::remove_file(&out);
    tilec_abi::st::write(&inp, &BTreeMap::from([("a".to_string(), ta), ("b".to_string(), tb)])).unwrap();
    // `--size Q=5` (a typo for a real size) used to be accepted silently.
    let mut a = args(example("gemm.tile"), inp.clone(), out.clone());
    a.sizes = vec![("Q".into(), 5)];
    assert_eq!(run(&a), ExitCode::from(1));
    assert!(!out.exists(), "no output is written after a failed run");
    // The real size names are still accepted (and checked against the inputs).
    a.sizes = vec![("M".into(), 4)];
    assert_eq!(run(&a), ExitCode::SUCCESS);
    let k = tilec::frontend::check_source(&std::fs::read_to_string(example("gemm.tile")).unwrap(), &Default::default()).module.kernels.remove(0);
    let inputs = tilec_abi::st::read(&inp).unwrap();
    let opts = tilec::interp::Options { sizes: BTreeMap::from([("Q".to_string(), 5)]), ..Default::default() };
    let e = tilec::interp::run_kernel_with(&k, &inputs, &opts).unwrap_err();
    assert!(matches!(&e, tilec::interp::InterpError::Bind(tilec_abi::bind::BindError::Unknown { kind: "size", name, .. }) if name == "Q"), "{e}");
    assert!(e.to_string().contains("has no size `Q` (its sizes: M, K, N)"), "{e}");
}
