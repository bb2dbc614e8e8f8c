//! Value ranges of index values (`ir::ranges`) and the run-time view and gather tests they
//! remove (backend/view.rs): an index inside its tile on every path needs no test; any other
//! keeps its compare and `trap`. The GPU side of a kept test is the gather_trap check case
//! (`scripts/h200-check.sh`: n = 16 must trap).

use tilec::backend::Target;
use tilec::frontend::{check_source, Options};
use tilec::ir::ranges::int_range;
use tilec::ir::Op;

/// `(row range, col range)` of every gather of the one kernel in `src`, in program order.
fn gather_ranges(src: &str) -> Vec<(Option<(i64, i64)>, Option<(i64, i64)>)> {
    let c = check_source(
        src,
        &Options {
            deny_warnings: false,
            targets: vec![Target::Sm90a],
            ..Options::default()
        },
    );
    assert!(c.ok(), "{:?}", c.diags);
    let pk = c.kernels().next().expect("a kernel");
    let k = &pk.kernel;
    let mut out = vec![];
    for (_, d) in k.insts.iter() {
        if let Op::Gather { row, col, .. } = d.op {
            out.push((int_range(k, row), int_range(k, col)));
        }
    }
    out
}

/// Labels of the run-time tests left in the kernel's LLVM IR (before optimisation): `gather.trap`
/// and `view.trap` blocks.
fn traps(src: &str) -> (usize, usize) {
    let opts = tilec::build::BuildOptions {
        write_llvm: true,
        ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a])
    };
    let r = tilec::build::build_source(src, "t.tile", &opts).expect("builds");
    let ll = r.built[0]
        .compiled
        .llvm_ir
        .as_deref()
        .expect("LLVM IR asked for");
    let count = |what: &str| {
        ll.lines()
            .filter(|l| l.starts_with(what) && l.contains(':'))
            .count()
    };
    (count("gather.trap"), count("view.trap"))
}

/// A key-row loop as dqkwg_channel's: per-row gathers of a block's row `blk + s` from a tile 16
/// rows taller (80 rows, as dqkwg_channel's `kx`), a column `band[:, s]`, and `extra` (one more
/// gather, or nothing).
fn key_rows(extra: &str) -> String {
    format!(
        "kernel t(x: f32[80, 32], b: f32[64, 16], y: out f32[64, 32], n: i32) grid(1) threads(256) {{
            let xs: smem = load x[:, :];
            let band: smem = load b[:, :];
            let ib = row_index(64, 1) % 16;
            let blk = row_index(64, 1) - ib;
            let mut acc: tmem f32[64, 32] = zeros(64, 32);
            for t in 0..15 {{
                let sj = 14 - t;
                acc += select(ib > sj, band[:, sj] * xs[16 + blk + sj, :], 0.0){extra};
            }}
            store y[:, :] = acc;
        }}"
    )
}

#[test]
fn key_row_indices_are_bounded_by_their_loops_and_row_index() {
    // xs[16 + blk + sj, :]: sj = 14 − t, t in 0..15 → [0, 14]; blk = r − r % 16 with
    // r = row_index(64, 1) in [0, 63] → a multiple of 16 in [0, 48]; 16 + [0, 48] + [0, 14] =
    // [16, 78]. Two separate row_index(64, 1) calls are one value. (band[:, sj] is a view: its
    // origin sj in [0, 14].)
    let r = gather_ranges(&key_rows(""));
    assert_eq!(r, vec![(Some((16, 78)), Some((0, 31)))]);
    // Both inside (band has 16 columns, xs 80 rows): no run-time test.
    assert_eq!(traps(&key_rows("")), (0, 0));
}

#[test]
fn an_index_that_may_leave_its_tile_keeps_its_test() {
    // xs[blk + sj + 17, :] reaches 48 + 14 + 17 = 79 < 80: no test; xs[blk + sj + 18, :] reaches
    // 80, xs[n + 1, :] from a scalar parameter cannot be bounded, xs[2 · blk, :] reaches 96:
    // those keep a test (at each place the back end evaluates the gather).
    for (extra, kept) in [
        (" + xs[blk + sj + 17, :]", false),
        (" + xs[blk + sj + 18, :]", true),
        (" + xs[n + 1 + 0 * row_index(64, 1), :]", true),
        (" + xs[2 * blk, :]", true),
    ] {
        assert_eq!(traps(&key_rows(extra)).0 > 0, kept, "{extra}");
    }
    // A view whose origin comes from the loop: xs[16 + t..+16, :] ends at row 46 of 96; one
    // from a parameter keeps its test.
    let view = |origin: &str| {
        format!(
            "kernel t(x: f32[96, 32], y: out f32[16, 32], n: i32) grid(1) threads(256) {{
                let xs: smem = load x[:, :];
                let mut acc = zeros(16, 32);
                for t in 0..15 {{ acc += xs[{origin}..+16, :]; }}
                store y[:, :] = acc;
            }}"
        )
    };
    assert_eq!(traps(&view("16 + t")).1, 0);
    assert_eq!(traps(&view("16 + n")).1, 1);
}

#[test]
fn cdiv_is_the_exact_ceiling_in_the_emitted_code_too() {
    // The back end computed cdiv as (x + y − 1) / y in i32: near 2³¹ the sum wrapped (the
    // breaker's case below read row −1 of `xs` with its test proven away) and −4 / 2 came out −1.
    // It now emits the interpreter's formula, so the range rule holds for the GPU too:
    // cdiv(t + 2147483584, 2³⁰) is 2 for every t in 0..64 and the view needs no test.
    let view = |x: &str| {
        format!(
            "kernel t(x: f32[4, 4], y: out f32[1, 4]) grid(1) threads(128) {{
                let xs: smem = load x[:, :];
                let mut acc = zeros(1, 4);
                for t in 0..64 {{ acc += xs[cdiv({x}, 1073741824)..+1, :]; }}
                store y[:, :] = acc;
            }}"
        )
    };
    assert_eq!(traps(&view("t + 2147483584")).1, 0);
    // The emitted arithmetic, folded by LLVM where the operands are constants at O3: each
    // cdiv(n − n + x, y) of the table (any signs) stores the exact ceiling as a PTX immediate.
    let cases = [
        (-4, 2, -2),
        (-5, 2, -2),
        (5, 2, 3),
        (4, 2, 2),
        (5, -2, -2),
        (-5, -2, 3),
        (2147483647, 1073741824, 2),
        (0, 7, 0),
    ];
    for (x, y, want) in cases {
        let src = format!("kernel t(n: i32, o: out i32[1]) grid(1) threads(32) {{ store o[0..+1] = cdiv(n - n + {x}, {y}); }}");
        let opts = tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]);
        let r = tilec::build::build_source(&src, "t.tile", &opts)
            .unwrap_or_else(|e| panic!("{src}: {e:?}"));
        let ptx = &r.built[0].compiled.ptx;
        let stored = ptx
            .lines()
            .find(|l| l.contains("st.global"))
            .unwrap_or_else(|| panic!("{ptx}"));
        assert!(
            stored.trim_end().ends_with(&format!(", {want};")),
            "cdiv({x}, {y}) = {want}: {stored}\n{ptx}"
        );
    }
}

#[test]
fn the_rules_follow_truncating_division_and_give_up_where_they_must() {
    // r in [0, 63]: r / 16 → [0, 3]; cdiv(r, 16) → [0, 4]; (r − 40) % 16: a possibly negative
    // dividend has no rule (truncation keeps its sign); −r → [−63, 0]; min(r, 10) → [0, 10];
    // r · r → [0, 3969]; a select takes the union; r % d with d in [8, 16] → [0, 15]; the
    // multiple of 16 at or below r + 5 in [5, 68] → [0, 64]; of d in [8, 16] → [0, 63] only.
    let src = "kernel t(x: f32[1024, 4], y: out f32[64, 6]) grid(1) threads(128) {
        let xs: smem = load x[:, :];
        let r = row_index(64, 1);
        let g = xs[r / 16, 0] + xs[cdiv(r, 16), 1] + xs[(r - 40) % 16 + 40, 2] + xs[0 - r + 63, 3]
              + xs[min(r, 10), 0] + xs[r * r, 1] + xs[select(r > 3, r, r + 100), 2] + xs[r % select(r > 3, 16, 8), 3]
              + xs[r + 5 - (r + 5) % 16, 0] + xs[r - r % select(r > 3, 16, 8), 1];
        store y[:, :] = g + zeros(64, 6);
    }";
    let rows: Vec<Option<(i64, i64)>> = gather_ranges(src).into_iter().map(|x| x.0).collect();
    assert_eq!(
        rows,
        vec![
            Some((0, 3)),
            Some((0, 4)),
            None,
            Some((0, 63)),
            Some((0, 10)),
            Some((0, 3969)),
            Some((0, 163)),
            Some((0, 15)),
            Some((0, 64)),
            Some((0, 63))
        ]
    );
}

#[test]
fn a_loop_clamped_by_min_bounds_its_index_whatever_the_parameter() {
    // n is any i32, so min(n, 64) ≤ 64 and t in 0..min(n, 64) lies in [0, 63]: the view
    // xs[t + 16..+16, :] ends by row 94 of 96 and needs no test. Without the clamp it keeps one.
    let view = |hi: &str| {
        format!(
            "kernel t(x: f32[96, 32], y: out f32[16, 32], n: i32) grid(1) threads(256) {{
                let xs: smem = load x[:, :];
                let mut acc = zeros(16, 32);
                for t in 0..{hi} {{ acc += xs[t + 16..+16, :]; }}
                store y[:, :] = acc;
            }}"
        )
    };
    assert_eq!(traps(&view("min(n, 64)")).1, 0);
    assert_eq!(traps(&view("min(n, 66)")).1, 1);
    assert_eq!(traps(&view("n")).1, 1);
}
