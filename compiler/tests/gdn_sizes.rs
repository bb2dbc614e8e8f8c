//! Head sizes of `dsl-examples/gdn.tile`: K ∈ {64, 128} and V ∈ {64, 128, 256} are size
//! parameters (`const K = 128 in {64, 128};`) chosen at build time with `--const`, applied to
//! every imported file; other sizes are refused at build time (E0207) and at run time (the plan
//! names the size parameter).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use tilec::diag::Code;
use tilec::frontend::{check_file, check_source, Checked, Options};
use tilec::verify::verify_operator;

fn examples() -> PathBuf {
    PathBuf::from(format!("{}/../dsl-examples", env!("CARGO_MANIFEST_DIR")))
}

fn with_sizes(k: i64, v: i64) -> Options {
    Options { size_values: BTreeMap::from([("K".to_string(), k), ("V".to_string(), v)]), ..Options::default() }
}

/// The shape texts of a parameter.
fn shape_of(p: &tilec::ir::ParamData, text: impl Fn(&tilec::ir::SizeExpr) -> String) -> Vec<String> {
    match &p.kind {
        tilec::ir::ParamKind::Tensor { shape, .. } => shape.iter().map(text).collect(),
        tilec::ir::ParamKind::Scalar(_) => vec![],
    }
}

fn check_gdn(k: i64, v: i64) -> Checked {
    let (_, c) = check_file(&examples().join("gdn.tile"), &with_sizes(k, v)).expect("read");
    c
}

/// Every supported (K, V) passes every check and planner of both targets (shared-memory and
/// TMEM budgets included), and the kernels' shapes follow the values given.
#[test]
fn every_supported_head_size_checks_for_both_targets() {
    let (_, default) = check_file(&examples().join("gdn.tile"), &Options::default()).unwrap();
    let all = default.module.kernels.len();
    assert!(all > 20);
    for k in [64, 128] {
        for v in [64, 128, 256] {
            let c = check_gdn(k, v);
            let errors: Vec<String> = c.diags.iter().map(|d| format!("{}: {}", d.code.as_str(), d.message)).collect();
            assert!(c.ok(), "K={k} V={v}: {errors:?}");
            // Every kernel of the graph (K#1, K#2 and the channel stages are imported) planned for both targets.
            assert_eq!(c.module.kernels.len(), all, "K={k} V={v}");
            assert!(c.target_plans.iter().all(|t| t.len() == 2));
            let op = c.module.operators.iter().find(|o| o.name == "gdn_bwd").unwrap();
            let dims = |name: &str| shape_of(op.params.iter().find(|p| p.name == name).unwrap(), |s| op.size_text(s));
            assert_eq!(dims("k").last().unwrap(), &k.to_string());
            assert_eq!(dims("v").last().unwrap(), &v.to_string());
            assert_eq!(dims("ds0")[2..], [k.to_string(), v.to_string()]);
            let sp: Vec<(String, i64)> = c.size_params.iter().map(|p| (p.name.clone(), p.value)).collect();
            assert!(sp.contains(&("K".into(), k)) && sp.contains(&("V".into(), v)));
            // The plan records which dimensions each size parameter sets.
            assert!(op.size_param_dims.contains(&("K".into(), "q".into(), 3)) && op.size_param_dims.contains(&("V".into(), "do".into(), 3)), "{:?}", op.size_param_dims);
        }
    }
}

/// The smallest key and largest value size — both different from the default — verified on the
/// interpreter against the fp64 oracle at every case, for the scalar-gate member (GDN) and the
/// per-channel one whose K#2 blocks its V loop (KDA).
#[test]
fn gdn_and_kda_at_k64_v256_are_within_their_bounds() {
    let c = check_gdn(64, 256);
    assert!(c.ok());
    for name in ["gdn_bwd", "kda_bwd"] {
        let op = c.module.operators.iter().find(|o| o.name == name).unwrap();
        let verdict = verify_operator(&c.module, op, &tilec::interp::Options::default()).expect("verify runs");
        // Seven dense cases (the varlen one needs cu_seqlens) × six gradients.
        assert_eq!(verdict.judgements.len(), 42, "{name}");
        for j in &verdict.judgements {
            assert!(j.ok(), "{name} {} {}: {:e} > {:e}", j.case, j.output, j.error, j.bound);
        }
    }
}

/// Unsupported and unknown `--const` values are refused at build time, in the file that
/// declares the parameter and in each file that imports it.
#[test]
fn unsupported_sizes_are_refused_at_build_time() {
    let c = check_gdn(96, 128);
    assert!(!c.ok());
    let refused: Vec<_> = c.diags.iter().filter(|d| d.code == Code::UnsupportedSize).collect();
    assert_eq!(refused.len(), 1, "{:?}", c.diags.iter().map(|d| &d.message).collect::<Vec<_>>());
    assert!(refused[0].message.contains("`--const K=96`: 96 is not a supported size of `K`"));
    assert!(refused[0].notes.iter().any(|n| n.contains("--const K=64, --const K=128")));
    // One mistake, one diagnostic: the imports that refuse the same value are not reported again.
    assert!(c.diags.iter().all(|d| d.code != Code::BadImport), "{:?}", c.diags.iter().map(|d| &d.message).collect::<Vec<_>>());
    let (_, c) = check_file(&examples().join("gdn.tile"), &Options { size_values: BTreeMap::from([("Q".into(), 1)]), ..Options::default() }).unwrap();
    let d = c.diags.iter().find(|d| d.code == Code::UnsupportedSize).expect("unknown name refused");
    assert!(d.message.contains("no size parameter `Q`") && d.message.contains("K, V"), "{}", d.message);
    let (_, c) = check_file(&examples().join("gdn.tile"), &Options { size_values: BTreeMap::from([("C".into(), 32)]), ..Options::default() }).unwrap();
    assert!(c.diags.iter().any(|d| d.code == Code::UnsupportedSize && d.message.contains("`C` is a constant, not a size parameter")));
}

/// A `--const` value reaches an imported file: the importer's operator and the imported kernel
/// agree on the size (a mismatch would be an E0302 at the launch), and a file that declares the
/// name without a set refuses it rather than keeping its own size.
#[test]
fn a_size_parameter_applies_across_imports() {
    let dir = std::env::temp_dir().join(format!("tilec-size-params-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lib.tile"), "const D = 32 in {16, 32};\nkernel copy(x: f32[N, D], y: out f32[N, D]) grid(cdiv(N, 16)) {\n    let r = program_id(0) * 16;\n    store y[r..+16, :] = load x[r..+16, :];\n}\n").unwrap();
    let main = "import \"lib.tile\";\nconst D = 32 in {16, 32};\noperator op(x: f32[N, D], y: out f32[N, D]) {\n    copy(x, y);\n}\n";
    let path = dir.join("main.tile");
    std::fs::write(&path, main).unwrap();
    let opts = |d: i64| Options { size_values: BTreeMap::from([("D".into(), d)]), ..Options::default() }.for_file(&path);
    for d in [16, 32] {
        let c = check_source(main, &opts(d));
        assert!(c.ok(), "D={d}: {:?}", c.diags.iter().map(|x| &x.message).collect::<Vec<_>>());
        let k = c.module.kernels.iter().find(|k| k.name == "copy").unwrap();
        assert_eq!(shape_of(k.params.values().next().unwrap(), |s| k.size_text(s)), ["N".to_string(), d.to_string()]);
    }
    // An import that declares other sizes (or another default) is refused: one set per graph.
    for decl in ["const D = 32 in {32};", "const D = 16 in {16, 32};"] {
        std::fs::write(dir.join("lib.tile"), format!("{decl}\nkernel copy(x: f32[N, D], y: out f32[N, D]) grid(cdiv(N, 16)) {{\n    let r = program_id(0) * 16;\n    store y[r..+16, :] = load x[r..+16, :];\n}}\n")).unwrap();
        let c = check_source(main, &Options::default().for_file(&path));
        assert!(c.diags.iter().any(|d| d.code == Code::UnsupportedSize && d.message.contains("size parameter `D` is declared with different sizes") && d.message.contains("lib.tile")), "{decl}: {:?}", c.diags.iter().map(|x| &x.message).collect::<Vec<_>>());
    }
    std::fs::write(dir.join("lib.tile"), "const D = 32;\nkernel copy(x: f32[N, D], y: out f32[N, D]) grid(cdiv(N, 16)) {\n    let r = program_id(0) * 16;\n    store y[r..+16, :] = load x[r..+16, :];\n}\n").unwrap();
    let c = check_source(main, &opts(16));
    assert!(c.diags.iter().any(|d| d.code == Code::BadImport && d.notes.iter().any(|n| n.contains("`D` is a constant, not a size parameter"))));
    std::fs::remove_dir_all(&dir).ok();
}

/// `tilec build --const` writes plans that record the size parameters; the CLI refuses an
/// unsupported value with exit 1 and the set in the help.
#[test]
fn the_cli_builds_a_variant_and_records_it_in_the_plan() {
    let out = std::env::temp_dir().join(format!("tilec-size-cli-{}", std::process::id()));
    let tilec = || Command::new(env!("CARGO_BIN_EXE_tilec"));
    let r = tilec().args(["build", "--target", "sm_90a", "--no-ptxas", "--const", "K=64,V=256", "-o"]).arg(&out).arg(examples().join("gdn.tile")).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let plan = tilec_abi::plan::OperatorPlan::from_json(&std::fs::read_to_string(out.join("gdn_bwd.sm_90a.plan.json")).unwrap()).unwrap();
    let k = plan.size_params.iter().find(|s| s.name == "K").unwrap();
    assert_eq!((k.value, k.supported.as_slice()), (64, &[64, 128][..]));
    assert!(k.dims.contains(&"q[3]".to_string()) && k.dims.contains(&"k[3]".to_string()));
    let v = plan.size_params.iter().find(|s| s.name == "V").unwrap();
    assert_eq!((v.value, v.supported.as_slice()), (256, &[64, 128, 256][..]));
    // A name given twice with two values is a usage error (exit 2), not "the last one wins".
    let r = tilec().args(["check", "--const", "K=96", "--const", "K=64"]).arg(examples().join("gdn.tile")).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("`--const K` is given twice, as 96 and 64"));
    let r = tilec().args(["build", "--no-ptxas", "--const", "V=512", "-o"]).arg(&out).arg(examples().join("gdn.tile")).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E0207]: `--const V=512`: 512 is not a supported size of `V`") && err.contains("--const V=256"), "{err}");
    std::fs::remove_dir_all(&out).ok();
}
