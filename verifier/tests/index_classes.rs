//! The index classes argmax / argmin (issue 12, item 5): integer outputs through the gates and
//! the protocol, the tie rule (first index) and NaN rule (first NaN) pinned by tricks whose
//! failures are derived from the probes' own inputs.

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::inprocess::honest;
use kverify::candidate::Candidate;
use kverify::error_model::Precision;
use kverify::gates::cmp01_value::{ties, SEEDS};
use kverify::gates::exc01_probes::nonfinite_rows;
use kverify::gates::inputs::{gate_seed, generate, Dist};
use kverify::gates::{GateResult, Status};
use kverify::redteam::index_tricks::INDEX_PRECISION;
use kverify::redteam::tricks;
use kverify::references::index::{arg_extreme, ArgReduce};
use kverify::references::op_by_id;
use kverify::tensor::DType;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn gate(c: Arc<dyn Candidate>, id: &str) -> GateResult {
    let o = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec![id.into()]) };
    battery::run(c, None, &o).expect("battery").gates[0].clone()
}

fn trick(name: &str) -> Arc<dyn Candidate> {
    Arc::new((tricks().into_iter().find(|t| t.name == name).expect("trick").build)())
}

#[test]
fn last_index_on_ties_fails_cmp01_at_the_ties_probe_by_the_derived_distance() {
    let op = op_by_id("argmax").expect("argmax");
    let d = op.native();
    let x = ties(&op, &d, gate_seed("CMP-01", SEEDS + 1), DType::F32).expect("index class").reference[0].to_f64_vec();
    let n = d.get("N");
    // The trick answers the last index of the maximum, the reference the first; with a bound of
    // 0 every wrong index is an infinite ratio, so the report names the first wrong row.
    let (row0, first, want) = (0..d.get("R"))
        .map(|i| {
            let row = &x[i * n..(i + 1) * n];
            let first = arg_extreme(ArgReduce::Max, row);
            let last = row.iter().rposition(|&v| v == row[first]).expect("max");
            (i, first, (last - first) as f64)
        })
        .find(|r| r.2 > 0.0)
        .expect("a tie");
    let g = gate(trick("last_index_argmax"), "CMP-01");
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.starts_with("wrong at ties"), "{}", g.detail);
    assert_eq!((g.measured, g.bound), (Some(want), Some(0.0)), "{}", g.detail);
    assert!(g.detail.contains(&format!("at output 0 element {row0} (ref {:.4e})", first as f64)), "{}", g.detail);
    // The ordinary seeds have no ties at the maximum: the trick passes them (the probe decides).
    let plain = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["CMP-03".into()]) };
    assert_eq!(battery::run(trick("last_index_argmax"), None, &plain).expect("battery").gates[0].status, Status::Pass);
}

#[test]
fn skipping_nan_fails_exc01_once_per_row_whose_first_nan_is_not_its_first_element_alone() {
    let op = op_by_id("argmax").expect("argmax");
    let d = op.native();
    let n = d.get("N");
    // Wrong rows: those holding a NaN that are not all NaN (an all-NaN row answers 0 both ways);
    // the poison call (all NaN) and the partial shapes (no NaN) add none.
    let mut want = 0;
    let mut probes: Vec<Vec<f64>> = (0..2).map(|s| generate(&op, &d, Dist::NonFinite, gate_seed("EXC-01", s), DType::F32).reference[0].to_f64_vec()).collect();
    probes.push(nonfinite_rows(&op, &d, gate_seed("EXC-01", 2), DType::F32).reference[0].to_f64_vec());
    for x in &probes {
        for row in x.chunks(n) {
            if row.iter().any(|v| v.is_nan()) && !row.iter().all(|v| v.is_nan()) {
                want += 1;
            }
        }
    }
    assert!(want > 0);
    let g = gate(trick("nan_ignoring_argmax"), "EXC-01");
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(g.measured, Some(want as f64), "{}", g.detail);
    assert!(g.detail.contains(&format!("0 under-propagated, 0 over-propagated, 0 of the wrong class, {want} wrong indices")), "{}", g.detail);
}

#[test]
fn honest_index_mirrors_are_clean_and_a_float_declaration_fails_res01() {
    for id in ["argmax", "argmin"] {
        let op = op_by_id(id).expect("op");
        let o = Options { time_limit: Duration::from_secs(5), dims: None, gates: None };
        let r = battery::run(Arc::new(honest(&op, INDEX_PRECISION)), None, &o).expect("battery");
        assert_eq!(r.verdict, Verdict::Clean, "{}", battery::table(&r));
        let p2 = r.gates.iter().find(|g| g.id == "PRC-02").expect("PRC-02");
        assert_eq!((p2.status, p2.detail.as_str()), (Status::NotApplicable, format!("{id} compares and never accumulates (index output)").as_str()));
        let c1 = r.gates.iter().find(|g| g.id == "CMP-01").expect("CMP-01");
        assert_eq!((c1.measured, c1.bound), (Some(0.0), Some(0.0)), "{}", c1.detail);
        // The same arithmetic declaring an f32 output answers f32 indices: RES-01 names it.
        let g = gate(Arc::new(honest(&op, Precision::F32)), "RES-01");
        assert_eq!(g.status, Status::Fail, "{}", g.detail);
        assert!(g.detail.starts_with(&format!("{id} answers indices: the declared output must be i32 or i64, not f32")), "{}", g.detail);
    }
}

#[test]
fn int32_and_int64_indices_cross_the_protocol() {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/py");
    let pp = format!("{}:{}", tools.display(), std::env::var("PYTHONPATH").unwrap_or_default());
    let ok = std::process::Command::new("python3").env("PYTHONPATH", &pp).args(["-c", "import numpy"]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        eprintln!("SKIPPED: python3 with numpy not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("kverify-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::write(dir.join("cand.py"), "import numpy as np\ndef fwd32(x, d):\n    return np.argmin(x[0], axis=1).astype(np.int32)\n").expect("write");
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/kverify_worker.py");
    let m = serde_json::json!({
        "name": "argmin-i32", "op": "argmin",
        "precision": {"input": "f32", "accumulator": "f32", "output": "i32"},
        "command": ["python3", worker.display().to_string(), "--module", "cand.py", "--function", "fwd32"],
        "env": {"PYTHONPATH": pp}
    });
    std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
    let c = ExternalCandidate::new(Manifest::load(&dir.join("m.json")).expect("manifest"), Duration::from_secs(5), 2048);
    let op = op_by_id("argmin").expect("argmin");
    let d = op.native();
    let mut x = generate(&op, &d, Dist::Normal, 3, DType::F32).candidate;
    let out = c.forward(&d, &mut x).expect("call");
    assert_eq!(out.outputs[0].dtype(), DType::I32);
    let v = x[0].to_f64_vec();
    let want: Vec<f64> = v.chunks(d.get("N")).map(|r| arg_extreme(ArgReduce::Min, r) as f64).collect();
    assert_eq!(out.outputs[0].to_f64_vec(), want);
    // Judged: i32 declared, i32 answered; clean on the value gates and RES-01.
    let o = Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["CMP-01".into(), "EXC-01".into(), "RES-01".into()]) };
    let r = battery::run(Arc::new(c), None, &o).expect("battery");
    assert_eq!(r.verdict, Verdict::Clean, "{}", battery::table(&r));
}
