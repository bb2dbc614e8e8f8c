//! `tilec-run` as a process: argument errors and the no-GPU path, checked on any machine.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn tilec_run(extra: &[&str]) -> (i32, String, String) {
    let out_dir = std::env::temp_dir().join(format!("tilec-run-cli-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tilec-run"))
        .arg(fixture("axpb.meta.json"))
        .arg("--inputs")
        .arg(fixture("axpb.inputs.safetensors"))
        .arg("--out")
        .arg(out_dir.join("y.safetensors"))
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn binds_then_runs_or_reports_no_gpu() {
    let (code, stdout, stderr) = tilec_run(&["--repeat", "2"]);
    assert!(stdout.contains("sizes [N=1000] grid [8, 1, 1] block [128, 1, 1]"), "{stdout}");
    match code {
        0 => assert!(stdout.contains("repeat: 2 runs, outputs bitwise identical"), "{stdout}"),
        4 => assert!(stderr.contains("no CUDA driver") || stderr.contains("no usable GPU"), "{stderr}"),
        other => panic!("exit {other}: {stdout}\n{stderr}"),
    }
}

#[test]
fn argument_errors_exit_before_the_gpu() {
    let (code, _, stderr) = tilec_run(&["--size", "N=7"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("size `N` is inconsistent"), "{stderr}");

    let (code, _, stderr) = tilec_run(&["--scalar", "a=abc"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a valid F32"), "{stderr}");

    let (code, _, stderr) = tilec_run(&["--scalar", "zz=1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no scalar parameter `zz`"), "{stderr}");
}

/// A plan's kernel metadata is read and checked before the GPU is opened: a missing or
/// malformed `<kernel>.meta.json` is the artifacts' fault (exit 2, naming the launch), never
/// reported as "no GPU" (exit 4), which callers (kverify, `tilec build --verify=gpu`) read as
/// "nothing to judge here".
#[test]
fn a_plans_kernel_metadata_is_checked_before_the_gpu() {
    let dir = std::env::temp_dir().join(format!("tilec-run-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["axpb.meta.json", "axpb.ptx"] {
        std::fs::copy(fixture(f), dir.join(f)).unwrap();
    }
    let param = |name: &str, shape: &str, role: &str| format!(r#"{{"name": "{name}", "dtype": "f32", "shape": [{shape}], "role": "{role}"}}"#);
    let arg = |p: &str| format!(r#"{{"param": "{p}", "value": "{p}"}}"#);
    let plan = format!(
        r#"{{"schema_version": 3, "operator": "axpb_op", "target": "sm_90a",
            "compiler": {{"name": "tilec", "version": "0"}}, "source": {{"path": "axpb.tile", "hash": "0"}}, "sizes": ["N"],
            "params": [{}, {}, {}, {}], "buffers": [],
            "launches": [{{"kernel": "axpb", "meta": "axpb.meta.json", "args": [{}, {}, {}, {}]}}]}}"#,
        param("a", "", "input"),
        param("x", r#""N""#, "input"),
        param("y", r#""N""#, "output"),
        param("b", "", "input"),
        arg("a"),
        arg("x"),
        arg("y"),
        arg("b"),
    );
    let plan_path = dir.join("axpb_op.plan.json");
    std::fs::write(&plan_path, plan).unwrap();
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_tilec-run")).arg(&plan_path).arg("--inputs").arg(fixture("axpb.inputs.safetensors")).arg("--out").arg(dir.join("y.safetensors")).output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run();
    assert!(code == 0 || code == 4, "a good plan runs or finds no GPU: exit {code}: {stderr}");
    std::fs::remove_file(dir.join("axpb.meta.json")).unwrap();
    let (code, stderr) = run();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("launch 0 (`axpb`)"), "{stderr}");
    std::fs::write(dir.join("axpb.meta.json"), "{\"schema_version\": 99}").unwrap();
    let (code, stderr) = run();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("launch 0 (`axpb`)"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
