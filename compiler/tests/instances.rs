//! Kernel instances (`kernel name = base(param: elem, ...);`, `syntax::instance`): a copy of a
//! kernel with some tensor parameters of another element type, run by the interpreter and built
//! as a kernel of its own. The diagnostics of misuse are `tests/ui/instance.tile`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const SRC: &str = "\
// y = x * 1.1 + 0.3 over tiles of 16: f32 stored, or bf16 in the instance.
kernel affine(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(cdiv(N, 16)) {
    let i0 = program_id(0) * 16;
    store y[i0..+16] = load x[i0..+16] * 1.1 + 0.3;
}

kernel affine_bf16 = affine(y: bf16);
";

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("instances_{name}"))
}

fn tilec(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tilec")).args(args).output().unwrap()
}

/// The IR text (`tilec check --emit ir`) of the kernel of `file` whose header starts with
/// `head`, from its name to its body's last instruction.
fn kernel_ir(file: &std::path::Path, head: &str) -> String {
    let o = tilec(&["check", file.to_str().unwrap(), "--emit", "ir"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = format!("\n{}", String::from_utf8_lossy(&o.stdout));
    let text = out.split("\nkernel ").find(|s| s.starts_with(head)).unwrap_or_else(|| panic!("no kernel `{head}` in:{out}"));
    text.split("\n}").next().unwrap_or_default().to_string()
}

/// The instance stores what the base kernel computes, rounded once to bf16 (nearest even): its
/// output equals the base kernel's f32 output rounded, bit for bit, on 37 elements (a partial
/// last tile) whose products round in both directions.
#[test]
fn an_instance_stores_the_base_kernels_values_in_its_own_type() {
    let file = tmp("affine.tile");
    std::fs::write(&file, SRC).unwrap();
    let xs: Vec<f64> = (0..37).map(|i| f64::from(i) * 0.37 - 5.0).collect();
    let inp = tmp("in.safetensors");
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), HostTensor::from_f64(DType::F32, vec![37], &xs).unwrap())])).unwrap();
    let mut outs = vec![];
    for k in ["affine", "affine_bf16"] {
        let out = tmp(&format!("{k}.out.safetensors"));
        let o = tilec(&["run", "--interp", file.to_str().unwrap(), "--kernel", k, "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{k}: {}", String::from_utf8_lossy(&o.stderr));
        outs.push(tilec_abi::st::read(&out).unwrap().remove("y").unwrap());
    }
    let (f, b) = (&outs[0], &outs[1]);
    assert_eq!((f.dtype, b.dtype), (DType::F32, DType::Bf16));
    let want: Vec<f64> = f.to_f64().iter().map(|&v| f64::from(half::bf16::from_f32(v as f32))).collect();
    assert_eq!(b.to_f64(), want);
    assert_ne!(b.to_f64(), f.to_f64(), "the inputs must make the rounding visible");
}

/// Built, the instance is one more kernel: its own artifacts, its parameter `y` bf16 in the
/// metadata, `x` as the base kernel's.
#[test]
fn an_instance_is_built_as_a_kernel_of_its_own() {
    let file = tmp("build.tile");
    std::fs::write(&file, SRC).unwrap();
    let dir = tmp("build_out");
    let _ = std::fs::remove_dir_all(&dir);
    let o = tilec(&["build", file.to_str().unwrap(), "--target", "sm_90a", "--no-ptxas", "--no-cache", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("affine_bf16.sm_90a.meta.json")).unwrap()).unwrap();
    let dtype = |n: &str| meta["params"].as_array().unwrap().iter().find(|p| p["name"] == n).map(|p| p["dtype"].clone()).unwrap();
    assert_eq!((dtype("x"), dtype("y")), (serde_json::json!("f32"), serde_json::json!("bf16")));
    assert!(dir.join("affine.sm_90a.meta.json").exists());
}

/// A mistake an instance's retyping causes is reported once per instance, at the base kernel's
/// text with a label on the instance; one the base kernel has itself (and its lints) once, for
/// the base; a launch of a refused instance is not reported again.
#[test]
fn diagnostics_are_attributed_to_the_instance_that_causes_them() {
    let src = "\
kernel scaled(x: f32[N] edge(zeros), y: out f32[N] edge(zeros)) grid(cdiv(N, 16)) {
    let unused = 3;
    store y[program_id(0) * 16..+16] = load x[program_id(0) * 16..+16] * 2.0;
}
kernel as_int = scaled(y: i32);
kernel as_int2 = scaled(y: i32);
kernel as_bf16 = scaled(y: bf16);
kernel refused = scaled(y: f64);
operator op(x: f32[N], y: out f32[N]) {
    refused(x, y);
}
";
    let file = tmp("attributed.tile");
    std::fs::write(&file, src).unwrap();
    let o = tilec(&["check", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // Two retypings to i32 (one error each, labelled), the unknown type (one), nothing for the
    // launch of the refused instance; the unused binding warned once, for the base.
    assert!(err.contains("3 errors, 1 warning"), "{err}");
    assert_eq!(err.matches("storing f32 into a i32 tensor").count(), 2, "{err}");
    for name in ["as_int", "as_int2"] {
        assert!(err.contains(&format!("in instance `{name}` of `scaled`, whose retyping causes this")), "{err}");
    }
    assert!(!err.contains("in instance `as_bf16`"), "{err}");
    assert!(!err.contains("no kernel or operator `refused`"), "{err}");
}

// z = Σ_j x xᵀ... over a loop of products, y elementwise; `only_y` drops z.
const DROP_SRC: &str = "\
kernel two(x: bf16[N, 64] edge(zeros), y: out f32[N, 64] edge(zeros), z: out f32[N, 64] edge(zeros)) grid(cdiv(N, 64)) threads(128) {
    let r0 = program_id(0) * 64;
    let a: smem = load x[r0..+64, :];
    let mut acc: tmem f32[64, 64] = zeros(64, 64);
    for j in 0..2 {
        let b: smem = load x[r0..+64, :];
        acc += a @ b;
    }
    store y[r0..+64, :] = a * 2.0 + 0.25;
    store z[r0..+64, :] = acc;
}

kernel only_y = two(z: none);
";

/// `param: none` drops an output: the instance has no `z`, no loop, no product and no second
/// copy of `x` (dead-code elimination, `passes::dce`), and its `y` is the base kernel's, bit for
/// bit, on the interpreter; built, its metadata lists `x` and `y` only and its PTX has no wgmma.
#[test]
fn a_dropped_output_goes_with_the_code_that_only_fed_it() {
    let file = tmp("drop.tile");
    std::fs::write(&file, DROP_SRC).unwrap();
    let (base, inst) = (kernel_ir(&file, "two("), kernel_ir(&file, "only_y("));
    for (text, want) in [(&base, 1), (&inst, 0)] {
        assert_eq!(text.matches(" mma ").count(), want, "{text}");
        assert_eq!(text.matches(" for ").count(), want, "{text}");
        assert_eq!(text.matches(" = load ").count(), 1 + want, "{text}");
        assert_eq!(text.matches(" store ").count(), 1 + want, "{text}");
    }
    assert!(inst.starts_with("only_y(p0 x: bf16[N, 64] edge(zeros), p1 y: out f32[N, 64] edge(zeros))\n"), "{inst}");

    // 100 rows: a partial second tile.
    let xs: Vec<f64> = (0..100 * 64).map(|i| f64::from(i % 37) * 0.125 - 2.0).collect();
    let inp = tmp("drop_in.safetensors");
    tilec_abi::st::write(&inp, &BTreeMap::from([("x".to_string(), HostTensor::from_f64(DType::Bf16, vec![100, 64], &xs).unwrap())])).unwrap();
    let mut outs = vec![];
    for k in ["two", "only_y"] {
        let out = tmp(&format!("drop_{k}.out.safetensors"));
        let o = tilec(&["run", "--interp", file.to_str().unwrap(), "--kernel", k, "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{k}: {}", String::from_utf8_lossy(&o.stderr));
        outs.push(tilec_abi::st::read(&out).unwrap());
    }
    assert!(outs[0].contains_key("z") && !outs[1].contains_key("z"));
    let y: Vec<f64> = xs.iter().map(|&v| f64::from(half::bf16::from_f64(v).to_f32() * 2.0 + 0.25)).collect();
    assert_eq!(outs[0]["y"].to_f64(), y);
    assert_eq!(outs[1]["y"].to_f64(), y);

    let dir = tmp("drop_out");
    let _ = std::fs::remove_dir_all(&dir);
    let o = tilec(&["build", file.to_str().unwrap(), "--target", "sm_90a", "--no-ptxas", "--no-cache", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("only_y.sm_90a.meta.json")).unwrap()).unwrap();
    let names: Vec<&str> = meta["params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["x", "y", "N"]); // N: the size argument
    let ptx = |k: &str| std::fs::read_to_string(dir.join(format!("{k}.sm_90a.ptx"))).unwrap();
    assert!(ptx("two").contains("wgmma.mma_async"));
    assert!(!ptx("only_y").contains("wgmma"));
}

// y = a + b · s[row block]; `no_b` declares b all zeros.
const ZERO_SRC: &str = "\
kernel comb(a: f32[N, 16] edge(zeros), b: bf16[N, 16] edge(zeros), s: f32[N], y: out f32[N, 16] edge(zeros)) grid(cdiv(N, 64)) threads(128) {
    let r0 = program_id(0) * 64;
    store y[r0..+64, :] = load a[r0..+64, :] + load b[r0..+64, :] * load s[r0];
}

kernel no_b = comb(b: zeros);
";

/// `param: zeros` removes an input whose every element is 0: the instance has no `b`, no load of
/// it, and its `y` is bitwise the base kernel's run with `b` = 0 — signed zeros included: the
/// zero takes part in the arithmetic (`−0.0 + 0 · s` is +0.0 for s > 0), it is not folded away.
#[test]
fn a_zeroed_input_reads_zeros_without_a_parameter() {
    let file = tmp("zeros.tile");
    std::fs::write(&file, ZERO_SRC).unwrap();
    let inst = kernel_ir(&file, "no_b(");
    assert!(inst.starts_with("no_b(p0 a: f32[N, 16] edge(zeros), p1 s: f32[N], p2 y: out f32[N, 16] edge(zeros))\n"), "{inst}");
    assert_eq!(inst.matches(" = load ").count(), 2, "{inst}");

    // 100 rows (a partial second tile); a holds −0.0 and values of both signs, s both signs.
    let a: Vec<f64> = (0..100 * 16).map(|i| if i % 7 == 0 { -0.0 } else { f64::from(i % 23) * 0.5 - 5.0 }).collect();
    let s: Vec<f64> = (0..100).map(|i| f64::from(i) - 50.5).collect();
    let tensors = |b: bool| {
        let mut m = BTreeMap::from([("a".to_string(), HostTensor::from_f64(DType::F32, vec![100, 16], &a).unwrap()), ("s".to_string(), HostTensor::from_f64(DType::F32, vec![100], &s).unwrap())]);
        if b {
            m.insert("b".to_string(), HostTensor::from_f64(DType::Bf16, vec![100, 16], &[0.0; 1600]).unwrap());
        }
        m
    };
    let mut ys = vec![];
    for (k, with_b) in [("comb", true), ("no_b", false)] {
        let inp = tmp(&format!("zeros_{k}.in.safetensors"));
        tilec_abi::st::write(&inp, &tensors(with_b)).unwrap();
        let out = tmp(&format!("zeros_{k}.out.safetensors"));
        let o = tilec(&["run", "--interp", file.to_str().unwrap(), "--kernel", k, "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{k}: {}", String::from_utf8_lossy(&o.stderr));
        ys.push(tilec_abi::st::read(&out).unwrap().remove("y").unwrap());
    }
    let bits = |t: &HostTensor| t.to_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&ys[0]) == bits(&ys[1]), "the instance's y differs from the base kernel's with b = 0");
    // Each y is a + 0 · s[r0] (r0 the first row of its CTA's 64): a, except that −0.0 + 0 · s is
    // +0.0 where s > 0 (0 · s = +0.0).
    let want: Vec<u64> = a.iter().enumerate().map(|(i, &v)| (v + 0.0 * s[i / 16 / 64 * 64]).to_bits()).collect();
    assert!(bits(&ys[1]) == want, "y is not a + 0 · s");
    assert!(want.contains(&(-0.0f64).to_bits()) && a.iter().zip(&want).any(|(v, w)| v.to_bits() != *w), "the inputs must show the zero's sign rule");
}

/// An instance that drops the only matrix product of a kernel that keeps tensor memory builds the
/// same sm_100a PTX as the kernel written without it (no MMA mbarrier left behind by a removed
/// instruction), and `tilec check` warns about nothing in it (the base kernel's lints cover its
/// body; an unread accumulator the instance leaves is removed, not wasted).
#[test]
fn a_dropped_product_leaves_nothing_behind() {
    let src = "\
kernel two(x: bf16[N, 64] edge(zeros), y: out f32[N, 64] edge(zeros), z: out f32[N, 64] edge(zeros)) grid(cdiv(N, 64)) threads(128) {
    let r0 = program_id(0) * 64;
    let a: smem = load x[r0..+64, :];
    let mut t: tmem f32[64, 64] = zeros(64, 64);
    t = t + a;
    let mut acc: tmem f32[64, 64] = zeros(64, 64);
    let c0 = 0;
    acc += a @ a;
    store y[r0..+64, :] = t;
    store z[r0..+64, c0..+64] = acc;
}
kernel only_y = two(z: none);
kernel hand(x: bf16[N, 64] edge(zeros), y: out f32[N, 64] edge(zeros)) grid(cdiv(N, 64)) threads(128) {
    let r0 = program_id(0) * 64;
    let a: smem = load x[r0..+64, :];
    let mut t: tmem f32[64, 64] = zeros(64, 64);
    t = t + a;
    store y[r0..+64, :] = t;
}
";
    let file = tmp("product.tile");
    std::fs::write(&file, src).unwrap();
    let o = tilec(&["check", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("0 warnings"), "{err}");
    let dir = tmp("product_out");
    let _ = std::fs::remove_dir_all(&dir);
    let o = tilec(&["build", file.to_str().unwrap(), "--target", "sm_100a", "--no-ptxas", "--no-cache", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ptx = |k: &str| std::fs::read_to_string(dir.join(format!("{k}.sm_100a.ptx"))).unwrap();
    assert!(ptx("two").contains("mbarrier.init"));
    let body = |k: &str| ptx(k).split_once(&format!(".entry {k}(")).map(|(_, b)| b.replace(k, "KERNEL")).unwrap();
    assert_eq!(body("only_y"), body("hand"));
}
