//! TMEM planner tests through the whole front end: plan fixtures with expected offsets,
//! the lifecycle invariants, the 512-column limit as a property, and determinism.

use proptest::prelude::*;

use tilec::frontend::{check_source, Options};
use tilec::ir::{validate, Op};
use tilec::passes::tmem_plan::legal_alloc_columns;

fn example(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `(name, offset, columns)` of every buffer of the first kernel's plan.
fn offsets(src: &str) -> (u32, Vec<(String, u32, u32)>) {
    let c = check_source(src, &Options::default());
    assert!(c.ok(), "{}", c.diags.render("x", src, false));
    let p = &c.plans[0];
    (p.alloc_columns, p.buffers.iter().map(|b| (b.name.clone(), b.offset, b.columns)).collect())
}

#[test]
fn legal_alloc_sizes() {
    let cases = [(0, Some(32)), (1, Some(32)), (32, Some(32)), (33, Some(64)), (128, Some(128)), (129, Some(256)), (448, Some(512)), (512, Some(512)), (513, None), (544, None)];
    for (cols, want) in cases {
        assert_eq!(legal_alloc_columns(cols), want, "{cols} columns");
    }
}

#[test]
fn plan_fixture_k1_scalar() {
    // d and dvn are f32 [*, BV], BV = 32: 32 columns each, co-live, so 64 allocated.
    let (alloc, bufs) = offsets(&example("k1_reverse_scan.tile"));
    assert_eq!(alloc, 64);
    assert_eq!(bufs, vec![("d".into(), 0, 32), ("dvn".into(), 32, 32)]);
}

#[test]
fn plan_fixture_disjoint_reuse() {
    let (alloc, bufs) = offsets(&example("tmem_reuse_disjoint.tile"));
    assert_eq!(alloc, 512);
    assert_eq!(bufs, vec![("acc".into(), 0, 512), ("xt".into(), 0, 32), ("acc2".into(), 32, 256)]);
}

#[test]
fn plan_fixture_k2() {
    let (alloc, bufs) = offsets(&example("k2_wy_vjp.tile"));
    assert_eq!(alloc, 256);
    let names: Vec<&str> = bufs.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(names, ["dt", "dxv", "t1", "t2", "kk", "dxk", "dmk"]);
    // dxv is one [C, BVB = 64] block of the V loop, beside dt; the inverse VJP's t1 and t2 reuse
    // dt's columns once the loop is done; dxk (128 columns, made after the inverse VJP) reuses
    // all of them, and dmk, live beside it, the next 128 — 256 in all. dMᵀ (β ⊙ K) accumulates
    // into dxk's own columns: no buffer of its own.
    assert_eq!(bufs[1], ("dxv".into(), 64, 64));
    assert_eq!(bufs[2], ("t1".into(), 0, 64), "t1 reuses dt's columns");
    assert_eq!(bufs[5], ("dxk".into(), 0, 128), "dxk reuses the columns of dt, t1, t2 and kk");
    assert_eq!(bufs[6], ("dmk".into(), 128, 128), "dmk beside dxk");
}

#[test]
fn planned_kernels_have_one_lifecycle_and_validate() {
    for f in ["gemm.tile", "k1_reverse_scan.tile", "k2_wy_vjp.tile", "tmem_reuse_disjoint.tile"] {
        let c = check_source(&example(f), &Options::default());
        for k in &c.module.kernels {
            validate::validate(k).unwrap_or_else(|e| panic!("{f}: {e:?}"));
            let (mut a, mut r, mut d) = (0, 0, 0);
            k.walk(|i| match k.insts[i].op {
                Op::TmemAlloc { .. } => a += 1,
                Op::TmemRelinquish => r += 1,
                Op::TmemDealloc { .. } => d += 1,
                _ => {}
            });
            assert_eq!((a, r, d), (1, 1, 1), "{f}: {}", k.name);
        }
    }
}

#[test]
fn overflow_904_names_both_buffers_and_the_numbers() {
    let src = example("negative/tmem_overflow_904.tile");
    let c = check_source(&src, &Options::default());
    let d = c.diags.iter().find(|d| d.code.as_str() == "E0402").expect("E0402 reported");
    assert!(d.message.contains("544") && d.message.contains("512"), "{}", d.message);
    let labelled: Vec<&str> = d.labels.iter().map(|l| &src[l.span.range()]).collect();
    assert_eq!(labelled, ["acc", "xt"]);
    assert!(d.notes.iter().any(|n| n.contains("512 columns + `xt` 32 columns = 544")));
}

#[test]
fn plans_are_deterministic_across_runs() {
    let src = example("k2_wy_vjp.tile");
    let first = format!("{:?}", check_source(&src, &Options::default()).plans);
    for _ in 0..5 {
        assert_eq!(format!("{:?}", check_source(&src, &Options::default()).plans), first);
    }
}

/// A kernel with `n` accumulators of the given widths, all live together or each dead before
/// the next starts.
fn accumulators(widths: &[u32], co_live: bool) -> String {
    let mut s = String::from("kernel k(a: bf16[N, 64], b: bf16[64, 512], y: out f32[N, 512]) grid(cdiv(N, 128)) {\n");
    s += "  let m0 = program_id(0) * 128;\n  let at: smem = load a[m0..+128, :];\n";
    for (i, w) in widths.iter().enumerate() {
        s += &format!("  let b{i}: smem = load b[:, 0..+{w}];\n  let p{i}: tmem = at @ b{i};\n");
        if !co_live {
            s += &format!("  store y[m0..+128, 0..+{w}] = p{i};\n");
        }
    }
    if co_live {
        for (i, w) in widths.iter().enumerate() {
            s += &format!("  store y[m0..+128, 0..+{w}] = p{i};\n");
        }
    }
    s + "}\n"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn over_512_co_live_columns_is_an_error_and_under_is_a_plan(widths in prop::collection::vec(1u32..=8, 1..6), co_live in any::<bool>()) {
        let widths: Vec<u32> = widths.into_iter().map(|w| w * 64).collect();
        let src = accumulators(&widths, co_live);
        // The TMEM planner alone: no per-target planning, whose shared-memory budget (E0405)
        // these wide accumulators would exceed when staged through shared memory.
        let c = check_source(&src, &Options { targets: vec![], ..Options::default() });
        let demand: u32 = if co_live { widths.iter().sum() } else { *widths.iter().max().unwrap() };
        if demand > 512 {
            prop_assert!(c.diags.iter().any(|d| d.code.as_str() == "E0402" && d.message.contains(&demand.to_string())));
        } else {
            prop_assert!(c.ok(), "{}", c.diags.render("x", &src, false));
            let p = &c.plans[0];
            prop_assert!(p.alloc_columns >= p.extent && p.alloc_columns <= 512);
            prop_assert_eq!(p.peak_columns, demand);
        }
    }
}
