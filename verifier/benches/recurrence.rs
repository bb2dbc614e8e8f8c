//! Times the fp64 oracle: token-serial and chunkwise forward + backward of the general
//! recurrence at B=1, H=2, T=1024, K=V=128 (targets: serial < 2 s, chunk < 1 s on the 2-core
//! build machine), plus the GDN and KDA member paths at the same shape.
//!
//! Run: `cargo bench -p kverify --bench recurrence` (env `ORACLE_BENCH_REPS`, default 3).
//! Prints one line per case: best and median wall time over the repetitions.

use std::time::Instant;

use kverify::recurrence::batch::{run, Method};
use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, Dims};

fn main() {
    let reps: usize = std::env::var("ORACLE_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    let d = Dims { batch: 1, heads: 2, seq_len: 1024, dk: 128, dv: 128, value_heads: None };
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("oracle bench: B=1 H=2 T=1024 K=V=128, fp64, {threads} threads, {reps} reps");
    for (model, method, target) in [
        (Model::General, Method::Serial, 2.0),
        (Model::General, Method::Chunk, 1.0),
        (Model::Gdn, Method::Serial, 2.0),
        (Model::Gdn, Method::Chunk, 1.0),
        (Model::Kda, Method::Serial, 2.0),
        (Model::Kda, Method::Chunk, 1.0),
    ] {
        let p = match generate(model, d, 0, None, None) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("generate failed: {e}");
                std::process::exit(1);
            }
        };
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            let r = run(&p, method, 64);
            times.push(t0.elapsed().as_secs_f64());
            if let Err(e) = r {
                eprintln!("run failed: {e}");
                std::process::exit(1);
            }
        }
        times.sort_by(f64::total_cmp);
        let best = times[0];
        let median = times[times.len() / 2];
        let verdict = if median < target { "ok" } else { "OVER" };
        println!(
            "{:<8} {:<6} fwd+bwd  best {best:.3} s  median {median:.3} s  (target < {target} s: {verdict})",
            model.name(),
            format!("{method:?}").to_lowercase()
        );
    }
}
