//! Out-of-bounds behaviour chosen by the program (issue 10; docs/language.md, "What happens out
//! of bounds"): a kernel tensor parameter declared `edge(zeros)` reads 0 past its edge and drops
//! stores there; any other tensor touched past its edge stops the interpreter (E0601) with the
//! tensor, the element and a help line naming the declaration — an indexing mistake is no longer
//! turned into silent zeros or skipped writes. The diagnostics of a misplaced attribute are
//! `tests/ui/edge.tile`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("edges_{name}"))
}

/// `tilec run --interp` of `src` (written to a file) on x = 0, 1, …, 99: (exit code, stderr,
/// the outputs).
fn run(name: &str, src: &str) -> (i32, String, BTreeMap<String, HostTensor>) {
    let file = tmp(&format!("{name}.tile"));
    std::fs::write(&file, src).unwrap();
    let (inp, out) = (tmp(&format!("{name}.in.safetensors")), tmp(&format!("{name}.out.safetensors")));
    let x = HostTensor::from_f64(DType::F32, vec![100], &(0..100).map(f64::from).collect::<Vec<_>>()).unwrap();
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), x)])).unwrap();
    let _ = std::fs::remove_file(&out);
    let o = Command::new(env!("CARGO_BIN_EXE_tilec")).args(["run", "--interp"]).arg(&file).arg("--inputs").arg(&inp).arg("--out").arg(&out).output().unwrap();
    let outputs = if o.status.success() { tilec_abi::st::read(&out).unwrap() } else { BTreeMap::new() };
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned(), outputs)
}

/// Tiles of 64 over N = 100: the second CTA's tile runs 28 elements past x's and y's edge.
fn copy(x_edge: &str, y_edge: &str, mask: &str) -> String {
    format!("kernel copy(x: f32[N]{x_edge}, y: out f32[N]{y_edge}) grid(cdiv(N, 64)) threads(64) {{\n    let i0 = program_id(0) * 64;\n    let a = load x[i0..+64];\n    store y[i0..+64] = a + 1.0{mask};\n}}\n")
}

#[test]
fn a_declared_edge_reads_zeros_and_drops_the_writes_past_it() {
    let (code, err, out) = run("padded", &copy(" edge(zeros)", " edge(zeros)", ""));
    assert_eq!(code, 0, "{err}");
    let y = out["y"].to_f64();
    assert_eq!(y, (0..100).map(|i| f64::from(i) + 1.0).collect::<Vec<_>>());
}

#[test]
fn a_load_past_an_undeclared_edge_stops_with_the_element_and_the_fix() {
    let (code, err, _) = run("load_past", &copy("", " edge(zeros)", ""));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0601]: load of element [100] of `x`, past its edge (shape [100])"), "{err}");
    assert!(err.contains("in CTA (1, 0, 0)"), "{err}");
    assert!(err.contains("help: if `x`'s tiles may run past its extent (a partial tile), declare the parameter `x: ...[...] edge(zeros)`"), "{err}");
}

#[test]
fn a_store_past_an_undeclared_edge_stops_and_a_mask_that_keeps_inside_does_not() {
    let (code, err, _) = run("store_past", &copy(" edge(zeros)", "", ""));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("store to element [100] of `y`, past its edge (shape [100])"), "{err}");
    // The mask keeps every element inside y: nothing past its edge is written, so no edge is needed.
    let (code, err, out) = run("store_masked", &copy(" edge(zeros)", "", " where row_index(64, 1) + i0 < 100"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["y"].to_f64()[99], 100.0);
    // A mask that lets one element past the edge through is still a mistake.
    let (code, err, _) = run("store_mask_101", &copy(" edge(zeros)", "", " where row_index(64, 1) + i0 < 101"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("store to element [100] of `y`"), "{err}");
}

#[test]
fn a_point_load_past_the_edge_is_a_mistake_too() {
    let src = "kernel last(x: f32[N], y: out f32[N]) grid(1) threads(32) {\n    store y[0] = load x[N];\n}\n";
    let (code, err, _) = run("point", src);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("load of element [100] of `x`, past its edge"), "{err}");
    let (code, err, out) = run("point_padded", &src.replace("x: f32[N]", "x: f32[N] edge(zeros)"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["y"].to_f64()[0], 0.0);
}

/// A tile may start before element 0 too (the per-channel stages load Γ and k from `t0 − 16`
/// for the diagonal blocks' shifted views): under `edge(zeros)` the elements before the start
/// read 0, like those past the end; without it the load is a mistake naming element −1 … as
/// the element it tried.
#[test]
fn a_tile_starting_before_zero_reads_zeros_there_only_under_a_declared_edge() {
    let src = "kernel shift(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(cdiv(N, 64)) threads(64) {\n    let i0 = program_id(0) * 64;\n    let a = load x[i0 - 3..+67];\n    store y[i0..+64] = a[3..+64, :] + a[0..+64, :];\n}\n";
    let (code, err, out) = run("before_zero", src);
    assert_eq!(code, 0, "{err}");
    // y[i] = x[i] + x[i − 3], with x[−3 … −1] = 0: 0, 1, 2 at the start, then 2i − 3.
    let want: Vec<f64> = (0..100).map(|i| f64::from(i) + if i >= 3 { f64::from(i - 3) } else { 0.0 }).collect();
    assert_eq!(out["y"].to_f64(), want);
    let (code, err, _) = run("before_zero_undeclared", &src.replace("x: f32[N] edge(zeros)", "x: f32[N]"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("load of element [-3] of `x`, past its edge"), "{err}");
}

/// `--emit ir` prints the declaration and the IR reader takes it back.
#[test]
fn the_ir_text_keeps_the_edge() {
    let file = tmp("emit.tile");
    std::fs::write(&file, copy(" edge(zeros)", "", " where row_index(64, 1) + i0 < 100")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tilec")).args(["check", "--emit", "ir"]).arg(&file).output().unwrap();
    let ir = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(ir.contains("kernel copy(p0 x: f32[N] edge(zeros), p1 y: out f32[N])"), "{ir}");
    let module = tilec::ir::read::read_module(&ir).expect("reads back");
    let k = &module.kernels[0];
    let edges: Vec<_> = k.params.values().map(|p| p.edge).collect();
    assert_eq!(edges, [tilec::ir::Edge::Zeros, tilec::ir::Edge::Error]);
    assert_eq!(tilec::ir::write::write_kernel(k).lines().next(), ir.lines().find(|l| l.starts_with("kernel ")));
}

/// `tilec build --verify` on a contract kernel that forgot `edge(zeros)` (gemm.tile without its
/// declarations): the partial-tile case stops at the past-edge load, and the report carries the
/// help line naming the declaration, as `tilec run` does.
#[test]
fn verify_reports_a_missing_edge_with_its_help_line() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = std::fs::read_to_string(root.join("dsl-examples/gemm.tile")).unwrap().replace(" edge(zeros)", "");
    let file = tmp("gemm_noedge.tile");
    std::fs::write(&file, src).unwrap();
    let out = tmp("gemm_noedge_art");
    let o = Command::new(env!("CARGO_BIN_EXE_tilec")).args(["build", "--target", "sm_90a", "--no-ptxas", "--no-cache", "--verify", "-o"]).arg(&out).arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("past its edge") && err.contains("help: if `a`'s tiles may run past its extent"), "{err}");
}

/// The sm_90a and sm_100a PTX of `src` (no ptxas).
fn ptx(name: &str, src: &str) -> Vec<String> {
    use tilec::backend::Target;
    let opts = tilec::build::BuildOptions::ptx_only(Target::ALL.to_vec());
    let r = tilec::build::build_source(src, &format!("{name}.tile"), &opts).expect("builds");
    r.built.iter().map(|b| b.compiled.ptx.clone()).collect()
}

#[test]
fn compiled_code_traps_where_the_interpreter_stops() {
    // Where the interpreter stops (the tests above), the generated code executes `trap`; a
    // tensor declared `edge(zeros)` is never tested. (That the test fires on the GPU exactly
    // past the edge: `tests/gpu/edge_trap.tile` in scripts/h200-check.sh.)
    let traps = |name: &str, src: &str| ptx(name, src).iter().map(|p| p.contains("trap;")).collect::<Vec<_>>();
    assert_eq!(traps("padded", &copy(" edge(zeros)", " edge(zeros)", "")), [false, false]);
    assert_eq!(traps("load", &copy("", " edge(zeros)", "")), [true, true]);
    assert_eq!(traps("store", &copy(" edge(zeros)", "", "")), [true, true]);
    assert_eq!(traps("masked_store", &copy(" edge(zeros)", "", " where row_index(64, 1) + i0 < N")), [true, true]);
    // A masked store to a declared tensor: dropped, not tested.
    assert_eq!(traps("masked_padded", &copy(" edge(zeros)", " edge(zeros)", " where row_index(64, 1) + i0 < N")), [false, false]);
}
