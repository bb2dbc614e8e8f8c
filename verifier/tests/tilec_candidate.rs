//! The tilec candidate kind without a compiler: its process handling (time limit, signal, exit
//! status, no-GPU status of `tilec-run`) exercised with small shell stand-ins for the tilec
//! executables, and its option parsing. The end-to-end judgement of a real tilec kernel lives in
//! `compiler/tests/kverify_gemm.rs` (it needs the `tilec` binary).

use kverify::candidate::tilec::{default_binding, parse_binding, split_kernel_spec, Binding, Executor, TilecCandidate, TilecError, EXIT_NO_GPU};
use kverify::candidate::{Candidate, CandidateError};
use kverify::error_model::Precision;
use kverify::references::op_by_id;
use kverify::tensor::{DType, Tensor};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BF16_F32: Precision = Precision::new(DType::Bf16, DType::F32, DType::F32);

/// An executable shell script `name` with `body` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

fn matmul_inputs() -> Vec<Tensor> {
    let op = op_by_id("matmul").expect("matmul");
    let d = op.native();
    op.input_shapes(&d).into_iter().map(|s| Tensor::from_f64(s.clone(), &vec![1.0; s.iter().product()], DType::Bf16)).collect()
}

/// An interpreter candidate whose `tilec` is the script `body`.
fn interp(dir: &Path, body: &str, limit: Duration) -> TilecCandidate {
    let tilec = script(dir, "tilec", body);
    let source = dir.join("k.tile");
    std::fs::write(&source, "// stand-in").expect("source");
    let ex = Executor::Interp { tilec, source, kernel: Some("gemm".into()) };
    TilecCandidate::new("matmul", BF16_F32, ex, default_binding("matmul").expect("binding"), limit, 0).expect("candidate")
}

#[test]
fn exit_status_and_stderr_are_reported() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = interp(dir.path(), "echo 'error: no kernel `gemm`' >&2\nexit 2", Duration::from_secs(10));
    let e = c.forward(&op_by_id("matmul").expect("op").native(), &mut matmul_inputs()).expect_err("must fail");
    match &e {
        CandidateError::Exited { code: 2, stderr_tail } => assert!(stderr_tail.contains("no kernel `gemm`"), "{stderr_tail}"),
        other => panic!("expected exit 2, got {other:?}"),
    }
    assert!(e.is_runtime_failure());
}

#[test]
fn a_signal_is_a_crash() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = interp(dir.path(), "kill -SEGV $$", Duration::from_secs(10));
    let e = c.forward(&op_by_id("matmul").expect("op").native(), &mut matmul_inputs()).expect_err("must fail");
    assert!(matches!(&e, CandidateError::Crashed(m) if m.contains("SIGSEGV")), "{e:?}");
}

#[test]
fn a_hang_is_killed_at_the_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = interp(dir.path(), "sleep 30", Duration::from_millis(300));
    let t = Instant::now();
    let e = c.forward(&op_by_id("matmul").expect("op").native(), &mut matmul_inputs()).expect_err("must time out");
    assert!(matches!(e, CandidateError::TimedOut { .. }), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "the process group was not killed: {:?}", t.elapsed());
}

#[test]
fn the_command_line_names_file_kernel_and_tensors() {
    // The stand-in fails on purpose, echoing its arguments to stderr.
    let dir = tempfile::tempdir().expect("tmp");
    let c = interp(dir.path(), "echo \"$@\" >&2\nexit 1", Duration::from_secs(10));
    let e = c.forward(&op_by_id("matmul").expect("op").native(), &mut matmul_inputs()).expect_err("must fail");
    let CandidateError::Exited { code: 1, stderr_tail } = e else { panic!("{e:?}") };
    assert!(stderr_tail.starts_with("run --interp "), "{stderr_tail}");
    assert!(stderr_tail.contains("k.tile --kernel gemm --inputs "), "{stderr_tail}");
    assert!(stderr_tail.contains(" --out "), "{stderr_tail}");
}

#[test]
fn no_gpu_is_reported_as_such() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = script(dir.path(), "tilec-run", &format!("echo 'error: no CUDA driver' >&2\nexit {EXIT_NO_GPU}"));
    let meta = dir.path().join("gemm.sm_100a.meta.json");
    std::fs::write(&meta, "{}").expect("meta");
    let c = TilecCandidate::new("matmul", BF16_F32, Executor::Gpu { tilec_run: run, meta }, default_binding("matmul").expect("b"), Duration::from_secs(10), 0)
        .expect("candidate");
    assert_eq!(c.kind(), "tilec-gpu");
    let msg = c.gpu_available(&op_by_id("matmul").expect("op").native()).expect_err("no GPU");
    assert!(msg.contains("no GPU") && msg.contains("no CUDA driver"), "{msg}");
}

#[test]
fn options_parse_and_are_checked() {
    assert_eq!(split_kernel_spec("dsl-examples/gemm.tile:gemm"), (PathBuf::from("dsl-examples/gemm.tile"), Some("gemm".into())));
    assert_eq!(split_kernel_spec("gemm.tile"), (PathBuf::from("gemm.tile"), None));
    let b = parse_binding("a, b:c").expect("binding");
    assert_eq!((b.inputs, b.outputs), (vec!["a".to_string(), "b".to_string()], vec!["c".to_string()]));
    assert!(matches!(parse_binding("a,b"), Err(TilecError::Syntax(_))));
    let d = default_binding("matmul").expect("matmul");
    assert_eq!((d.inputs.as_slice(), d.outputs.as_slice()), (&["a".to_string(), "b".to_string()][..], &["c".to_string()][..]));
    assert!(matches!(default_binding("nope"), Err(TilecError::UnknownOp(_))));

    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("k.tile");
    std::fs::write(&src, "").expect("src");
    let ex = Executor::Interp { tilec: PathBuf::from("/bin/true"), source: src.clone(), kernel: None };
    let one_input = Binding { inputs: vec!["a".into()], input_dtypes: vec![None], outputs: vec!["c".into()], sizes: Default::default() };
    let e = TilecCandidate::new("matmul", BF16_F32, ex.clone(), one_input, Duration::from_secs(1), 0).err().expect("arity");
    assert!(matches!(e, TilecError::BindingArity { want: 2, got: 1, .. }), "{e}");
    let missing = Executor::Interp { tilec: PathBuf::from("/bin/true"), source: dir.path().join("absent.tile"), kernel: None };
    let e = TilecCandidate::new("matmul", BF16_F32, missing, default_binding("matmul").expect("b"), Duration::from_secs(1), 0).err().expect("missing");
    assert!(matches!(e, TilecError::Missing { .. }), "{e}");
}

/// The CUDA driver reserves a huge virtual address range, so the GPU executor must not run
/// under the address-space cap (on the H200 the cap made context creation fail with
/// CUDA_ERROR_OUT_OF_MEMORY); the interpreter keeps it.
#[test]
fn gpu_executor_runs_without_an_address_space_cap() {
    let dir = tempfile::tempdir().expect("tmp");
    // The stand-ins report the address-space limit they run under, then fail.
    let body = "echo \"limit=$(ulimit -v)\" >&2\nexit 1";
    let run = script(dir.path(), "tilec-run", body);
    let meta = dir.path().join("gemm.sm_90a.meta.json");
    std::fs::write(&meta, "{}").expect("meta");
    let gpu = TilecCandidate::new("matmul", BF16_F32, Executor::Gpu { tilec_run: run, meta }, default_binding("matmul").expect("b"), Duration::from_secs(10), 4096)
        .expect("candidate");
    assert_eq!(gpu.address_space_limit_mb(), 0);
    // The GPU executor declares its device (CMP-03's probe past 2^31 flat elements) and no cap.
    assert_eq!((gpu.compute_device(), gpu.memory_limit_mb()), (kverify::tensor::Device::Cuda(0), 0));
    let mut inputs = matmul_inputs();
    let err = gpu.forward(&op_by_id("matmul").expect("op").native(), &mut inputs).expect_err("stand-in fails");
    assert!(format!("{err:?}").contains("limit=unlimited"), "{err:?}");
    // The same cap on the interpreter executor is applied: the child sees 4096 MiB in KiB.
    let tilec = script(dir.path(), "tilec", body);
    let source = dir.path().join("k.tile");
    std::fs::write(&source, "// stand-in").expect("source");
    let ex = Executor::Interp { tilec, source, kernel: Some("gemm".into()) };
    let cpu = TilecCandidate::new("matmul", BF16_F32, ex, default_binding("matmul").expect("b"), Duration::from_secs(10), 4096).expect("candidate");
    assert_eq!((cpu.compute_device(), cpu.memory_limit_mb()), (kverify::tensor::Device::Cpu, 4096));
    assert_eq!(cpu.address_space_limit_mb(), 4096);
    let err = cpu.forward(&op_by_id("matmul").expect("op").native(), &mut matmul_inputs()).expect_err("stand-in fails");
    assert!(format!("{err:?}").contains(&format!("limit={}", 4096 * 1024)), "{err:?}");
}

/// `--tilec-operator`: the command runs the operator with its size constants, a binding may
/// widen an input to its parameter's dtype (`g@f32`; only exact widenings are accepted), and a
/// recurrence class adds its fixed scale K^-0.5 as the rank-0 f32 tensor `scale`.
#[test]
fn an_operator_gets_its_constants_widened_inputs_and_the_class_scale() {
    let b = parse_binding("q,k,v,g@f32,beta,s0@f32:o,ht").expect("binding");
    assert_eq!(b.inputs, ["q", "k", "v", "g", "beta", "s0"]);
    assert_eq!(b.input_dtypes, [None, None, None, Some(DType::F32), None, Some(DType::F32)]);
    assert!(matches!(parse_binding("q,k@f12:o"), Err(TilecError::Syntax(m)) if m.contains("unknown dtype")));

    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("gdn_fwd.tile");
    std::fs::write(&src, "// stand-in").expect("src");
    let seen = dir.path().join("seen.safetensors");
    // The stand-in keeps the inputs file it was given and echoes its arguments, then fails.
    let body = format!("echo \"$@\" >&2\nwhile [ $# -gt 0 ]; do [ \"$1\" = --inputs ] && cp \"$2\" {}; shift; done\nexit 1", seen.display());
    let tilec = script(dir.path(), "tilec", &body);
    let ex = Executor::InterpOperator { tilec, source: src, operator: "gdn_fwd".into(), consts: vec!["K=64".into(), "V=32".into()] };
    let c = TilecCandidate::new("gdn", BF16_F32, ex.clone(), b.clone(), Duration::from_secs(10), 0).expect("candidate");
    assert_eq!(c.kind(), "tilec-interp");
    let op = op_by_id("gdn").expect("gdn");
    let d = op.native().with("K", 64).with("V", 32);
    let mut inputs: Vec<Tensor> = op.input_shapes(&d).into_iter().map(|s| Tensor::from_f64(s.clone(), &vec![0.5; s.iter().product()], DType::Bf16)).collect();
    let e = c.forward(&d, &mut inputs).expect_err("the stand-in fails");
    let CandidateError::Exited { code: 1, stderr_tail } = e else { panic!("{e:?}") };
    assert!(stderr_tail.starts_with("run --interp ") && stderr_tail.contains("gdn_fwd.tile --operator gdn_fwd --const K=64 --const V=32 --inputs "), "{stderr_tail}");
    let t = kverify::candidate::safetensors_io::read(&seen).expect("inputs file");
    assert_eq!(t["g"].dtype(), DType::F32, "g widened");
    assert_eq!(t["s0"].dtype(), DType::F32, "s0 widened");
    assert_eq!(t["q"].dtype(), DType::Bf16, "q as given");
    let scale = &t["scale"];
    assert!(scale.shape.is_empty() && scale.dtype() == DType::F32, "{scale:?}");
    assert_eq!(scale.to_f64_vec()[0], (64f64.powf(-0.5) as f32) as f64);

    // A single kernel (`--tilec-kernel`) gets only the bound tensors: no `scale` it may not take.
    let kernel = Executor::Interp { tilec: script(dir.path(), "tilec", &body), source: dir.path().join("gdn_fwd.tile"), kernel: Some("k".into()) };
    let c = TilecCandidate::new("gdn", BF16_F32, kernel, b.clone(), Duration::from_secs(10), 0).expect("candidate");
    let _ = c.forward(&d, &mut inputs).expect_err("the stand-in fails");
    let t = kverify::candidate::safetensors_io::read(&seen).expect("inputs file");
    assert!(!t.contains_key("scale"), "a kernel got the class's scale");
    // The class's scale is its own: a binding may not also name `scale`.
    let clash = parse_binding("q,k,v,scale,beta,s0:o,ht").expect("binding");
    let e = TilecCandidate::new("gdn", BF16_F32, ex.clone(), clash, Duration::from_secs(1), 0).err().expect("clash");
    assert!(matches!(&e, TilecError::Syntax(m) if m.contains("`scale`")), "{e}");

    // bf16 values into an f16 parameter would round them: refused.
    let narrowing = parse_binding("q,k,v,g@f16,beta,s0:o,ht").expect("binding");
    let e = TilecCandidate::new("gdn", BF16_F32, ex, narrowing, Duration::from_secs(1), 0).err().expect("narrowing");
    assert!(matches!(&e, TilecError::Syntax(m) if m.contains("g@f16")), "{e}");
}

/// `--tilec-const` belongs to `--tilec-operator`: with a kernel it is refused, not ignored;
/// a malformed one is refused too.
#[test]
fn tilec_const_is_refused_without_an_operator() {
    use kverify::cli::tilec_args::TilecArgs;
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("k.tile");
    std::fs::write(&src, "").expect("src");
    let kernel = TilecArgs { tilec_kernel: Some(format!("{}:k", src.display())), op: Some("gdn".into()), consts: vec!["K=64".into()], tilec: Some(PathBuf::from("/bin/true")), precision: Some("bf16,f32,bf16".into()), ..Default::default() };
    let e = kernel.resolve(Duration::from_secs(1), 0).err().expect("refused");
    assert!(e.to_string().contains("--tilec-const applies to --tilec-operator only"), "{e}");
    let bad = TilecArgs { tilec_operator: Some(format!("{}:op", src.display())), op: Some("gdn".into()), consts: vec!["K=sixty".into()], tilec: Some(PathBuf::from("/bin/true")), precision: Some("bf16,f32,bf16".into()), ..Default::default() };
    let e = bad.resolve(Duration::from_secs(1), 0).err().expect("refused");
    assert!(e.to_string().contains("K=sixty"), "{e}");
}

/// A backward operator (`--tilec-backward`): called with the class's inputs, then the output
/// gradients, under its own binding and the same constants and scale; its binding's arity is
/// checked against the class (inputs + output gradients in, one gradient per input out), a
/// class without a reference backward is refused, and the CLI needs `--bind-backward` with it.
#[test]
fn a_backward_operator_gets_inputs_then_output_gradients() {
    use kverify::candidate::tilec::BackwardOperator;
    use kverify::cli::tilec_args::TilecArgs;
    let dir = tempfile::tempdir().expect("tmp");
    let (fwd, bwd) = (dir.path().join("gdn_fwd.tile"), dir.path().join("gdn.tile"));
    for p in [&fwd, &bwd] {
        std::fs::write(p, "// stand-in").expect("src");
    }
    let seen = dir.path().join("seen.safetensors");
    let body = format!("echo \"$@\" >&2\nwhile [ $# -gt 0 ]; do [ \"$1\" = --inputs ] && cp \"$2\" {}; shift; done\nexit 1", seen.display());
    let tilec = script(dir.path(), "tilec", &body);
    let consts = vec!["K=64".to_string(), "V=32".to_string()];
    let ex = Executor::InterpOperator { tilec: tilec.clone(), source: fwd.clone(), operator: "gdn_fwd".into(), consts: consts.clone() };
    let fb = parse_binding("q,k,v,g@f32,beta,s0@f32:o,ht").expect("binding");
    let bb = parse_binding("q,k,v,g@f32,beta,s0@f32,do,dht@f32:dq,dk,dv,dg,dbeta,ds0").expect("backward binding");
    let backward = |b: Binding| BackwardOperator { executor: Executor::InterpOperator { tilec: tilec.clone(), source: bwd.clone(), operator: "gdn_bwd".into(), consts: consts.clone() }, binding: b };
    let c = TilecCandidate::new("gdn", BF16_F32, ex.clone(), fb.clone(), Duration::from_secs(10), 0).expect("candidate");
    assert!(!c.has_backward());
    let c = c.with_backward(backward(bb.clone())).expect("with backward");
    assert!(c.has_backward() && c.name().ends_with("+ backward gdn_bwd"), "{}", c.name());
    let op = op_by_id("gdn").expect("gdn");
    let d = op.native().with("K", 64).with("V", 32);
    let mut inputs: Vec<Tensor> = op.input_shapes(&d).into_iter().map(|s| Tensor::from_f64(s.clone(), &vec![0.5; s.iter().product()], DType::Bf16)).collect();
    let grads: Vec<Tensor> = op.output_shapes(&d).into_iter().map(|s| Tensor::from_f64(s.clone(), &vec![0.25; s.iter().product()], DType::Bf16)).collect();
    let e = c.backward(&d, &mut inputs, &grads).expect_err("the stand-in fails");
    let CandidateError::Exited { code: 1, stderr_tail } = e else { panic!("{e:?}") };
    assert!(stderr_tail.contains("gdn.tile --operator gdn_bwd --const K=64 --const V=32 --inputs "), "{stderr_tail}");
    let t = kverify::candidate::safetensors_io::read(&seen).expect("inputs file");
    let mut names: Vec<&String> = t.keys().collect();
    names.sort();
    assert_eq!(names, ["beta", "dht", "do", "g", "k", "q", "s0", "scale", "v"]);
    assert_eq!((t["do"].dtype(), t["dht"].dtype(), t["g"].dtype()), (DType::Bf16, DType::F32, DType::F32));
    assert_eq!(t["do"].shape, op.output_shapes(&d)[0], "do is the gradient of o");
    assert_eq!(t["dht"].to_f64_vec()[0], 0.25, "dht is the gradient of the final state");
    // Arity: a gradient missing, or an output gradient missing.
    let short_out = parse_binding("q,k,v,g,beta,s0,do,dht:dq,dk,dv,dg,dbeta").expect("binding");
    let e = TilecCandidate::new("gdn", BF16_F32, ex.clone(), fb.clone(), Duration::from_secs(1), 0).expect("c").with_backward(backward(short_out)).err().expect("arity");
    assert!(matches!(&e, TilecError::BindingArity { want: 6, got: 5, .. }), "{e}");
    let short_in = parse_binding("q,k,v,g,beta,s0,do:dq,dk,dv,dg,dbeta,ds0").expect("binding");
    let e = TilecCandidate::new("gdn", BF16_F32, ex, fb, Duration::from_secs(1), 0).expect("c").with_backward(backward(short_in)).err().expect("arity");
    assert!(matches!(&e, TilecError::BindingArity { want: 8, got: 7, .. }), "{e}");
    // The CLI: --tilec-backward without --bind-backward is refused with what to add.
    let args = TilecArgs {
        tilec_operator: Some(format!("{}:gdn_fwd", fwd.display())),
        tilec_backward: Some(format!("{}:gdn_bwd", bwd.display())),
        op: Some("gdn".into()),
        tilec: Some(tilec.clone()),
        precision: Some("bf16,f32,bf16".into()),
        bind: Some("q,k,v,g@f32,beta,s0@f32:o,ht".into()),
        ..Default::default()
    };
    let e = args.resolve(Duration::from_secs(1), 0).err().expect("refused");
    assert!(e.to_string().contains("--bind-backward"), "{e}");
}
