//! KernelBench's trial seeds without PyTorch (`kverify::audit::kernelbench`): the generator
//! against three independent references — the C++ standard's MT19937 check value, NumPy's
//! legacy `MT19937` seeding (the same `init_genrand`, another implementation) and PyTorch's
//! well-known first draws after `torch.manual_seed(42)` and `(0)` — and the seeds an audit
//! sends with its KB requests. (Against PyTorch itself: `tests/audit_torch.rs`, ignored.)

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use common::audit::{fake_worker, kverify, row, scratch, write_corpus};
use kverify::audit::kernelbench::{randint_of, trial_seeds, Mt19937, SEED_RANGE, TRIALS};
use serde_json::{json, Value};

#[test]
fn mt19937_matches_the_cpp_standard_check_value() {
    // [rand.predef]: the 10000th output of a default-constructed std::mt19937 (seed 5489).
    let mut g = Mt19937::new(5489);
    let v: Vec<u32> = (0..10_000).map(|_| g.next_u32()).collect();
    assert_eq!(v[9999], 4_123_659_995);
    // PyTorch seeds with the low 32 bits (`init_with_uint32`: `seed & 0xffffffff`).
    let (mut a, mut b) = (Mt19937::new(42), Mt19937::new((1 << 32) + 42));
    assert!((0..700).all(|_| a.next_u32() == b.next_u32()));
}

/// `torch.manual_seed(s); torch.rand(6)` is, on the CPU, the low 24 bits of six 32-bit outputs
/// over 2^24 (`uniform_real_distribution<float>`): 0.8823, 0.9150, 0.3829, 0.9593, 0.3904,
/// 0.6009 for 42 and 0.4963, 0.7682, 0.0885, 0.1320, 0.3074, 0.6341 for 0 — the values PyTorch
/// prints in countless tutorials. They pin the stream `randint` draws from.
#[test]
fn the_stream_is_pytorchs_cpu_generator() {
    for (seed, want) in [(42, [8823, 9150, 3829, 9593, 3904, 6009]), (0, [4963, 7682, 885, 1320, 3074, 6341])] {
        let mut g = Mt19937::new(seed);
        let got: Vec<u32> = (0..6).map(|_| ((f64::from(g.next_u32() & 0xff_ffff) / 16_777_216.0) * 1e4).round() as u32).collect();
        assert_eq!(got, want, "seed {seed}");
    }
}

#[test]
fn the_stream_agrees_with_numpys_legacy_mt19937() {
    if !common::python_ready() {
        return;
    }
    let seeds = [0u64, 7, 42, 5489, u64::from(u32::MAX)];
    let script = format!(
        "import numpy as np\nfor s in {seeds:?}:\n    g = np.random.MT19937()\n    g._legacy_seeding(s)\n    print(' '.join(str(int(v)) for v in g.random_raw(1300)))\n"
    );
    let o = std::process::Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), seeds.len());
    for (seed, l) in seeds.iter().zip(lines) {
        let mut g = Mt19937::new(*seed);
        // 1300 outputs: across two twists of the 624-word state.
        let ours: Vec<String> = (0..1300).map(|_| g.next_u32().to_string()).collect();
        assert_eq!(ours.join(" "), l, "seed {seed}");
    }
}

#[test]
fn trial_seeds_are_kernelbenchs_for_seed_42() {
    // torch.manual_seed(42); [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert_eq!(trial_seeds(42, TRIALS), vec![1_608_637_542, 3_421_126_067, 4_083_286_876, 787_846_414, 3_143_890_026]);
    assert_eq!(trial_seeds(42, 2), trial_seeds(42, 5)[..2].to_vec(), "a prefix: one draw per trial");
    // randint(0, 2^32 - 1) of an output v is v mod (2^32 - 1): the largest output wraps to 0.
    assert_eq!((randint_of(u32::MAX), randint_of(u32::MAX - 1), SEED_RANGE), (0, u64::from(u32::MAX - 1), u64::from(u32::MAX)));
}

/// The KB request of an audit carries KernelBench's trial seeds of `--seed` (42 by default);
/// the other gates keep theirs (base + offset).
#[test]
fn an_audit_sends_kernelbenchs_seeds_with_kb() {
    let dir = scratch("kb-seeds");
    let log = dir.join("params");
    let corpus = write_corpus(&dir, &[row(1, Some(json!({"paramlog": log.display().to_string()})), true)]);
    for (seed, args) in [(42, vec![]), (7, vec!["--seed", "7"])] {
        let _ = std::fs::remove_file(&log);
        let out = dir.join(format!("out-{seed}"));
        let w = fake_worker();
        let mut a = vec![corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &w, "--quiet"];
        a.extend(args);
        let o = kverify(&a).output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let runs: Vec<Value> = std::fs::read_to_string(&log).expect("log").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        let of = |g: &str| runs.iter().find(|r| r["gate"] == g).map(|r| r["params"]["seeds"].clone()).unwrap_or(Value::Null);
        assert_eq!(of("KB"), json!(trial_seeds(seed, TRIALS)), "seed {seed}");
        assert_eq!(of("RES-01"), json!([seed + 201, seed + 202]), "seed {seed}");
        let kb = runs.iter().find(|r| r["gate"] == "KB").map(|r| r["params"].clone()).unwrap_or(Value::Null);
        assert_eq!((kb["atol"].as_f64(), kb["rtol"].as_f64()), (Some(1e-2), Some(1e-2)));
    }
}
