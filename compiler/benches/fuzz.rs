//! Mutation fuzzing of everything that reads untrusted input: the front end (`check_source`),
//! the interpreter on the mutants that check (tiny sizes, a step and time budget), the metadata
//! loader, the safetensors reader and the size-expression language. Counts panics, internal
//! compiler errors (E0900) and hangs (one input over 2 s of this thread's CPU time, so a loaded
//! machine does not count as a hang; wall-clock time is reported beside it); any of them is a
//! failure, and the input is written to `target/fuzz-failures/`. Minimized, such an input goes
//! into `tests/fuzz-corpus/`, which `compiler/tests/fuzz_corpus.rs` replays on every test run.
//!
//! Run: `FUZZ_N=1000000 cargo bench -p tilec --bench fuzz` (default N = 20,000; FUZZ_SEED sets
//! the seed). Seeds: the shipped examples, the UI fixtures, the metadata fixtures, a small
//! safetensors file and the corpus of past failures.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../tests/fuzz_common/mod.rs"]
mod fuzz_common;

use fuzz_common::{exercise, exercise_all, thread_cpu_time, Reader, Rng};
use tilec_abi::rng::NormalRng;

/// Pieces the mutator inserts: tokens of the DSL and of the metadata/size languages, and values
/// at the edges of every numeric type.
const DICT: [&str; 40] = [
    "(", ")", "[", "]", "{", "}", ";", ",", ":", "..+", "@", ".T", "-", "+=", "=", "load", "store", "let", "mut", "for", "rev", "in", "tmem", "smem", "reg",
    "bf16", "f32", "i32", "out", "kernel", "0", "1", "128", "4294967296", "9223372036854775808", "1e309", "cdiv(", "é", "\"", "\n",
];

/// One mutation of `input` (bytes; the front end reads it lossily as UTF-8, as `tilec` does).
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = DICT[rng.below(DICT.len())].as_bytes();
                v.splice(at..at, t.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 if !other.is_empty() => {
                let s = rng.below(other.len());
                let e = (s + 1 + rng.below(64)).min(other.len());
                v.splice(at..at, other[s..e].iter().copied());
            }
            4 if !v.is_empty() => {
                let s = at.min(v.len() - 1);
                let e = (s + 1 + rng.below(32)).min(v.len());
                let chunk: Vec<u8> = v[s..e].to_vec();
                v.splice(s..s, chunk);
            }
            _ => v.truncate(at),
        }
    }
    v
}

#[derive(Default)]
struct Tally {
    runs: u64,
    panics: u64,
    internal: u64,
    hangs: u64,
    interp_runs: u64,
    slowest: Duration,
    slowest_wall: Duration,
}

fn seeds(dir: &Path, ext: &str) -> Vec<Vec<u8>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|x| x == ext));
    v.sort();
    v.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// `FUZZ_REPLAY=DIR`: runs every file of DIR through the front end (and the interpreter when it
/// checks) and every loader, and prints the slowest; exit 1 on a panic, an internal compiler
/// error or an input over 2 s of CPU time.
fn replay(dir: &Path) {
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng(NormalRng::new(1));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.sort();
    let (mut worst, mut bad) = (Duration::ZERO, 0);
    for f in &files {
        let input = std::fs::read(f).unwrap_or_default();
        let c0 = thread_cpu_time();
        let r = catch_unwind(AssertUnwindSafe(|| exercise_all(&input, &mut rng)));
        let internal = r.as_ref().is_ok_and(|o| o.internal);
        let dt = thread_cpu_time().saturating_sub(c0);
        worst = worst.max(dt);
        if r.is_err() || internal || dt > Duration::from_secs(2) {
            bad += 1;
            let why = if r.is_err() { "panics".to_string() } else if internal { "internal compiler error".to_string() } else { format!("takes {:.1} s of CPU", dt.as_secs_f64()) };
            println!("replay: {} {why}", f.display());
        }
    }
    println!("replay: {} inputs, slowest {:.1} ms of CPU, {bad} failing", files.len(), worst.as_secs_f64() * 1e3);
    if bad > 0 {
        std::process::exit(1);
    }
}

fn main() {
    if let Some(dir) = std::env::var_os("FUZZ_REPLAY") {
        return replay(Path::new(&dir));
    }
    let n: u64 = std::env::var("FUZZ_N").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut tiles = seeds(&root.join("dsl-examples"), "tile");
    tiles.extend(seeds(&root.join("dsl-examples/negative"), "tile"));
    tiles.extend(seeds(&root.join("tests/ui"), "tile"));
    let corpus = root.join("tests/fuzz-corpus");
    tiles.extend(seeds(&corpus, "tile"));
    let mut metas = seeds(&root.join("verifier/tests/fixtures/tilec"), "json");
    metas.extend(seeds(&corpus, "json"));
    let mut sts = seeds(&root.join("runtime/tests/fixtures"), "safetensors");
    sts.extend(seeds(&corpus, "safetensors"));
    let exprs: Vec<Vec<u8>> = ["cdiv(T, 64) * H", "(B * T - 100) / 64 + 1", "min(max(T, 1), 4096) % 7", "-(-(K))"].iter().map(|s| s.as_bytes().to_vec()).collect();
    let failures = root.join("target/fuzz-failures");
    let mut rng = Rng(NormalRng::new(seed));
    let mut t = Tally::default();
    let mut by_target = [0u64; 4];
    // Panics are counted, not printed once each.
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    for i in 0..n {
        let which = match rng.below(20) {
            0..=11 => 0, // front end (+ interpreter when it checks)
            12..=14 => 1, // metadata
            15..=17 => 2, // safetensors
            _ => 3,       // size expressions
        };
        by_target[which] += 1;
        let pool = [&tiles, &metas, &sts, &exprs][which];
        let a = &pool[rng.below(pool.len())];
        let b = &pool[rng.below(pool.len())];
        let input = mutate(&mut rng, a, b);
        let reader = [Reader::FrontEnd, Reader::Metadata, Reader::Safetensors, Reader::SizeExpr][which];
        let (w0, c0) = (Instant::now(), thread_cpu_time());
        let r = catch_unwind(AssertUnwindSafe(|| exercise(reader, &input, &mut rng)));
        let (internal, interp) = r.as_ref().map_or((false, false), |o| (o.internal, o.interpreted));
        let dt = thread_cpu_time().saturating_sub(c0);
        t.runs += 1;
        t.interp_runs += u64::from(interp);
        t.slowest = t.slowest.max(dt);
        t.slowest_wall = t.slowest_wall.max(w0.elapsed());
        let bad = if r.is_err() {
            t.panics += 1;
            Some("panic")
        } else if internal {
            t.internal += 1;
            Some("internal")
        } else if dt > Duration::from_secs(2) {
            t.hangs += 1;
            Some("hang")
        } else {
            None
        };
        if let Some(kind) = bad {
            let _ = std::fs::create_dir_all(&failures);
            let _ = std::fs::write(failures.join(format!("{kind}-{seed}-{i}.bin")), &input);
        }
        if (i + 1) % 100_000 == 0 {
            eprintln!("{} inputs, {:.0} s", i + 1, started.elapsed().as_secs_f64());
        }
    }
    println!(
        "fuzz: {} inputs in {:.1} s (front end {}, of which {} checked and ran on the interpreter; metadata {}; safetensors {}; size expressions {}), seed {seed}",
        t.runs,
        started.elapsed().as_secs_f64(),
        by_target[0],
        t.interp_runs,
        by_target[1],
        by_target[2],
        by_target[3]
    );
    println!(
        "fuzz: {} panics, {} internal compiler errors, {} hangs (> 2 s of CPU); slowest input {:.1} ms of CPU ({:.1} ms wall-clock)",
        t.panics,
        t.internal,
        t.hangs,
        t.slowest.as_secs_f64() * 1e3,
        t.slowest_wall.as_secs_f64() * 1e3
    );
    if t.panics + t.internal + t.hangs > 0 {
        println!("fuzz: failing inputs written to {}", failures.display());
        std::process::exit(1);
    }
}
