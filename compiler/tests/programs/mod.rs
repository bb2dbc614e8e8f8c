//! Generated programs shared by tests and benches.
#![allow(dead_code)]

/// `n` sequential statements `for i in 0..2 { a += x @ z; }` on one accumulator: the program
/// that once overflowed a code-generation thread's stack at 436 statements and took 319 s to
/// build (issue 13; issue 9, item 7).
pub fn sequential_mma_loops(n: usize) -> String {
    let body: Vec<&str> = std::iter::repeat_n("    for i in 0..2 { a += x @ z; }", n).collect();
    format!(
        "kernel many(xa: bf16[128, 64], za: bf16[64, 64], y: out f32[128, 64]) grid(1) threads(128) {{
    let x: smem = load xa[:, :];
    let z: smem = load za[:, :];
    let mut a: tmem f32[128, 64] = zeros(128, 64);
{}
    store y[:, :] = a;
}}
",
        body.join("\n")
    )
}
