//! `dsl-examples/gdn_fwd.tile`'s `gdn_fwd` operator judged by kverify as the `gdn` recurrence
//! class on tilec's CPU interpreter (`tilec run --interp --operator`, this package's binary),
//! through every gate, at K = V = 64 (the operator's declared sizes are K, V ∈ {64, 128}) and the
//! class's other native dims. The binding widens g and s0 to the operator's f32 parameters and
//! the class passes its scale K^-0.5.
//!
//! What it shows, derived rather than copied: the interpreter is deterministic and propagates
//! non-finite values as the reference does; the operator's error is at the level of bf16 storage
//! (below u_bf16 = 2^-8) but above the bound of the bf16-in / f32-accumulate / bf16-out model,
//! because it keeps w, u and the chunk states in bf16 between kernels (fla's layout, gdn-math.md
//! §3) — a model kverify does not have yet. Its final state is f32 (as fla returns it) under
//! the bf16 output declaration, which the class allows (`Op::wide_outputs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kverify::battery::{self, Options};
use kverify::candidate::tilec::{parse_binding, BackwardOperator, Executor, TilecCandidate};
use kverify::error_model::Precision;
use kverify::gates::Status;
use kverify::references::op_by_id;
use kverify::tensor::DType;

const PRECISION: Precision = Precision::new(DType::Bf16, DType::F32, DType::Bf16);

/// The rounding points to bf16 of `operator` at K = V = 64, as `tilec build --verify` counts
/// them from the IR.
fn rounding_points(source: &Path, operator: &str) -> u32 {
    let src = std::fs::read_to_string(source).expect("source");
    let mut opts = tilec::frontend::Options::default().for_file(source);
    opts.size_values = [("K".to_string(), 64), ("V".to_string(), 64)].into_iter().collect();
    let checked = tilec::frontend::check_source(&src, &opts);
    let op = checked.module.operators.iter().find(|o| o.name == operator).expect("operator");
    let (r, u) = tilec::verify::rounding_points(&checked.module, op);
    assert_eq!(u, DType::Bf16.unit_roundoff());
    r as u32
}

/// `gdn_fwd.tile`'s gdn_fwd at K = V = 64 as a `gdn` candidate declared with `precision`.
fn forward_candidate(precision: Precision) -> TilecCandidate {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gdn_fwd.tile");
    let ex = Executor::InterpOperator { tilec: PathBuf::from(env!("CARGO_BIN_EXE_tilec")), source, operator: "gdn_fwd".into(), consts: vec!["K=64".into(), "V=64".into()] };
    let binding = parse_binding("q,k,v,g@f32,beta,s0@f32:o,ht").expect("binding");
    TilecCandidate::new("gdn", precision, ex, binding, Duration::from_secs(300), 0).expect("candidate")
}

/// The battery on `cand` at the class's native dims with K = V = 64 (`gates`: all when None).
fn battery_at_k64(cand: TilecCandidate, gates: Option<Vec<String>>) -> kverify::battery::Report {
    let dims = op_by_id("gdn").expect("gdn").native().with("K", 64).with("V", 64);
    let opts = Options { time_limit: Duration::from_secs(300), dims: Some(dims), gates };
    battery::run(Arc::new(cand), None, &opts).expect("battery")
}

fn judge(precision: Precision) -> kverify::battery::Report {
    battery_at_k64(forward_candidate(precision), None)
}

#[test]
fn gdn_fwd_is_judged_as_the_gdn_class_on_the_interpreter() {
    let report = judge(PRECISION);
    let table = battery::table(&report);
    eprintln!("{table}");
    assert_eq!(report.kind, "tilec-interp");
    assert_eq!(report.gates.len(), 12, "{table}");
    let gate = |id: &str| report.gates.iter().find(|g| g.id == id).unwrap_or_else(|| panic!("{id} missing\n{table}"));
    for id in ["ORD-02", "EXC-01"] {
        assert_eq!(gate(id).status, Status::Pass, "{id}: {}\n{table}", gate(id).detail);
    }
    for id in ["CMP-02", "RES-02"] {
        assert_eq!(gate(id).status, Status::NotApplicable, "{id}: {}", gate(id).detail); // forward-only; no metadata
    }
    let cmp = gate("CMP-01");
    let (m, b) = (cmp.measured.expect("measured"), cmp.bound.expect("bound"));
    assert_eq!(cmp.status, Status::Fail, "{table}");
    assert!(m > b && m < DType::Bf16.unit_roundoff(), "CMP-01 {m} vs bound {b}: not at bf16-storage level\n{table}");
    // The final state comes back f32 (as fla returns it) under a bf16 output declaration: the
    // class allows that output to be wider.
    assert_eq!(gate("RES-01").status, Status::Pass, "{table}");
}

/// Declared with its intermediate storage — R roundings to bf16, counted by the compiler from
/// the operator's IR — the same operator is judged under the bound that includes them
/// (kverify's error model, "Intermediate storage").
#[test]
fn gdn_fwd_with_its_intermediate_storage_declared() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gdn_fwd.tile");
    let r = rounding_points(&source, "gdn_fwd");
    assert!(r > 0);
    let report = judge(PRECISION.storing(DType::Bf16, r));
    let table = battery::table(&report);
    eprintln!("R = {r}\n{table}");
    let gate = |id: &str| report.gates.iter().find(|g| g.id == id).unwrap_or_else(|| panic!("{id} missing\n{table}"));
    assert_eq!(gate("CMP-01").status, Status::Pass, "{table}");
}

/// The same class judged with a backward: `gdn.tile`'s `gdn_bwd` operator computes the input
/// gradients from the inputs and the output gradients (do, and the final state's as dht), so
/// CMP-02 compares them with the oracle's exact backward at the native and CMP-03 shapes, and
/// ORD-02 repeats the backward too. The gradients come back f32 (fla's dg, dβ, ds0 are f32 as
/// well) under the bf16 output declaration: the bound's output term is then the wider one.
fn judge_with_backward(precision: Precision) -> kverify::battery::Report {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gdn.tile");
    let backward = BackwardOperator {
        executor: Executor::InterpOperator { tilec: PathBuf::from(env!("CARGO_BIN_EXE_tilec")), source, operator: "gdn_bwd".into(), consts: vec!["K=64".into(), "V=64".into()] },
        binding: parse_binding("q,k,v,g@f32,beta,s0@f32,do,dht@f32:dq,dk,dv,dg,dbeta,ds0").expect("backward binding"),
    };
    let cand = forward_candidate(precision).with_backward(backward).expect("backward");
    battery_at_k64(cand, Some(vec!["CMP-02".into(), "ORD-02".into()]))
}

#[test]
fn gdn_bwd_is_judged_as_the_backward_of_the_gdn_class() {
    let report = judge_with_backward(PRECISION);
    let table = battery::table(&report);
    eprintln!("{table}");
    let gate = |id: &str| report.gates.iter().find(|g| g.id == id).unwrap_or_else(|| panic!("{id} missing\n{table}"));
    // Repeated forward and backward, one run in a fresh process: bitwise the same.
    assert_eq!(gate("ORD-02").status, Status::Pass, "{table}");
    assert!(gate("ORD-02").detail.contains("backward"), "{table}");
    // The gradients are compared, at bf16-storage level like the forward's outputs.
    let cmp = gate("CMP-02");
    assert_ne!(cmp.status, Status::NotApplicable, "{table}");
    let m = cmp.measured.expect("measured");
    assert!(m.is_finite() && m < DType::Bf16.unit_roundoff(), "CMP-02 {m}: not at bf16-storage level\n{table}");
}
