//! `tilec run --interp --operator` and `tilec build` on a small two-kernel operator: the plan file,
//! the values (y = 2x + 1 through a buffer), inputs refused before any launch, and a failed launch
//! reported once at its statement.

use std::path::{Path, PathBuf};
use std::process::Command;

use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const SRC: &str = "\
kernel scale2(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(cdiv(N, 128)) threads(128) {
    let i0 = program_id(0) * 128;
    store y[i0..+128] = load x[i0..+128] * 2.0;
}
kernel addone(y: f32[N] edge(zeros), z: out f32[N] edge(zeros)) grid(cdiv(N, 128)) threads(128) {
    let i0 = program_id(0) * 128;
    store z[i0..+128] = load y[i0..+128] + 1.0;
}
kernel overflow(y: f32[N] edge(zeros), z: out f32[N] edge(zeros)) grid(cdiv(N, 128)) threads(128) {
    let i0 = program_id(0) * 128;
    let big = 2147483647;
    store z[i0..+128] = load y[i0..+128] + f32(big + i0 + 1);
}
operator twostep(x: f32[N], z: out f32[N]) {
    let y: f32[N];
    scale2(x, y);
    addone(y, z);
}
operator fourstep(x: f32[N], z: out f32[N]) {
    let m: f32[N];
    twostep(x, m);
    twostep(m, z);
}
operator faulty(x: f32[N], z: out f32[N]) {
    let y: f32[N];
    scale2(x, y);
    overflow(y, z);
}
";

fn tilec() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilec"))
}

fn setup(tag: &str) -> (PathBuf, PathBuf) {
    let d = std::env::temp_dir().join(format!("tilec-opcli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("ops.tile");
    std::fs::write(&f, SRC).unwrap();
    (d, f)
}

fn inputs(d: &Path, x: &[f64], dtype: DType) -> PathBuf {
    let p = d.join("in.safetensors");
    let m = std::collections::BTreeMap::from([("x".to_string(), HostTensor::from_f64(dtype, vec![x.len()], x).unwrap())]);
    tilec_abi::st::write(&p, &m).unwrap();
    p
}

#[test]
fn an_operator_runs_builds_and_refuses_bad_inputs() {
    let (d, f) = setup("run");
    let x: Vec<f64> = (0..300).map(|i| i as f64 * 0.25 - 7.0).collect();
    let inp = inputs(&d, &x, DType::F32);
    let out = d.join("out.safetensors");
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "twostep", "--inputs"]).arg(&inp).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let z = tilec_abi::st::read(&out).unwrap()["z"].to_f64();
    assert_eq!(z, x.iter().map(|v| 2.0 * v + 1.0).collect::<Vec<_>>());

    // The plan beside the kernels, per target, naming the launches in order.
    let o = tilec().arg("build").arg(&f).args(["--target", "sm_90a", "--no-ptxas", "-o"]).arg(d.join("art")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan = tilec_abi::plan::OperatorPlan::from_json(&std::fs::read_to_string(d.join("art/twostep.sm_90a.plan.json")).unwrap()).unwrap();
    let order: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(order, ["scale2", "addone"]);
    assert_eq!(plan.buffers[0].shape, ["N"]);
    assert!(d.join("art").join(&plan.launches[0].meta).exists());

    // A wrong dtype is refused before any launch, naming the tensor (exit 1, no output written).
    let bad = inputs(&d, &x, DType::Bf16);
    std::fs::remove_file(&out).ok();
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "twostep", "--inputs"]).arg(&bad).arg("--out").arg(&out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("`x`") && err.contains("Bf16") && !out.exists(), "{err}");
    // --size is the inputs' business for an operator.
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "twostep", "--size", "N=3", "--inputs"]).arg(&inp).arg("--out").arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&d).ok();
}

/// An operator calling another, twice: the calls are inlined into one plan (the callee's
/// launches in order, a fresh buffer per call) and the values compose, z = 2(2x + 1) + 1.
#[test]
fn an_operator_call_is_inlined_with_fresh_buffers() {
    let (d, f) = setup("call");
    let x: Vec<f64> = (0..200).map(|i| i as f64 * 0.5 - 3.0).collect();
    let inp = inputs(&d, &x, DType::F32);
    let out = d.join("out.safetensors");
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "fourstep", "--inputs"]).arg(&inp).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let z = tilec_abi::st::read(&out).unwrap()["z"].to_f64();
    assert_eq!(z, x.iter().map(|v| 4.0 * v + 3.0).collect::<Vec<_>>());
    let o = tilec().arg("build").arg(&f).args(["--target", "sm_90a", "--no-ptxas", "-o"]).arg(d.join("art")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan = tilec_abi::plan::OperatorPlan::from_json(&std::fs::read_to_string(d.join("art/fourstep.sm_90a.plan.json")).unwrap()).unwrap();
    let order: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(order, ["scale2", "addone", "scale2", "addone"]);
    let bufs: Vec<&str> = plan.buffers.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bufs, ["m", "twostep.y", "twostep#2.y"]);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_failed_launch_is_reported_once_at_its_statement() {
    let (d, f) = setup("fail");
    let inp = inputs(&d, &[1.0; 10], DType::F32);
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "faulty", "--inputs"]).arg(&inp).arg("--out").arg(d.join("o.st")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("launch 1 (`overflow`)"), "{err}");
    assert!(err.contains("E0601") && err.contains("ops.tile:12"), "the statement that failed: {err}");
    // Once: the launch line and the diagnostic, not the executor's message a second time.
    assert_eq!(err.matches("launch 1 (`overflow`)").count(), 1, "{err}");
    assert_eq!(err.matches("error[E0601]").count(), 1, "{err}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn tilec_inputs_makes_an_operators_inputs() {
    let (d, f) = setup("inputs");
    let inp = d.join("gen.safetensors");
    let o = tilec().arg("inputs").arg(&f).args(["--operator", "twostep", "--size", "N=200", "--seed", "3", "--out"]).arg(&inp).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = tilec_abi::st::read(&inp).unwrap();
    // The operator's inputs only (its `out` z is not written), with its shapes.
    assert_eq!(m.keys().collect::<Vec<_>>(), ["x"]);
    assert_eq!(m["x"].shape, [200]);
    let out = d.join("out.safetensors");
    let o = tilec().args(["run", "--interp"]).arg(&f).args(["--operator", "twostep", "--inputs"]).arg(&inp).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let z = tilec_abi::st::read(&out).unwrap()["z"].to_f64();
    let x = m["x"].to_f64();
    assert!(z.iter().zip(&x).all(|(z, x)| *z == f64::from((2.0 * *x as f32) + 1.0)));
    // A size the operator lacks, and a missing one, are refused by name.
    let o = tilec().arg("inputs").arg(&f).args(["--operator", "twostep", "--size", "Q=1", "--out"]).arg(&inp).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("operator `twostep` has no size `Q`"));
    std::fs::remove_dir_all(&d).ok();
}

/// Calls are inlined in full, so an operator calling another twice, nested, doubles per level: a
/// depth-13 chain (8,192 launches) is refused at the call that crosses the limit, quickly, not
/// after minutes and gigabytes.
#[test]
fn nested_calls_past_the_launch_limit_are_refused() {
    let (d, _) = setup("nest");
    let mut src = String::from("kernel scale2(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(cdiv(N, 128)) threads(128) {\n    let i0 = program_id(0) * 128;\n    store y[i0..+128] = load x[i0..+128] * 2.0;\n}\noperator o0(x: f32[N], y: out f32[N]) {\n    scale2(x, y);\n}\n");
    for i in 1..=13 {
        src += &format!("operator o{i}(x: f32[N], y: out f32[N]) {{\n    let m: f32[N];\n    o{p}(x, m);\n    o{p}(m, y);\n}}\n", p = i - 1);
    }
    let f = d.join("nest.tile");
    std::fs::write(&f, src).unwrap();
    let t = std::time::Instant::now();
    let o = tilec().arg("check").arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("operator `o13` would inline more than 4096 launches"), "{err}");
    assert_eq!(err.matches("error[E0309]").count(), 1, "one report, at the call that crosses the limit: {err}");
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
    std::fs::remove_dir_all(&d).ok();
}

/// `--verify=gpu` judges the sm_90a plans: a build without that target is refused (exit 2), and
/// `--verify` alone still means the interpreter (the flag's value is optional).
#[test]
fn verify_gpu_needs_the_sm90a_target() {
    let (d, f) = setup("vgpu");
    let o = tilec().arg("build").arg(&f).args(["--target", "sm_100a", "--no-ptxas", "--verify=gpu", "-o"]).arg(d.join("art")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--verify=gpu runs the sm_90a artifacts"), "{err}");
    let o = tilec().arg("build").arg(&f).args(["--target", "sm_90a", "--no-ptxas", "-o"]).arg(d.join("art")).arg("--verify").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("no operator or kernel declares a contract"), "{err}");
    std::fs::remove_dir_all(&d).ok();
}

/// A run whose outputs hold NaN or ±inf succeeds (the program may mean it) but says so: random
/// recurrence inputs overflow, and a bare `ok` hid it.
#[test]
fn non_finite_outputs_are_warned_about() {
    let d = std::env::temp_dir().join(format!("tilec-opcli-nonfinite-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("div.tile");
    std::fs::write(&f, "kernel div(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(1) {\n    store y[0..+16] = load x[0..+16] / 0.0;\n}\n").unwrap();
    let x: Vec<f64> = (0..16).map(|i| if i == 3 { 0.0 } else { 1.0 }).collect();
    let input = inputs(&d, &x, DType::F32);
    let r = tilec().args(["run", "--interp"]).arg(&f).arg("--inputs").arg(&input).arg("--out").arg(d.join("out.safetensors")).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    // 15 elements are 1/0 = inf, one is 0/0 = NaN: all 16 non-finite.
    assert!(err.contains("warning: output `y` has 16 of 16 elements NaN or infinite"), "{err}");
    // Finite outputs: no warning.
    std::fs::write(&f, "kernel div(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(1) {\n    store y[0..+16] = load x[0..+16] / 2.0;\n}\n").unwrap();
    let ok = tilec().args(["run", "--interp"]).arg(&f).arg("--inputs").arg(&input).arg("--out").arg(d.join("out.safetensors")).output().unwrap();
    assert!(ok.status.success() && !String::from_utf8_lossy(&ok.stderr).contains("warning"), "{}", String::from_utf8_lossy(&ok.stderr));
    std::fs::remove_dir_all(&d).ok();
}
