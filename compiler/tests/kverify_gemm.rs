//! `dsl-examples/gemm.tile` judged by kverify as a `matmul` candidate on tilec's CPU
//! interpreter (this package's `tilec` binary, run by kverify as a subprocess), with the declared
//! precision bf16 inputs / f32 accumulation / f32 output, at kverify's own matmul shapes
//! (native 64x64x64; CMP-03 up to its envelope, M or N = 4096, K = 8192: the kernel masks
//! partial tiles). RES-02 judges the metadata of the same kernel built for sm_100a.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kverify::battery::{self, Options, Verdict};
use kverify::candidate::tilec::{default_binding, parse_binding, Binding, Executor, TilecCandidate};
use kverify::error_model::Precision;
use kverify::gates::res02_compile::load_meta;
use kverify::gates::Status;
use kverify::tensor::DType;
use tilec::backend::Target;
use tilec::build::{build_file, BuildOptions};

/// bf16 operands, fp32 accumulation, fp32 result: what gemm.tile declares (`c: out f32`).
const PRECISION: Precision = Precision::new(DType::Bf16, DType::F32, DType::F32);

fn gemm_tile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gemm.tile")
}

fn candidate(binding: Binding) -> TilecCandidate {
    let ex = Executor::Interp { tilec: PathBuf::from(env!("CARGO_BIN_EXE_tilec")), source: gemm_tile(), kernel: Some("gemm".into()) };
    TilecCandidate::new("matmul", PRECISION, ex, binding, Duration::from_secs(60), 0).expect("candidate")
}

#[test]
fn gemm_tile_is_a_clean_matmul_on_the_interpreter() {
    let dir = std::env::temp_dir().join(format!("kverify-gemm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = BuildOptions { out_dir: Some(dir.clone()), ptxas: true, ..BuildOptions::ptx_only(vec![Target::Sm100a]) };
    build_file(&gemm_tile(), &opts).expect("gemm.tile builds");
    let meta = load_meta(&dir.join("gemm.sm_100a.meta.json")).expect("metadata");

    let cand = candidate(default_binding("matmul").expect("binding"));
    let opts = Options { time_limit: Duration::from_secs(60), dims: None, gates: None };
    let report = battery::run(Arc::new(cand), Some(&meta), &opts).expect("battery");
    let table = battery::table(&report);
    eprintln!("{table}");
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(report.kind, "tilec-interp");
    assert_eq!(report.gates.len(), 12);
    for g in &report.gates {
        let want = match g.id {
            "CMP-02" => Status::NotApplicable, // the kernel has no backward
            _ => Status::Pass,
        };
        assert_eq!(g.status, want, "{}: {}\n{table}", g.id, g.detail);
        if !g.tolerance_free && g.status == Status::Pass {
            // A thresholded pass carries its figure, bound and margin (fairness rule 4).
            let (m, b, r) = (g.measured.expect("measured"), g.bound.expect("bound"), g.margin.expect("margin"));
            assert!(m <= b && r >= 1.0, "{}: {m} vs {b}", g.id);
        }
    }
    let cmp03 = report.gates.iter().find(|g| g.id == "CMP-03").expect("CMP-03");
    // The 7 edge shapes (minimum, odd, ×2, ...) and each dimension just past every power of two
    // up to its envelope (2^k + 1): all run, none declined or skipped.
    let shapes: usize = cmp03.detail.split(" shapes ok").next().and_then(|n| n.parse().ok()).expect("a shape count");
    assert!(shapes > 7 && cmp03.detail.contains("(past 2^"), "{}", cmp03.detail);
    assert!(cmp03.detail.contains("declined past the envelope: none") && cmp03.detail.contains("skipped: none"), "{}", cmp03.detail);
    let res02 = report.gates.iter().find(|g| g.id == "RES-02").expect("RES-02");
    assert!(res02.detail.starts_with("gemm (sm_100a): TMEM 256 cols"), "{}", res02.detail); // BN = 256 f32 columns
    assert_eq!(report.verdict, Verdict::Clean, "{table}");
}

#[test]
fn swapped_operands_are_caught() {
    // Binding A to `b` and B to `a` computes B @ A at the square native shape: a wrong value,
    // never a pass. Only CMP-01 runs (keeps the test short).
    let cand = candidate(parse_binding("b,a:c").expect("binding"));
    let opts = Options { time_limit: Duration::from_secs(60), dims: None, gates: Some(vec!["CMP-01".into()]) };
    let report = battery::run(Arc::new(cand), None, &opts).expect("battery");
    let g = &report.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.margin.expect("margin") < 1e-2, "{}", g.detail);
    assert_eq!(report.verdict, Verdict::Violation);
}

#[test]
fn a_wrong_output_name_is_a_protocol_error_not_a_value_error() {
    let cand = candidate(parse_binding("a,b:d").expect("binding"));
    let opts = Options { time_limit: Duration::from_secs(60), dims: None, gates: Some(vec!["CMP-01".into()]) };
    let report = battery::run(Arc::new(cand), None, &opts).expect("battery");
    let g = &report.gates[0];
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert!(g.detail.contains("kernel wrote no output `d` (it wrote: c)"), "{}", g.detail);
}
