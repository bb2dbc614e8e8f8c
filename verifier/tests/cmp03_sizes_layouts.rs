//! CMP-03 past every power of two, past the envelope, and with strided inputs (issue 12, items
//! 3 and 4): the tricks are caught exactly where their arithmetic goes wrong, their twins pass.
//! The external half needs python3 with NumPy (skips with a message when absent).

mod common;

use common::{python_ready, root};
use kverify::battery::{self, Options, Verdict};
use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::{Candidate, Layout, LAYOUT_OFFSET};
use kverify::gates::cmp03_probes::{size_set, PAST_ENVELOPE_BYTES};
use kverify::gates::inputs::{gate_seed, generate, Dist};
use kverify::gates::{GateResult, Status};
use kverify::redteam::{honest_twins, tricks};
use kverify::references::op_by_id;
use kverify::tensor::DType;
use std::sync::Arc;
use std::time::Duration;

fn cmp03(c: Arc<dyn Candidate>) -> GateResult {
    let r = battery::run(c, None, &Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["CMP-03".into()]) }).expect("battery");
    r.gates[0].clone()
}

fn trick(name: &str) -> Arc<dyn Candidate> {
    Arc::new((tricks().into_iter().find(|t| t.name == name).expect("trick").build)())
}

/// The `wrong:` labels of a CMP-03 detail that name a size probe (`N=...`).
fn wrong_sizes(detail: &str) -> Vec<usize> {
    let w = detail.split("wrong: ").nth(1).unwrap_or("");
    w.split("; ").filter_map(|p| p.strip_prefix("N=")).filter_map(|p| p.split(' ').next()?.parse().ok()).collect()
}

#[test]
fn a_sum_wrong_past_1024_fails_at_every_size_past_a_power_of_two_from_1025() {
    let g = cmp03(trick("tail_block_overwrites"));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    // Right at N <= 1024 and at multiples of 1024 (the conventional shapes: 256, 512, 1024,
    // 255, 257, 65536); wrong wherever a partial 1024-block is left: 2^k + 1 for 2^k >= 1024.
    // The error, |sum of the first 2^k of N(0,1)| ~ 2^(k/2), outgrows the deterministic bound
    // gamma(N) sum|x| ~ 0.8 N^2 u up to 2^15; at 65537 (~256 vs ~205) it is left to chance.
    let want: Vec<usize> = (10..=15).map(|k| (1usize << k) + 1).collect();
    let got = wrong_sizes(&g.detail);
    assert_eq!(got[..want.len()], want[..], "{}", g.detail);
    assert!(got.iter().all(|&n| n > 1024), "{}", g.detail);
    assert!(!g.detail.contains("rejected"), "{}", g.detail);
    // Its twin with the same blocks (and no dims check) is right everywhere, past the envelope too.
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-chunked-sum").expect("twin");
    let g = cmp03(Arc::new(twin));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains("declined past the envelope: none"), "{}", g.detail);
    let op = op_by_id("sum").expect("sum");
    let (sizes, _) = size_set(&op, &op.native(), PAST_ENVELOPE_BYTES);
    let (shapes, _) = kverify::gates::cmp03_shapes::shape_set(&op, &op.native());
    assert_eq!((shapes.len(), sizes.len()), (7, 32));
    assert!(g.detail.starts_with(&format!("{} shapes ok", shapes.len() + sizes.len())), "{}", g.detail);
}

#[test]
fn a_16_bit_column_offset_fails_only_past_the_envelope_with_the_derived_error() {
    let g = cmp03(trick("u16_index_wrap"));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    assert_eq!(wrong_sizes(&g.detail), vec![65_537], "{}", g.detail);
    assert!(g.detail.contains("N=65537 (past 2^16, past the envelope 16384)"), "{}", g.detail);
    // The measured error is |exp(x[0]) - exp(x[65536])| of that probe's own inputs.
    let op = op_by_id("exp").expect("exp");
    let (sizes, _) = size_set(&op, &op.native(), PAST_ENVELOPE_BYTES);
    let i = sizes.iter().position(|p| p.dims.get("N") == 65_537 && p.dims.get("R") == 1).expect("probe");
    let x = generate(&op, &sizes[i].dims, Dist::Normal, gate_seed("CMP-03", 100 + i as u64), DType::F32).reference[0].to_f64_vec();
    let want = ((x[0] as f32).exp() as f64 - x[65_536].exp()).abs();
    assert_eq!(g.measured, Some(want), "{}", g.detail);
    // The honest in-process mirror declines past the envelope (its dims check): listed, not failed.
    let twin = honest_twins().into_iter().find(|h| h.name == "honest-exp").expect("twin");
    let g = cmp03(Arc::new(twin));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains("N=16385 (past 2^14, past the envelope 16384): refused: illegal dims R=1,N=16385"), "{}", g.detail);
    assert!(g.detail.contains("layouts: not probed (the candidate receives dense tensors)"), "{}", g.detail);
}

fn ext(name: &str) -> Arc<dyn Candidate> {
    common::ext(name, Duration::from_secs(5))
}

/// A candidate from inline code, run by `worker` (a path relative to the temp folder or absolute).
fn inline(name: &str, code: &str, worker: &str) -> ExternalCandidate {
    let dir = std::env::temp_dir().join(format!("kverify-layout-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::write(dir.join("cand.py"), code).expect("write");
    let m = serde_json::json!({
        "name": name, "op": "matmul",
        "precision": {"input": "f32", "accumulator": "f32", "output": "f32"},
        "command": ["python3", worker, "--module", "cand.py", "--function", "forward"],
        "env": {"PYTHONPATH": format!("{}:{}", root().join("python").display(), std::env::var("PYTHONPATH").unwrap_or_default())}
    });
    std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
    ExternalCandidate::new(Manifest::load(&dir.join("m.json")).expect("manifest"), Duration::from_secs(5), 1024)
}

#[test]
fn the_worker_hands_over_the_requested_strides_and_offset() {
    if !python_ready() {
        return;
    }
    // The candidate answers with its inputs' element strides and element offset into their base.
    let code = "import numpy as np\ndef forward(x, d):\n    a = x[0]\n    off = (a.__array_interface__['data'][0] - a.base.__array_interface__['data'][0]) // 4 if a.base is not None else -1\n    return np.array([s // 4 for s in a.strides] + [off], np.float32)\n";
    let worker = root().join("python/kverify_worker.py").display().to_string();
    let c = inline("strides", code, &worker);
    let op = op_by_id("matmul").expect("matmul");
    let d = op.native().with("M", 3).with("K", 5);
    let ask = |l: Layout| {
        let mut x = generate(&op, &d, Dist::Normal, 1, DType::F32).candidate;
        let (m, k) = (d.get("M"), d.get("K"));
        if l == Layout::Expanded {
            let row = x[0].to_f64_vec()[..k].to_vec();
            x[0] = kverify::tensor::Tensor::from_f64(vec![m, k], &row.repeat(m), DType::F32);
        }
        let o = c.forward_layout(&d, &mut x, &[l, Layout::Contiguous]).expect("call");
        assert!(o.layouts_applied);
        o.outputs[0].to_f64_vec()
    };
    // A [3, 5] f32: transposed = column-major (strides 1, 3), offset = dense strides (5, 1) at
    // element LAYOUT_OFFSET, expanded = stride 0 along the rows.
    assert_eq!(ask(Layout::Transposed)[..2], [1.0, 3.0]);
    assert_eq!(ask(Layout::Offset), vec![5.0, 1.0, LAYOUT_OFFSET as f64]);
    assert_eq!(ask(Layout::Expanded)[..2], [0.0, 1.0]);
    // A plain call asks for nothing and confirms nothing.
    let mut x = generate(&op, &d, Dist::Normal, 1, DType::F32).candidate;
    assert!(!c.forward(&d, &mut x).expect("call").layouts_applied);
}

#[test]
fn a_kernel_reading_memory_order_fails_the_transposed_layout_only() {
    if !python_ready() {
        return;
    }
    let g = cmp03(ext("reads_memory_order"));
    assert_eq!(g.status, Status::Fail, "{}", g.detail);
    let wrong = g.detail.split("wrong: ").nth(1).unwrap_or("");
    let labels: Vec<&str> = wrong.split("; ").map(|p| p.split(" [").next().unwrap_or("")).collect();
    assert_eq!(labels, vec!["transposed views"], "{}", g.detail);
    let r = battery::run(ext("honest"), None, &Options { time_limit: Duration::from_secs(5), dims: None, gates: Some(vec!["CMP-03".into()]) }).expect("battery");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert!(r.gates[0].detail.contains("layouts: transposed, offset, expanded views"), "{}", r.gates[0].detail);
    assert_eq!(r.verdict, Verdict::Clean);
}

#[test]
fn a_worker_that_does_not_apply_layouts_is_named_not_passed_silently() {
    if !python_ready() {
        return;
    }
    // The stock worker with the `layouts` field dropped from the request: dense inputs, no echo.
    let dir = std::env::temp_dir().join(format!("kverify-layout-{}-oldworker", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let shim = dir.join("old_worker.py");
    std::fs::write(&shim, "import kverify_worker as w\n_h = w.handle\ndef handle(req, f, b):\n    req.pop('layouts', None)\n    return _h(req, f, b)\nw.handle = handle\nw.main()\n").expect("write");
    let c = inline("oldworker", "import numpy as np\ndef forward(x, d):\n    return np.ravel(x[0], order='K').reshape(x[0].shape) @ x[1]\n", &shim.display().to_string());
    let g = cmp03(Arc::new(c));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    assert!(g.detail.contains("layouts: not applied by the worker (no `layouts` echo): transposed views"), "{}", g.detail);
}
