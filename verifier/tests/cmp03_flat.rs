//! CMP-03's probe past 2^31 flat elements (issue 12, item 3): the shape it picks for every
//! class, the indices it compares, why it is skipped (a CPU candidate, a process or host memory
//! budget too small), and — at a limit scaled down to 2^23 so that it runs here — the probe
//! itself: an honest answer passes, an offset that wraps at the limit fails at the last index,
//! a refusal is a refusal. No GPU is needed: the GPU path is declared, not used.

mod common;

use kverify::battery::{self, Options};
use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::harness::Harness;
use kverify::candidate::tilec::{binder_refusal, default_binding, Executor, TilecCandidate};
use kverify::candidate::inprocess::{honest, to_f32_vec, FwdFn, InProcess};
use kverify::candidate::{Candidate, CandidateError, CandidateOutput};
use kverify::error_model::Precision;
use kverify::gates::cmp03_flat::{flat_inputs, flat_shape, memory_skip, run_probe, sample_rows, FlatProbe, FLAT_ELEMENTS, HOST_COPIES, MAX_EXTENT};
use kverify::gates::{Ctx, Probe, Status};
use kverify::references::{all_ops, op_by_id, DimKind};
use kverify::tensor::{numel, Device, Tensor};
use std::sync::Arc;
use std::time::Duration;

const F32: Precision = Precision::F32;

#[test]
fn every_class_gets_the_smallest_shape_past_2_31_along_a_dim_that_splits_it() {
    let mut none = Vec::new();
    for op in all_ops() {
        let base = op.native();
        let p = match flat_shape(&op, &base, &F32, FLAT_ELEMENTS) {
            Ok(p) => p,
            Err(why) => {
                none.push(format!("{}: {why}", op.id));
                continue;
            }
        };
        let n = p.dims.get(p.dim);
        // Elements of the largest input per index of the grown dim, from its shape at dim = 1.
        let per = numel(&op.input_shapes(&p.dims.with(p.dim, 1))[p.input]);
        assert_eq!(p.elements, n * per, "{}", op.id);
        // Past 2^31, and the smallest such extent: one index fewer is not.
        assert!(p.elements > FLAT_ELEMENTS && (n - 1) * per <= FLAT_ELEMENTS, "{} {}", op.id, p.dims);
        // No input holds more per index (it is the largest input).
        for s in op.input_shapes(&p.dims) {
            assert!(numel(&s) <= p.elements, "{} {s:?}", op.id);
        }
        // Every extent fits an i32 (a tilec kernel's size scalars): none is 2^31 + 1.
        for (name, v) in &p.dims.0 {
            assert!(*v <= MAX_EXTENT && MAX_EXTENT == i32::MAX as usize, "{} {name}={v}", op.id);
        }
        // Every other changeable dim at its minimum, fixed dims as given — except at most one
        // raised to the smallest value that keeps the grown dim within i32 (one index fewer of
        // it would need an extent past i32::MAX).
        let mut raised = Vec::new();
        for d in &op.dims {
            let want = if d.name == p.dim { n } else if d.kind == DimKind::Fixed { base.get(d.name) } else { d.min.max(1) };
            if p.dims.get(d.name) != want {
                raised.push(d.name);
                assert!(d.kind != DimKind::Fixed && p.dims.get(d.name) > want, "{} {}", op.id, d.name);
                let lower = p.dims.with(d.name, p.dims.get(d.name) - 1);
                let per_lower = numel(&op.input_shapes(&lower.with(p.dim, 1))[p.input]);
                assert!(FLAT_ELEMENTS / per_lower + 1 > MAX_EXTENT, "{} {} could be lower", op.id, d.name);
            }
        }
        assert!(raised.len() <= 1, "{} {raised:?}", op.id);
        if raised.is_empty() {
            assert!(n <= MAX_EXTENT, "{}", op.id);
        }
        // The grown dim still splits: its last index holds the last flat element of the input.
        assert_eq!(op.input_shapes(&p.dims)[p.input][0], n, "{}", op.id);
        assert_eq!(p.rows, sample_rows(n, per, FLAT_ELEMENTS), "{}", op.id);
        let bytes: usize = op.input_shapes(&p.dims).iter().chain(&op.output_shapes(&p.dims)).map(|s| numel(s) * 4).sum();
        assert_eq!(p.candidate_bytes, bytes, "{}", op.id);
    }
    assert!(none.is_empty(), "{none:#?}");
    let dims = |id: &str| flat_shape(&op_by_id(id).expect("op"), &op_by_id(id).expect("op").native(), &F32, FLAT_ELEMENTS).expect("shape").dims.to_string();
    let half = (1usize << 30) + 1;
    assert_eq!(dims("softmax"), format!("R={half},N=2"));
    assert_eq!(dims("matmul"), format!("M={half},K=2,N=1"));
    assert_eq!(dims("exp"), format!("R={half},N=2"));
    assert_eq!(dims("sdpa"), format!("Bt={},Lq=1,Lk=1,D=32,Dv=32", (1 << 26) + 1));
}

/// A dim that is the leading axis of every tensor but whose reference mixes its indices (here a
/// running sum over the whole flat input) does not split the class: no shape, and why.
#[test]
fn a_dim_whose_indices_the_reference_mixes_is_not_grown() {
    let mut op = op_by_id("exp").expect("exp");
    op.k64 = Arc::new(|_, xs: &[&[f64]]| {
        let mut acc = 0.0;
        vec![xs[0].iter().map(|v| {
            acc += v;
            acc
        })
        .collect()]
    });
    let why = flat_shape(&op, &op.native(), &F32, FLAT_ELEMENTS).expect_err("R does not split");
    assert!(why.contains("R: the reference at some indices of R is not those indices of the reference"), "{why}");
    assert!(why.contains("N is not the leading axis"), "{why}");
}

#[test]
fn compared_indices_are_the_ends_the_middle_and_every_power_of_two_crossing() {
    let n = FLAT_ELEMENTS + 1;
    let rows = sample_rows(n, 1, FLAT_ELEMENTS);
    let mut want = vec![0, 1, n / 2, n - 3, n - 2, n - 1];
    for k in 16..=31 {
        want.extend([(1usize << k) - 1, 1 << k]);
    }
    want.sort_unstable();
    want.dedup();
    assert_eq!(rows, want);
    // 32 elements per index (sdpa's q): flat element 2^k sits at index 2^k / 32.
    let rows = sample_rows((1 << 26) + 1, 32, FLAT_ELEMENTS);
    assert!(rows.contains(&(1 << 26)) && rows.contains(&((1 << 26) - 1)) && rows.contains(&(((1 << 16) - 1) / 32)));
    assert!(rows.iter().all(|&r| r <= 1 << 26));
}

fn flat_note(detail: &str) -> &str {
    let i = detail.find("flat offsets past 2^31").unwrap_or_else(|| panic!("no flat note: {detail}"));
    &detail[i..]
}

#[test]
fn a_cpu_candidate_is_not_probed_and_the_detail_says_why() {
    let op = op_by_id("softmax").expect("op");
    let c = honest(&op, F32);
    assert_eq!(c.compute_device(), Device::Cpu);
    let opts = Options { time_limit: Duration::from_secs(2), dims: None, gates: Some(vec!["CMP-03".into()]) };
    let r = battery::run(Arc::new(c), None, &opts).expect("battery");
    assert_eq!(r.gates[0].status, Status::Pass, "{}", r.gates[0].detail);
    assert!(flat_note(&r.gates[0].detail).starts_with("flat offsets past 2^31: not probed (the candidate computes on the cpu)"), "{}", r.gates[0].detail);
}

/// A copy of the NumPy `honest-softmax` manifest declaring `device`, in a temporary folder.
fn numpy_softmax_on(device: &str) -> Result<Manifest, kverify::candidate::external::ManifestError> {
    let dir = std::env::temp_dir().join(format!("kverify-flat-{}-{}", std::process::id(), device.replace(':', "_")));
    std::fs::create_dir_all(&dir).expect("tmp");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::root().join("python/redteam/honest-softmax.json")).expect("read")).expect("json");
    let red = common::root().join("python/redteam");
    m["command"] = serde_json::json!(["python3", "-u", red.join("../kverify_worker.py"), "--module", red.join("tricks.py"), "--function", "honest_softmax"]);
    m["backward"] = serde_json::json!(false);
    m["device"] = serde_json::json!(device);
    std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
    Manifest::load(&dir.join("m.json"))
}

/// A GPU-declared candidate whose process has an address-space cap (no shipped kind has one:
/// tilec-run and cuda-declared workers run uncapped), wrapping the honest in-process mirror.
struct CappedGpu {
    inner: InProcess,
    cap_mb: u64,
}

impl Candidate for CappedGpu {
    fn name(&self) -> String {
        "capped-gpu".into()
    }
    fn op_id(&self) -> String {
        self.inner.op_id()
    }
    fn precision(&self) -> Precision {
        self.inner.precision()
    }
    fn kind(&self) -> &'static str {
        "in-process"
    }
    fn forward(&self, dims: &kverify::references::Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError> {
        self.inner.forward(dims, inputs)
    }
    fn compute_device(&self) -> Device {
        Device::Cuda(0)
    }
    fn memory_limit_mb(&self) -> u64 {
        self.cap_mb
    }
}

#[test]
fn a_manifest_declares_its_device_and_a_gpu_candidate_over_its_memory_cap_is_skipped() {
    let bad = numpy_softmax_on("gpu").expect_err("`gpu` is no device");
    assert!(bad.to_string().contains("expected cpu, cuda or cuda:N"), "{bad}");
    // A cuda-declared worker runs without the address-space cap (--mem-limit-mb applies to CPU
    // workers only), so only the host budget decides for it.
    let c = ExternalCandidate::new(numpy_softmax_on("cuda:1").expect("manifest"), Duration::from_secs(3), 2048);
    assert_eq!((c.compute_device(), c.memory_limit_mb()), (Device::Cuda(1), 0));
    let cpu = ExternalCandidate::new(numpy_softmax_on("cpu").expect("manifest"), Duration::from_secs(3), 2048);
    assert_eq!((cpu.compute_device(), cpu.memory_limit_mb()), (Device::Cpu, 2048));
    // softmax at R = 2^30 + 1, N = 2 in f32: 8 GiB in, 8 GiB out.
    let op = op_by_id("softmax").expect("op");
    let p = flat_shape(&op, &op.native(), &F32, FLAT_ELEMENTS).expect("shape");
    assert_eq!(p.candidate_bytes, 2 * 4 * (FLAT_ELEMENTS + 2));
    let capped = |mb: u64| CappedGpu { inner: honest(&op, F32), cap_mb: mb };
    let why = memory_skip(&capped(2048), &p, Some(usize::MAX)).expect("over the cap");
    assert_eq!(why, "its inputs and outputs need 16384 MiB > the candidate process's 2048 MiB address-space cap");
    // At the boundary: a cap of exactly 16384 MiB holds them, one MiB less does not.
    assert_eq!(memory_skip(&capped(16_384), &p, Some(usize::MAX)), None);
    assert!(memory_skip(&capped(16_383), &p, Some(usize::MAX)).is_some_and(|w| w.contains("16383 MiB address-space cap")));
    // Uncapped: the host budget decides, at HOST_COPIES x the candidate's bytes.
    let free = ExternalCandidate::new(numpy_softmax_on("cuda").expect("manifest"), Duration::from_secs(3), 0);
    assert_eq!(free.compute_device(), Device::Cuda(0));
    for cand in [&free as &dyn Candidate, &c] {
        assert_eq!(memory_skip(cand, &p, Some(p.host_bytes())), None);
        let why = memory_skip(cand, &p, Some(p.host_bytes() - 1)).expect("over the host budget");
        assert_eq!(why, format!("needs 65536 MiB of host memory ({HOST_COPIES} x 16384 MiB of inputs and outputs) > {} MiB available", (p.host_bytes() - 1) >> 20));
        assert!(memory_skip(cand, &p, None).expect("unknown").contains("host memory unknown"));
    }
    // Through the gate: the candidate is never sent the shape, and the detail says why.
    let opts = Options { time_limit: Duration::from_secs(3), dims: None, gates: Some(vec!["CMP-03".into()]) };
    let r = battery::run(Arc::new(capped(2048)), None, &opts).expect("battery");
    let g = &r.gates[0];
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
    let note = flat_note(&g.detail);
    assert!(note.starts_with("flat offsets past 2^31: not probed (R=1073741825,N=2: its inputs and outputs need 16384 MiB"), "{note}");
}

/// exp over x[R, N] with every flat offset taken modulo `wrap` (0: none), not checking the
/// envelope (a GPU kernel that takes any R).
fn exp_with_offsets_mod(name: &str, wrap: usize) -> InProcess {
    let fwd: FwdFn = Arc::new(move |d, x| {
        let v = to_f32_vec(&x[0]);
        let out: Vec<f32> = (0..v.len()).map(|k| v[if wrap > 0 { k % wrap } else { k }].exp()).collect();
        Ok(CandidateOutput { outputs: vec![Tensor::f32(vec![d.get("R"), d.get("N")], out)], ..Default::default() })
    });
    InProcess { name: name.into(), op_id: "exp".into(), precision: F32, fwd, bwd: None }
}

fn scaled(limit: usize, c: InProcess) -> (FlatProbe, Probe, Vec<Tensor>) {
    scaled_dyn(limit, Arc::new(c))
}

fn scaled_dyn(limit: usize, c: Arc<dyn Candidate>) -> (FlatProbe, Probe, Vec<Tensor>) {
    let op = op_by_id("exp").expect("exp");
    let p = flat_shape(&op, &op.native(), &F32, limit).expect("shape");
    let h = Harness::new(c, Duration::from_secs(60));
    let ctx = Ctx { op: &op, harness: &h, precision: F32, dims: op.native(), meta: None };
    let probe = run_probe(&ctx, "CMP-03", &p, 7);
    let wide = kverify::gates::cmp03_probes::widened(&op, p.dim, p.dims.get(p.dim));
    let x = flat_inputs(&wide, &p.dims, p.dim, &[true], F32.input, 7).expect("inputs");
    (p, probe, x)
}

#[test]
fn the_probe_at_a_scaled_down_limit_passes_honest_fails_a_wrapped_offset_and_lists_a_refusal() {
    const LIMIT: usize = 1 << 23;
    let (p, probe, x) = scaled(LIMIT, exp_with_offsets_mod("flat-exp", 0));
    assert_eq!(p.dims.to_string(), format!("R={},N=1", LIMIT + 1));
    let Probe::Values(v) = probe else { panic!("{probe:?}") };
    assert!(v.passed() && v.compared == p.rows.len(), "{v:?}");
    // The inputs come in chunks of 2^22 indices, chunk k drawn by the gates' generator at seed 7 + k.
    let op = op_by_id("exp").expect("exp");
    let chunk1 = kverify::gates::inputs::generate(&op, &p.dims.with("R", 1 << 22), kverify::gates::inputs::Dist::Normal, 8, F32.input);
    assert_eq!(to_f32_vec(&x[0])[1 << 22..(1 << 22) + 64], to_f32_vec(&chunk1.candidate[0])[..64]);
    // Offsets modulo 2^23: only the last index (flat element 2^23) is wrong, by exactly
    // |e^x[2^23] - e^x[0]| of these inputs.
    let (_, probe, _) = scaled(LIMIT, exp_with_offsets_mod("wrapping-exp", LIMIT));
    let Probe::Values(v) = probe else { panic!("{probe:?}") };
    assert!(!v.passed(), "{v:?}");
    let xs = to_f32_vec(&x[0]);
    assert_eq!(p.rows[v.worst_at.1], LIMIT);
    assert_eq!(v.worst_err, (xs[0].exp() as f64 - (xs[LIMIT] as f64).exp()).abs());
    // The in-process mirror keeps to the envelope (R <= 65536): a refusal, listed as declined.
    let (_, probe, _) = scaled(LIMIT, honest(&op, F32));
    assert!(matches!(&probe, Probe::Refused(why) if why.contains("illegal dims")), "{probe:?}");
}

/// A tilec GPU candidate for exp whose `tilec-run` is the shell script `body`.
fn fake_tilec_run(dir: &std::path::Path, body: &str) -> TilecCandidate {
    use std::os::unix::fs::PermissionsExt;
    let run = dir.join("tilec-run");
    std::fs::write(&run, format!("#!/bin/sh\n{body}\n")).expect("script");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let meta = dir.join("exp.sm_90a.meta.json");
    std::fs::write(&meta, "{}").expect("meta");
    TilecCandidate::new("exp", F32, Executor::Gpu { tilec_run: run, meta }, default_binding("exp").expect("binding"), Duration::from_secs(30), 0).expect("candidate")
}

/// `tilec-run`'s binder refusing a size (an i32 size scalar past 2^31 − 1, a size outside the
/// kernel's envelope: exit 1, that message last) is the candidate declining the shape, listed
/// past the envelope as declined; any other exit, message or a signal stays a runtime failure.
#[test]
fn tilec_runs_binder_refusing_a_size_is_a_decline_and_nothing_else_is() {
    const LIMIT: usize = 1 << 23;
    let scalar = "tilec-run: error: size scalar `R` = `R` evaluates to 2147483649, outside 0..=2147483647 (passed as i32)";
    let envelope = "tilec-run: error: size `R` = 8388609 is outside the kernel's envelope (1 <= R <= 65536)";
    for msg in [scalar, envelope] {
        assert!(binder_refusal(1, msg).is_some_and(|w| w.ends_with(msg.trim_start_matches("tilec-run: error: "))), "{msg}");
        assert!(binder_refusal(1, &format!("warning: x | {msg}")).is_some(), "{msg}");
        // Not exit 1, not the last line, or not tilec-run's own error line: no decline.
        assert_eq!(binder_refusal(2, msg), None);
        assert_eq!(binder_refusal(101, msg), None);
        assert_eq!(binder_refusal(1, &format!("{msg} | thread 'main' panicked")), None);
        assert_eq!(binder_refusal(1, &msg.replace("tilec-run: error: ", "error: ")), None);
        assert_eq!(binder_refusal(1, &format!("{msg} trailing")), None);
    }
    for other in [
        "tilec-run: error: CUDA_ERROR_ILLEGAL_ADDRESS",
        "tilec-run: error: size scalar `R` = `R` evaluates to -1, outside 0..=7 (passed as i32)",
        "tilec-run: error: launch.grid[1] = `cdiv(R, 64)` evaluates to 70000, outside 1..=65535",
        "tilec-run: error: size `R` (used by x) cannot be inferred from the arguments; give it explicitly with `--size R=<n>`",
    ] {
        assert_eq!(binder_refusal(1, other), None, "{other}");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let probe_of = |body: &str| scaled_dyn(LIMIT, Arc::new(fake_tilec_run(dir.path(), body))).1;
    for msg in [scalar, envelope] {
        let probe = probe_of(&format!("cat >&2 <<'EOF'\n{msg}\nEOF\nexit 1"));
        assert!(matches!(&probe, Probe::Refused(why) if why.contains("tilec-run's binder") && why.contains(msg.trim_start_matches("tilec-run: error: "))), "{probe:?}");
    }
    for body in [format!("cat >&2 <<'EOF'\n{scalar}\nEOF\nexit 3"), "echo 'tilec-run: error: CUDA_ERROR_LAUNCH_FAILED' >&2\nexit 1".into(), format!("cat >&2 <<'EOF'\n{scalar}\nEOF\nkill -SEGV $$")] {
        let probe = probe_of(&body);
        assert!(matches!(&probe, Probe::Runtime(e) if e.is_runtime_failure()), "{body}: {probe:?}");
    }
}
