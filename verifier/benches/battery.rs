//! Benchmark: the full battery on a CPU candidate with 1M output elements (target < 10 s).
//! The honest f32 softmax at R=1024, N=1024 (1,048,576 outputs); CMP-03 then also visits
//! 2x / 4x the reduction length and the envelope maxima. Run with `cargo bench -p kverify --bench battery`.

use kverify::battery::{self, Options};
use kverify::candidate::inprocess::honest;
use kverify::error_model::Precision;
use kverify::references::op_by_id;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let op = op_by_id("softmax").expect("softmax registered");
    let dims = op.native().with("R", 1024).with("N", 1024);
    let opts = Options { time_limit: Duration::from_secs(60), dims: Some(dims), gates: None };
    let t0 = Instant::now();
    let r = battery::run(Arc::new(honest(&op, Precision::F32)), None, &opts).expect("battery runs");
    let secs = t0.elapsed().as_secs_f64();
    print!("{}", battery::table(&r));
    println!("battery on 1,048,576 output elements: {secs:.2} s (target < 10 s), verdict {:?}", r.verdict);
}
