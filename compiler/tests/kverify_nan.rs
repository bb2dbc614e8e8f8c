//! kverify's EXC-01 (non-finite propagation) judges a row-max kernel written in the DSL, through
//! `kverify`'s tilec candidate on the interpreter (`--tilec-kernel`): with `max`/`row_max`, which
//! propagate NaN, the gate passes; the same kernel written with `fmax` (NaN-ignoring) fails it —
//! the ReLU/row-max class of bug a DSL with NaN-dropping `max` would invite.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kverify::battery::{self, Options};
use kverify::candidate::tilec::{default_binding, Executor, TilecCandidate};
use kverify::error_model::Precision;
use kverify::gates::Status;
use kverify::tensor::DType;

/// y[R] = max over N of x[R, N], 32 rows per CTA, N in chunks of 64; the partial last chunk is
/// masked to −inf (out-of-bounds loads read 0, which would win over negative rows). `combine`
/// (`max` or `fmax`) folds the chunks' row maxima: the builtin under test.
fn row_max_src(combine: &str) -> String {
    format!(
        "kernel row_max(x: f32[R, N] edge(zeros), c: out f32[R] edge(zeros)) grid(cdiv(R, 32)) threads(128) {{
    let r0 = program_id(0) * 32;
    let ninf = 0.0 - exp2(1000.0);
    let mut m: reg f32[32, 1] = full(32, 1, ninf);
    for j in 0..cdiv(N, 64) {{
        let xt = load x[r0..+32, j * 64..+64];
        let valid = col_index(32, 64) + j * 64 < N;
        let part = select(valid, xt, ninf);
        m = {combine}(m, row_max(part));
    }}
    store c[r0..+32] = m;
}}
"
    )
}

fn exc01(combine: &str) -> (Status, String) {
    let dir = std::env::temp_dir().join(format!("tilec-kverify-nan-{}-{combine}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("row_max.tile");
    std::fs::write(&src, row_max_src(combine)).expect("write kernel");
    let ex = Executor::Interp { tilec: PathBuf::from(env!("CARGO_BIN_EXE_tilec")), source: src, kernel: Some("row_max".into()) };
    let precision = Precision::new(DType::F32, DType::F32, DType::F32);
    let cand = TilecCandidate::new("max", precision, ex, default_binding("max").expect("binding"), Duration::from_secs(60), 0).expect("candidate");
    let opts = Options { time_limit: Duration::from_secs(60), dims: None, gates: Some(vec!["EXC-01".into(), "CMP-01".into()]) };
    let report = battery::run(Arc::new(cand), None, &opts).expect("battery runs");
    let _ = std::fs::remove_dir_all(&dir);
    let cmp = report.gates.iter().find(|g| g.id == "CMP-01").expect("CMP-01 ran");
    assert_eq!(cmp.status, Status::Pass, "the kernel computes a row max: {}", cmp.detail);
    let g = report.gates.iter().find(|g| g.id == "EXC-01").expect("EXC-01 ran");
    (g.status, g.detail.clone())
}

#[test]
fn nan_propagating_max_passes_exc01() {
    let (status, detail) = exc01("max");
    assert_eq!(status, Status::Pass, "{detail}");
}

#[test]
fn nan_ignoring_fmax_fails_exc01() {
    // The reduction inside each chunk still propagates; folding the chunks with fmax drops a NaN
    // that sits in an earlier chunk whenever a later chunk has numbers.
    let (status, detail) = exc01("fmax");
    assert_eq!(status, Status::Fail, "{detail}");
}
