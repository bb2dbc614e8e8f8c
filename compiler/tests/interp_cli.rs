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
    RunArgs { file, consts: Default::default(), interp: true, inputs, out, kernel: None, operator: None, sizes: vec![], max_steps: 1_000_000, time_limit: 60.0, target: tilec::backend::Target::Sm90a, dump: vec![], dump_cta: [0; 3] }
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

/// Runs the `tilec` binary (the CLI renders run-time errors; the library returns them).
fn tilec_bin(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tilec")).args(args).output().expect("tilec runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_runaway_loop_stops_at_the_time_limit_pointing_at_its_statement() {
    let src = tmp("spin.tile");
    std::fs::write(&src, "kernel spin(x: f32[8, 8], y: out f32[8, 8]) grid(1) threads(32) {\n    let mut a: reg f32[8, 8] = load x[:, :];\n    for i in 0..2000000000 {\n        a = a * 0.5;\n    }\n    store y[:, :] = a;\n}\n").unwrap();
    let inp = tmp("spin.in.safetensors");
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), tilec_abi::tensor::HostTensor::zeros(DType::F32, vec![8, 8]).unwrap())])).unwrap();
    let t0 = std::time::Instant::now();
    let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--out", tmp("spin.out.safetensors").to_str().unwrap(), "--time-limit", "1", "--max-steps", "100000000000"]);
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0601]: stopped after 1 s"), "{err}");
    // The clock is read every 64 steps: the stop lands on the loop or on its body, both shown.
    assert!(err.contains("a = a * 0.5;") && err.contains("in CTA (0, 0, 0)"), "{err}");
    assert!(took < 20.0, "the limit took {took} s to act");
}

#[test]
fn run_time_errors_point_at_the_source_statement() {
    let src = tmp("divz.tile");
    std::fs::write(&src, "kernel divz(x: i32[4, 4], n: i32, y: out i32[4, 4]) grid(1) threads(32) {\n    let a = load x[:, :];\n    store y[:, :] = a / n;\n}\n").unwrap();
    let inp = tmp("divz.in.safetensors");
    let zeros = |shape: Vec<usize>| tilec_abi::tensor::HostTensor::zeros(DType::I32, shape).unwrap();
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), zeros(vec![4, 4])), ("n".to_string(), zeros(vec![]))])).unwrap();
    let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--out", tmp("divz.out.safetensors").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0601]: integer division by zero"), "{err}");
    assert!(err.contains("3 │     store y[:, :] = a / n;"), "{err}");
}

/// `--dump NAME` (issue 13, item 3): every value of a `let` binding, a variable and a predicate
/// in the chosen CTA, one record per computation, in the output file beside `y`.
#[test]
fn dump_records_every_value_of_a_name_in_the_chosen_cta() {
    let src = tmp("dump.tile");
    std::fs::write(
        &src,
        "kernel prefix(x: f32[4, 8], y: out f32[8, 8]) grid(2) threads(128) {
    let p = program_id(0);
    let mut acc = full(4, 8, f32(p));
    for i in 0..3 {
        let step = load x[:, :] * f32(i + 1);
        acc += step;
    }
    let _big = row_sum(acc) > 300.0;
    store y[p * 4..+4, :] = acc;
}
",
    )
    .unwrap();
    let x: Vec<f64> = (0..32).map(f64::from).collect();
    let inp = tmp("dump_in.safetensors");
    let out = tmp("dump_out.safetensors");
    let tx = tilec_abi::tensor::HostTensor::from_f64(DType::F32, vec![4, 8], &x).unwrap();
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), tx)])).unwrap();
    let mut a = args(src.clone(), inp.clone(), out.clone());
    a.dump = vec!["step".into(), "acc".into(), "_big".into()];
    a.dump_cta = [1, 0, 0];
    assert_eq!(run(&a), ExitCode::SUCCESS);
    let res = tilec_abi::st::read(&out).unwrap();
    // `step` once per iteration: x * (i + 1).
    let step = &res["dump.step"];
    assert_eq!((step.dtype, step.shape.clone()), (DType::F32, vec![3, 4, 8]));
    let got = step.to_f64();
    for i in 0..3 {
        for e in 0..32 {
            assert_eq!(got[i * 32 + e], x[e] * (i + 1) as f64);
        }
    }
    // `acc`: its initial write (CTA 1 fills it with p = 1), then x·(1 + ... + i) + 1.
    let acc = &res["dump.acc"];
    assert_eq!(acc.shape, vec![4, 4, 8]);
    let got = acc.to_f64();
    for rec in 0..4 {
        let tri = (rec * (rec + 1) / 2) as f64;
        for e in 0..32 {
            assert_eq!(got[rec * 32 + e], 1.0 + x[e] * tri, "record {rec}, element {e}");
        }
    }
    // A predicate is written as i32 0/1: row r of the final acc sums to 8 + 6·(8·8r + 28).
    let big = &res["dump._big"];
    assert_eq!((big.dtype, big.shape.clone()), (DType::I32, vec![1, 4, 1]));
    let want: Vec<f64> = (0..4).map(|r| f64::from(8.0 + 6.0 * (64.0 * f64::from(r) + 28.0) > 300.0)).collect();
    assert_eq!(big.to_f64(), want);
    // The `out` tensor is still there, and CTA 0 was not recorded.
    assert_eq!(res["y"].shape, vec![8, 8]);
    // A misspelt name and a CTA outside the grid are errors, and nothing is written.
    let _ = std::fs::remove_file(&out);
    let mut a = args(src.clone(), inp.clone(), out.clone());
    a.dump = vec!["stp".into()];
    assert_eq!(run(&a), ExitCode::from(1));
    a.dump = vec!["acc".into()];
    a.dump_cta = [2, 0, 0];
    assert_eq!(run(&a), ExitCode::from(1));
    assert!(!out.exists());
    // Two bindings of one name (a `let t` outside and one inside a loop) would be stacked
    // together indistinguishably: refused.
    let shadow = tmp("dump_shadow.tile");
    std::fs::write(&shadow, "kernel k(x: f32[4, 8], y: out f32[4, 8]) grid(1) threads(128) {\n    let t = load x[:, :];\n    let mut a = t;\n    for i in 0..3 {\n        let t = a * 2.0;\n        a = t;\n    }\n    store y[:, :] = a;\n}\n").unwrap();
    let mut a = args(shadow, inp.clone(), out.clone());
    a.dump = vec!["t".into()];
    assert_eq!(run(&a), ExitCode::from(1));
    a.dump = vec!["a".into()];
    assert_eq!(run(&a), ExitCode::SUCCESS, "the unshadowed variable is dumped");
    assert_eq!(tilec_abi::st::read(&out).unwrap()["dump.a"].shape, vec![4, 4, 8]);
}

/// Issue 9, item 8: a grid the GPU cannot launch (y = 65,536 > 65,535) is refused by the
/// interpreter and by the runtime's binder (`tilec-run` binds with `tilec_abi::bind::bind`
/// before it opens a GPU) with the same message; one block less runs.
#[test]
fn a_grid_past_the_launch_limit_is_refused_by_interpreter_and_runtime_alike() {
    let src = tmp("wide_grid.tile");
    std::fs::write(&src, "kernel wide(x: f32[N, 8], y: out f32[N, 8]) grid(1, N) threads(32) {\n    let r = program_id(1);\n    store y[r..+1, :] = load x[r..+1, :];\n}\n").unwrap();
    let inputs = |n: usize| {
        let p = tmp(&format!("wide_grid_{n}.safetensors"));
        tilec_abi::st::write(&p, &BTreeMap::from([("x".to_string(), tilec_abi::tensor::HostTensor::zeros(DType::F32, vec![n, 8]).unwrap())])).unwrap();
        p
    };
    let want = "launch.grid[1] = `N` evaluates to 65536, outside 1..=65535";
    let big = inputs(65_536);
    let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", big.to_str().unwrap(), "--out", tmp("wide_grid.out.safetensors").to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains(want), "{err}");
    // The runtime's binder on the built artifact's metadata.
    let dir = tmp("wide_grid_art");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, err) = tilec_bin(&["build", src.to_str().unwrap(), "--target", "sm_90a", "--no-ptxas", "-o", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let meta = tilec_abi::meta::KernelMeta::load(&dir.join("wide.sm_90a.meta.json")).unwrap();
    let x = tilec_abi::st::read(&big).unwrap();
    let args = tilec_abi::bind::Args::from_tensor_map(&meta, x);
    let e = tilec_abi::bind::bind(&meta, &args).unwrap_err().to_string();
    assert!(e.contains(want), "{e}");
    // 65,535 rows: both accept (the interpreter runs it).
    let ok = inputs(65_535);
    let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", ok.to_str().unwrap(), "--out", tmp("wide_grid_ok.out.safetensors").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let x = tilec_abi::st::read(&ok).unwrap();
    assert!(tilec_abi::bind::bind(&meta, &tilec_abi::bind::Args::from_tensor_map(&meta, x)).is_ok());
}

/// The varlen pattern of issue 10: one CTA per sequence, a whole chunk stored from the
/// sequence's first token. Without a mask the first CTA's padding rows land in the second
/// sequence — the interpreter reports the race, naming the element and both CTAs; with
/// `where row_index(C, 1) < len` the same kernel runs clean and writes every row once.
#[test]
fn two_ctas_writing_one_element_is_reported_and_a_masked_store_avoids_it() {
    let inp = tmp("varlen.in.safetensors");
    let x = tilec_abi::tensor::HostTensor::from_f64(DType::F32, vec![100], &(0..100).map(f64::from).collect::<Vec<_>>()).unwrap();
    let cu = tilec_abi::tensor::HostTensor::from_f64(DType::I32, vec![3], &[0.0, 40.0, 100.0]).unwrap();
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), x), ("cu".to_string(), cu)])).unwrap();
    for (masked, name) in [(false, "race"), (true, "norace")] {
        let src = tmp(&format!("{name}.tile"));
        let mask = if masked { " where row_index(64, 1) < len" } else { "" };
        std::fs::write(&src, format!("kernel {name}(x: f32[T] edge(zeros), cu: i32[S], y: out f32[T]) grid(S - 1) threads(64) {{\n    let s0 = load cu[program_id(0)];\n    let len = load cu[program_id(0) + 1] - s0;\n    store y[s0..+64] = cumsum(load x[s0..+64]){mask};\n}}\n")).unwrap();
        let out = tmp(&format!("{name}.out.safetensors"));
        let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        if !masked {
            assert_eq!(code, 1, "{err}");
            assert!(err.contains("element [40] of `y` was already written by CTA [0, 0, 0]"), "{err}");
            assert!(err.contains("in CTA (1, 0, 0)"), "{err}");
            continue;
        }
        assert_eq!(code, 0, "{err}");
        let y = tilec_abi::st::read(&out).unwrap()["y"].to_f64();
        // Each sequence's own prefix sums: sequence 2 restarts at token 40.
        let want: Vec<f64> = (0..100).map(|t: usize| { let s = if t < 40 { 0 } else { 40 }; (s..=t).map(|v| v as f64).sum() }).collect();
        assert_eq!(y, want);
    }
}

/// A view whose run-time start leaves its tile stops the interpreter at the statement (the GPU
/// executes `trap` there) instead of reading another buffer's bytes.
#[test]
fn a_view_outside_its_tile_is_a_run_time_error() {
    let src = tmp("oob_view.tile");
    std::fs::write(&src, "kernel oob_view(x: f32[16, 16], n: i32, y: out f32[16]) grid(1) threads(32) {\n    let t = load x[:, :];\n    store y[0..+4] = t[n..+4, 0];\n}\n").unwrap();
    let inp = tmp("oob_view.in.safetensors");
    let n = tilec_abi::tensor::HostTensor::from_f64(DType::I32, vec![], &[13.0]).unwrap();
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), tilec_abi::tensor::HostTensor::zeros(DType::F32, vec![16, 16]).unwrap()), ("n".to_string(), n)])).unwrap();
    let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--out", tmp("oob_view.out.safetensors").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0601]: the view [13..+4, 0..+1] is outside the 16x16 tile"), "{err}");
}

/// A gather index outside its tile (tests/gpu/gather_trap: n = 16 reads column 16 of a
/// 16-column tile at every even row) stops the interpreter at the statement, naming the first
/// element that reads outside; n = 15 runs and takes column 15 − (row mod 2) of each row.
#[test]
fn a_gather_index_outside_its_tile_is_a_run_time_error() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/gpu/gathers.tile");
    let x: Vec<f64> = (0..256).map(|v| v as f64).collect();
    for n in [15, 16] {
        let inp = tmp(&format!("gather_trap{n}.in.safetensors"));
        let nv = tilec_abi::tensor::HostTensor::from_f64(DType::I32, vec![], &[n as f64]).unwrap();
        let xt = tilec_abi::tensor::HostTensor::from_f64(DType::F32, vec![16, 16], &x).unwrap();
        tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), xt), ("n".to_string(), nv)])).unwrap();
        let out = tmp(&format!("gather_trap{n}.out.safetensors"));
        let _ = std::fs::remove_file(&out);
        let (code, err) = tilec_bin(&["run", "--interp", src.to_str().unwrap(), "--kernel", "gather_trap", "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        if n == 16 {
            assert_eq!(code, 1, "{err}");
            assert!(err.contains("error[E0601]: the gather's element (0, 0) reads (0, 16), outside the 16x16 tile"), "{err}");
            assert!(!out.exists(), "nothing is written after an error");
            continue;
        }
        assert_eq!(code, 0, "{err}");
        let y = tilec_abi::st::read(&out).unwrap()["y"].to_f64();
        let want: Vec<f64> = (0..16).map(|r| (r * 16 + 15 - r % 2) as f64).collect();
        assert_eq!(y, want);
    }
}
