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
use kverify::candidate::tilec::{parse_binding, Executor, TilecCandidate};
use kverify::error_model::Precision;
use kverify::gates::Status;
use kverify::references::op_by_id;
use kverify::tensor::DType;

const PRECISION: Precision = Precision { input: DType::Bf16, accumulator: DType::F32, output: DType::Bf16 };

#[test]
fn gdn_fwd_is_judged_as_the_gdn_class_on_the_interpreter() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gdn_fwd.tile");
    let ex = Executor::InterpOperator { tilec: PathBuf::from(env!("CARGO_BIN_EXE_tilec")), source, operator: "gdn_fwd".into(), consts: vec!["K=64".into(), "V=64".into()] };
    let binding = parse_binding("q,k,v,g@f32,beta,s0@f32:o,ht").expect("binding");
    let cand = TilecCandidate::new("gdn", PRECISION, ex, binding, Duration::from_secs(120), 0).expect("candidate");
    let dims = op_by_id("gdn").expect("gdn").native().with("K", 64).with("V", 64);
    let opts = Options { time_limit: Duration::from_secs(120), dims: Some(dims), gates: None };
    let report = battery::run(Arc::new(cand), None, &opts).expect("battery");
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
