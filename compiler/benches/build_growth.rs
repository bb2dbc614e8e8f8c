//! Benchmark (issue 9, item 7): `tilec build --target all` (front end + code generation for
//! sm_90a and sm_100a, no ptxas) of generated programs of 50, 100, 200 and 400 sequential
//! statements `for i in 0..2 { a += x @ z; }` on one accumulator — the shape that once took
//! 319 s at 436 statements. Prints the time of each size and the ratio to the previous size,
//! so the growth is read off directly (2.0 per doubling is linear); best of `BUILD_REPEAT`
//! (default 3) runs. Run: `cargo bench -p tilec --bench build_growth`; `BUILD_SIZES=120,140,160`
//! times other sizes (e.g. around the long-function bound, `backend::llvm`).

use std::time::Instant;

#[path = "../tests/programs/mod.rs"]
mod programs;

use tilec::build::{build_source, BuildOptions};
use tilec::frontend::Options;
use tilec::target::Target;

fn main() {
    let repeat: usize = std::env::var("BUILD_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let opts = BuildOptions { targets: Target::ALL.to_vec(), out_dir: None, ptxas: false, write_llvm: false, frontend: Options::default(), cache: None };
    println!("{:>10} {:>12} {:>14}", "statements", "best s", "x previous");
    let mut prev: Option<f64> = None;
    let sizes: Vec<usize> = std::env::var("BUILD_SIZES").ok().map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect()).unwrap_or_else(|| vec![50, 100, 200, 400]);
    for n in sizes {
        let src = programs::sequential_mma_loops(n);
        let best = (0..repeat)
            .map(|_| {
                let t = Instant::now();
                let r = build_source(&src, "generated.tile", &opts).unwrap_or_else(|e| panic!("{n} statements do not build: {e}"));
                assert_eq!(r.built.len(), 2);
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        let ratio = prev.map(|p| format!("{:.2}", best / p)).unwrap_or_else(|| "-".into());
        println!("{n:>10} {best:>12.2} {ratio:>14}");
        prev = Some(best);
    }
}
