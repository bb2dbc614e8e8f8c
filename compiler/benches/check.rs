//! Benchmark: `tilec check` (parse → lower → validate → lints → TMEM plan) of each shipped
//! example, in-process, median of 50 runs. Target: under 50 ms each in a release build.
//! Run: `cargo bench -p tilec --bench check`.

use std::time::Instant;

use tilec::frontend::{check_source, Options};

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples");
    let mut files: Vec<_> = std::fs::read_dir(&root).expect("dsl-examples").filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "tile")).collect();
    files.sort();
    println!("{:<28} {:>12} {:>12}  (target < 50 ms)", "example", "median ms", "max ms");
    for f in files {
        let src = std::fs::read_to_string(&f).expect("read example");
        let mut times: Vec<f64> = (0..50)
            .map(|_| {
                let t = Instant::now();
                let c = check_source(&src, &Options::default());
                assert!(c.ok());
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        println!("{:<28} {:>12.3} {:>12.3}  {}", name, times[times.len() / 2], times[times.len() - 1], if times[times.len() / 2] < 50.0 { "ok" } else { "SLOW" });
    }
}
