//! Interpreter MMA numerics per lowering (issue #8, item 6; issue #9): `mma.sync` (an
//! accumulator in shared memory or registers of the IR's `reg` space, and a `tmem` accumulator
//! over the sm_90a register budget) sums the K steps first and then adds the old accumulator
//! (`D_old ± (s₁ + s₂)`); `tcgen05.mma` (a `tmem` accumulator on sm_100a) and `wgmma` (a `tmem`
//! accumulator on sm_90a within the register budget) take the old accumulator as the first
//! step's input and round every K = 16 step into it (`(D_old ± s₁) ± s₂`, negation on A).
//!
//! The inputs make every product ±1 or 0 and every step sum `s` a small integer, so each step
//! sum is exact and one step of the model (`round_f32(c + Σ products)`) is one f32 addition
//! `c + s`. The expected values below are that f32 arithmetic, written out per target, plus
//! hand-worked anchors around 2^24 (where the f32 spacing is 2, so `2^24 + 1` is a tie that
//! rounds to the even `2^24`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tilec::backend::Target;
use tilec::interp::{run_kernel_with, Inputs, Options};
use tilec::ir::{Kernel, Space};
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const M: usize = 64;
const N: usize = 16;
const K: usize = 32; // two K = 16 steps
const P24: f32 = 16_777_216.0; // 2^24

/// `y = d0 (op) a @ b` with the accumulator `d` in tensor memory, `M x N`.
fn source(op: &str) -> String {
    source_n(op, N)
}

/// [`source`] with `n` columns.
fn source_n(op: &str, n: usize) -> String {
    format!(
        "kernel acc(a: bf16[{M}, {K}], b: bf16[{K}, {n}], d0: f32[{M}, {n}], y: out f32[{M}, {n}]) grid(1) threads(128) {{
    let sa: smem = load a[0..+{M}, 0..+{K}];
    let sb: smem = load b[0..+{K}, 0..+{n}];
    let mut d: tmem = load d0[0..+{M}, 0..+{n}];
    d {op} sa @ sb;
    store y[0..+{M}, 0..+{n}] = d;
}}
"
    )
}

/// The kernel of [`source`] with its accumulator moved to `space`. The language puts every
/// accumulator in TMEM; the IR also admits registers, which both lowerings run with `mma.sync`.
fn compile(op: &str, space: Space) -> Kernel {
    let src = source(op);
    let checked = tilec::frontend::check_source(&src, &tilec::frontend::Options::default());
    assert!(checked.ok(), "does not compile:\n{src}");
    let mut k = checked.module.kernels.into_iter().next().expect("one kernel");
    let d = k.vars.iter().find(|(_, v)| v.name == "d").expect("variable d").0;
    k.vars[d].space = space;
    k
}

/// Step sums `(s₁, s₂)` of row `i`.
fn step_sums(i: usize) -> (i32, i32) {
    const S: [i32; 7] = [1, -1, 2, 3, -3, 0, 1];
    (S[i % 7], S[(i / 7 + 3 * i) % 7])
}

/// Old accumulator values of column `j`: large ones where absorption differs, and small ones.
fn d_old(j: usize) -> f32 {
    const D: [f32; 8] = [P24, -P24, 2.0 * P24, 1.5 * P24, P24 - 4.0, 1.0, 0.0, 4.0 * P24];
    // Negated for the upper columns; `0.0 - 0.0` keeps the zero +0 (a −0 seed would make the
    // sign of an exactly cancelling step sum matter, which this test is not about).
    if j >= 8 { 0.0 - D[j % 8] } else { D[j % 8] }
}

/// Row `i` of A for one step summing to `s`: `p` cancelling (+1, −1) pairs, then `|s|` entries
/// of sign(s), then zeros (B is all ones, so these are the products).
fn a_step(i: usize, s: i32) -> Vec<f32> {
    let p = i % 4;
    let mut v = Vec::new();
    for _ in 0..p {
        v.extend([1.0, -1.0]);
    }
    v.extend(std::iter::repeat_n(s.signum() as f32, s.unsigned_abs() as usize));
    v.resize(16, 0.0);
    v
}

fn inputs() -> Inputs {
    inputs_n(N)
}

/// [`inputs`] for `n` columns.
fn inputs_n(n: usize) -> Inputs {
    let a: Vec<f32> = (0..M)
        .flat_map(|i| {
            let (s1, s2) = step_sums(i);
            let mut row = a_step(i, s1);
            row.extend(a_step(i + 1, s2));
            row
        })
        .collect();
    let d: Vec<f32> = (0..M * n).map(|e| d_old(e % n)).collect();
    BTreeMap::from([
        ("a".to_string(), HostTensor::from_f32(DType::Bf16, vec![M, K], &a).unwrap()),
        ("b".to_string(), HostTensor::from_f32(DType::Bf16, vec![K, n], &vec![1.0; K * n]).unwrap()),
        ("d0".to_string(), HostTensor::from_f32(DType::F32, vec![M, n], &d).unwrap()),
    ])
}

/// What the lowering computes, in f32 arithmetic (see the module docs): `seeded` for tcgen05
/// and wgmma, otherwise mma.sync.
fn expected(seeded: bool, negate: bool, i: usize, j: usize) -> f32 {
    let (s1, s2) = step_sums(i);
    let (s1, s2) = (s1 as f32, s2 as f32);
    let d = d_old(j);
    if seeded {
        // D_old seeds step 1, step 2 accumulates; `-=` negates A (every product).
        if negate { (d + -s1) + -s2 } else { (d + s1) + s2 }
    } else {
        // mma.sync: registers from 0 (0 + s₁ + s₂ is exact here), D_old once at the end.
        let acc = (0.0 + s1) + s2;
        if negate { d - acc } else { d + acc }
    }
}

fn run(space: Space, op: &str, target: Target) -> Vec<f32> {
    let k = compile(op, space);
    let opts = Options { target, ..Options::default() };
    let run = run_kernel_with(&k, &inputs(), &opts).expect("runs");
    run.outputs["y"].to_f32()
}

/// Checks every element against the expected value (this `M x N` accumulator is within the
/// sm_90a register budget, so a `tmem` one is seeded on both targets); returns the sm_90a and
/// sm_100a outputs.
fn check(space: Space, op: &str) -> (Vec<f32>, Vec<f32>) {
    let negate = op == "-=";
    let outs: Vec<Vec<f32>> = Target::ALL.iter().map(|&nm| run(space, op, nm)).collect();
    for (nm, got) in Target::ALL.iter().zip(&outs) {
        for i in 0..M {
            for j in 0..N {
                let want = expected(space == Space::Tmem, negate, i, j);
                assert_eq!(got[i * N + j].to_bits(), want.to_bits(), "{nm}, {space:?} d {op}: y[{i}, {j}] = {} want {want} (D_old {}, step sums {:?})", got[i * N + j], d_old(j), step_sums(i));
            }
        }
    }
    let sm90 = Target::ALL.iter().position(|&n| n == Target::Sm90a).unwrap();
    (outs[sm90].clone(), outs[1 - sm90].clone())
}

#[test]
fn inputs_have_the_intended_step_sums() {
    // Row 0: s₁ = s₂ = 1 (the anchors below rely on it); columns 0 and 1: D_old = ±2^24.
    assert_eq!(step_sums(0), (1, 1));
    assert_eq!((d_old(0), d_old(1)), (P24, -P24));
    let a = inputs()["a"].to_f32();
    for i in 0..M {
        let (s1, s2) = step_sums(i);
        assert_eq!(a[i * K..i * K + 16].iter().sum::<f32>(), s1 as f32, "row {i}");
        assert_eq!(a[i * K + 16..(i + 1) * K].iter().sum::<f32>(), s2 as f32, "row {i}");
    }
}

#[test]
fn tmem_accumulate_is_seeded_on_both_targets() {
    let (sm90, sm100) = check(Space::Tmem, "+=");
    // Hand-worked: D_old = 2^24, s₁ = s₂ = 1: 2^24 + 1 → 2^24 (tie to even), twice.
    assert_eq!((sm90[0], sm100[0]), (P24, P24));
    assert_eq!(sm90, sm100);
    // And mma.sync's order would differ on many elements (the test tells the two apart).
    let reg = check(Space::Reg, "+=").0;
    let differ = sm90.iter().zip(&reg).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert!(differ >= M, "the two associations differ on only {differ} elements");
    assert_eq!(reg[0], P24 + 2.0);
}

#[test]
fn tmem_subtract_is_seeded_on_both_targets() {
    let (sm90, sm100) = check(Space::Tmem, "-=");
    // Hand-worked: D_old = −2^24, s₁ = s₂ = 1: −2^24 + (−1) → −2^24 (tie to even), twice;
    // mma.sync: −2^24 − (1 + 1) = −2^24 − 2 (exact).
    assert_eq!((sm90[1], sm100[1]), (-P24, -P24));
    assert_eq!(check(Space::Reg, "-=").0[1], -P24 - 2.0);
    // D_old = 2^24: the steps go below 2^24, where the spacing is 1: 2^24 − 1, 2^24 − 2.
    assert_eq!(sm90[0], P24 - 2.0);
    assert_eq!(sm90, sm100);
}

#[test]
fn accumulators_outside_tmem_take_mma_sync_on_both_targets() {
    for op in ["+=", "-="] {
        let (sm90, sm100) = check(Space::Reg, op);
        assert_eq!(sm90, sm100, "register accumulator, d {op}");
    }
}

#[test]
fn cli_target_flag_selects_the_numerics() {
    // A 64 x 512 f32 accumulator is 256 floats per thread of 128: over the sm_90a register
    // budget, so mma.sync there, tcgen05 (seeded) on sm_100a.
    let n = 512;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join("interp_numerics_acc.tile");
    std::fs::write(&file, source_n("+=", n)).unwrap();
    let inp = dir.join("interp_numerics_in.safetensors");
    tilec_abi::st::write(&inp, &inputs_n(n)).unwrap();
    let mut outs = Vec::new();
    for target in [None, Some("sm_90a"), Some("sm_100a")] {
        let out = dir.join(format!("interp_numerics_out_{}.safetensors", target.unwrap_or("default")));
        let mut argv = vec!["tilec", "run", "--interp", file.to_str().unwrap(), "--inputs", inp.to_str().unwrap(), "--out", out.to_str().unwrap()];
        if let Some(t) = target {
            argv.extend(["--target", t]);
        }
        let args = parse_run_args(&argv);
        assert_eq!(tilec::cli::run::run(&args), ExitCode::SUCCESS);
        outs.push(tilec_abi::st::read(&out).unwrap()["y"].to_f32());
    }
    assert_eq!(Options::default().target, Target::Sm90a);
    assert_eq!(outs[0], outs[1], "the default is sm_90a");
    assert_eq!((outs[1][0], outs[2][0]), (P24 + 2.0, P24));
}

fn parse_run_args(argv: &[&str]) -> tilec::cli::run::RunArgs {
    use clap::{Args, FromArgMatches};
    let cmd = tilec::cli::run::RunArgs::augment_args(clap::Command::new("run"));
    let m = cmd.try_get_matches_from(argv[1..].iter()).expect("arguments parse");
    tilec::cli::run::RunArgs::from_arg_matches(&m).expect("arguments bind")
}

#[test]
fn cli_rejects_an_unknown_target() {
    use clap::Args;
    let cmd = tilec::cli::run::RunArgs::augment_args(clap::Command::new("run"));
    let e = cmd.try_get_matches_from(["run", "--interp", "x.tile", "--inputs", "i", "--out", "o", "--target", "sm_80"]).unwrap_err();
    assert!(e.to_string().contains("sm_80"), "{e}");
}
