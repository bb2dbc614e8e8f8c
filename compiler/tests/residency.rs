//! `ctas_per_sm([target:] N)` (docs/language.md, "Residency"): the shared-memory planner's ring
//! choice under a declared residency, the register and tensor-memory floors it is checked
//! against (E0406, E0402), the thread-limit and repeat errors that need more than one target to
//! show, and the launch bounds in the PTX — every expected value derived from tile shapes and
//! the target's limits. The diagnostics that fit a fixture are in tests/ui/launch_bounds.tile.

use tilec::backend::Target;
use tilec::diag::Diagnostic;
use tilec::frontend::{check_source, Options};
use tilec::passes::residency::register_budget;
use tilec::passes::target_plan::TargetPlan;

fn example(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name)).expect("example")
}

fn check(src: &str, targets: &[Target]) -> (Vec<(String, Vec<TargetPlan>)>, Vec<Diagnostic>) {
    let c = check_source(src, &Options { deny_warnings: false, targets: targets.to_vec(), ..Options::default() });
    let plans = if c.ok() { c.kernels().map(|k| (k.kernel.name.clone(), targets.iter().map(|&t| k.target(t).expect("plan").clone()).collect())).collect() } else { vec![] };
    (plans, c.diags.iter().cloned().collect())
}

/// K#1 as shipped, and declared for three CTAs per SM on `target` ("" for every target).
fn k1_declared(target: &str) -> (String, String) {
    let src = example("k1_reverse_scan.tile");
    assert_eq!(src.matches(") threads(128)\n").count(), 2, "both K#1 kernels end their head with threads(128)");
    let declared = src.replace(") threads(128)\n", &format!(") threads(128) ctas_per_sm({target}3)\n"));
    (src, declared)
}

fn plans(src: &str) -> Vec<(String, TargetPlan)> {
    let (p, d) = check(src, &[Target::Sm90a]);
    assert!(d.iter().all(|d| d.severity != tilec::diag::Severity::Error), "{d:?}");
    p.into_iter().map(|(n, mut v)| (n, v.remove(0))).collect()
}

/// The one error of `src` on `targets`, which must have code `code`.
fn error(src: &str, targets: &[Target], code: &str) -> Diagnostic {
    let (_, d) = check(src, targets);
    let errs: Vec<&Diagnostic> = d.iter().filter(|d| d.severity == tilec::diag::Severity::Error).collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].code.as_str(), code, "{:?}", errs[0]);
    errs[0].clone()
}

#[test]
fn a_declared_residency_takes_the_deepest_ring_that_keeps_it() {
    // gemm with BN = 128: a ring stage is a 128 x 64 and a 64 x 128 bf16 tile, 32 KiB; the
    // accumulator, 128 x 128 f32 over 256 threads, 64 floats per thread. Undeclared, the MMA
    // stays in flight in the deepest ring that fits one CTA: 4 stages. Declared, the deepest
    // ring with N · (bytes + 1 KiB) <= 233,472: 3 stages for two CTAs, 2 for three.
    let info = Target::Sm90a.info();
    let stage = 128 * 64 * 2 + 64 * 128 * 2;
    let gemm = |attr: &str| example("gemm.tile").replace("const BN = 256;", "const BN = 128;").replace("threads(256)", &format!("threads(256){attr}"));
    let stages = |tp: &TargetPlan| tp.pipelines.values().flatten().next().expect("gemm's loop is pipelined").stages;
    let ps = plans(&gemm(""));
    assert_eq!((stages(&ps[0].1), ps[0].1.resident_ctas(256)), (4, 1));
    for (n, want) in [(2, 3), (3, 2)] {
        let ps = plans(&gemm(&format!(" ctas_per_sm(sm_90a: {n})")));
        let tp = &ps[0].1;
        assert_eq!(stages(tp), want, "{n} CTAs");
        assert!(n * (tp.smem_bytes() + info.smem_reserved_per_cta) <= info.smem_per_sm, "{n}: {} B", tp.smem_bytes());
        assert!(n * (tp.smem_bytes() + stage + info.smem_reserved_per_cta) > info.smem_per_sm, "{n}: a deeper ring would have kept them");
        assert_eq!(tp.resident_ctas(256), n);
    }
    // Four: 65,536 / (4 · 256) = 64 registers per thread, which the accumulator alone takes.
    let d = error(&gemm(" ctas_per_sm(sm_90a: 4)"), &[Target::Sm90a], "E0406");
    assert!(d.message.contains("alone needs 64 registers per thread"), "{}", d.message);
    // Eight (2,048 threads) on gemm as shipped: shared memory is refused first, naming the
    // four that the plan without a ring (48 KiB + 1 KiB reserved per CTA) holds.
    let d = error(&example("gemm.tile").replace("threads(256)", "threads(256) ctas_per_sm(sm_90a: 8)"), &[Target::Sm90a], "E0405");
    assert!(d.message.contains("asks for 8 CTAs per SM on sm_90a, but its shared memory holds 4"), "{}", d.message);
}

#[test]
fn one_cta_per_sm_declared_is_the_plan_without_a_declaration() {
    // The ring rule among plans that keep N: N = 1 keeps every plan, so the usual choice
    // stands (K#1 on sm_90a: one stage, three CTAs by shared memory; the W = 0 instances, with
    // one copy fewer per iteration, a two-stage ring at two), not the deepest ring at one CTA
    // per SM.
    let (src, _) = k1_declared("");
    let with_1 = plans(&src.replace(") threads(128)\n", ") threads(128) ctas_per_sm(sm_90a: 1)\n"));
    let without = plans(&src);
    for ((n, a), (_, b)) in with_1.iter().zip(&without) {
        let stages = |tp: &TargetPlan| tp.pipelines.values().flatten().map(|p| p.stages).collect::<Vec<_>>();
        assert_eq!((a.smem_bytes(), stages(a)), (b.smem_bytes(), stages(b)), "{n}");
        assert_eq!(a.resident_ctas(128), if n.ends_with("_w0") { 2 } else { 3 }, "{n}");
    }
}

#[test]
fn a_register_accumulator_larger_than_the_budget_is_e0406() {
    // gemm: a 128 x 256 f32 accumulator over 256 threads is 128 floats per thread; two CTAs of
    // 256 threads leave 65,536 / 512 = 128 registers each, so the accumulator alone fills them.
    let info = Target::Sm90a.info();
    assert_eq!(register_budget(info, 2, 256), 128);
    let d = error(&example("gemm.tile").replace("threads(256)", "threads(256) ctas_per_sm(sm_90a: 2)"), &[Target::Sm90a], "E0406");
    assert!(d.message.contains("its accumulator `acc` alone needs 128 registers per thread"), "{}", d.message);
    assert!(d.notes.iter().any(|n| n.contains("leave 128 registers per thread")), "{:?}", d.notes);
    // sm_100a keeps the accumulator in tensor memory: no register floor there (shared memory
    // decides: one CTA of 132,096 B).
    let d = error(&example("gemm.tile").replace("threads(256)", "threads(256) ctas_per_sm(sm_100a: 2)"), &[Target::Sm100a], "E0405");
    assert!(d.message.contains("but its shared memory holds 1"), "{}", d.message);
}

#[test]
fn tensor_memory_columns_bound_the_residency_on_sm_100a() {
    // Four co-live f32[128, 128] accumulators: 4 x 128 = 512 columns, the whole SM's tensor
    // memory, so a second CTA would wait in tcgen05.alloc.
    let src = "kernel tm(a: bf16[M, 64], b: bf16[64, 128], c: out f32[M, 128]) grid(cdiv(M, 128)) threads(128) ctas_per_sm(sm_100a: N) {
        let m0 = program_id(0) * 128;
        let at: smem = load a[m0..+128, :];
        let bt: smem = load b[:, :];
        let d0: tmem f32[128, 128] = at @ bt;
        let d1: tmem f32[128, 128] = at @ bt;
        let d2: tmem f32[128, 128] = at @ bt;
        let d3: tmem f32[128, 128] = at @ bt;
        store c[m0..+128, :] = d0;
        store c[m0..+128, :] = d1;
        store c[m0..+128, :] = d2;
        store c[m0..+128, :] = d3;
    }";
    let d = error(&src.replace("sm_100a: N", "sm_100a: 2"), &[Target::Sm100a], "E0402");
    assert!(d.message.contains("each allocates 512 tensor-memory columns"), "{}", d.message);
    assert!(d.notes.iter().any(|n| n.contains("ctas_per_sm(sm_100a: 1)")), "{:?}", d.notes);
    let (p, d) = check(&src.replace("sm_100a: N", "sm_100a: 1"), &[Target::Sm100a]);
    assert!(p.len() == 1 && d.is_empty(), "{d:?}");
}

#[test]
fn a_repeat_is_reported_even_when_the_first_value_was_refused() {
    let src = "kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(cdiv(N, 64)) threads(128) ATTRS {
        store y[program_id(0) * 64..+64, :] = load x[program_id(0) * 64..+64, :];
    }";
    let (_, d) = check(&src.replace("ATTRS", "ctas_per_sm(0) ctas_per_sm(2)"), &Target::ALL);
    let msgs: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(msgs[0] == "0 CTAs per SM" && msgs[1].starts_with("`ctas_per_sm` given twice for"), "{msgs:?}");
    // A thread count in error: its error alone (the limits would be stated for 128 threads).
    let (_, d) = check(&src.replace("threads(128) ATTRS", "threads(100) ctas_per_sm(17)"), &Target::ALL);
    let msgs: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs, vec!["100 threads per CTA"]);
}

#[test]
fn a_deep_value_is_e0103_not_a_stack_overflow() {
    // A left-deep sum does not grow the parser's stack, but constant evaluation recurses.
    let sum = format!("0{}", "+0".repeat(30_000));
    let src = format!("kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(cdiv(N, 64)) threads(128) ctas_per_sm({sum} + 3) {{
        store y[program_id(0) * 64..+64, :] = load x[program_id(0) * 64..+64, :];
    }}");
    let (_, d) = check(&src, &Target::ALL);
    assert!(d.iter().any(|d| d.code.as_str() == "E0103"), "{:?}", d.iter().map(|d| &d.message).collect::<Vec<_>>());
}

#[test]
fn ptxas_out_of_registers_names_the_declaration() {
    // A 64 x 128 f32 accumulator over 128 threads is 64 floats per thread, under the 80 that six
    // CTAs leave (65,536 / 768 = 85, 80 in units of 8), so the check passes; ptxas needs some
    // tens more for addresses and descriptors and stops. The build says what set the budget.
    if tilec::artifact::find_ptxas().is_none() {
        eprintln!("skipping: ptxas not found (run scripts/setup.sh; CI has it)");
        return;
    }
    assert_eq!(register_budget(Target::Sm90a.info(), 6, 128), 80);
    let src = "kernel acc(a: bf16[M, K], b: bf16[K, 128], c: out f32[M, 128]) grid(cdiv(M, 64)) threads(128) ctas_per_sm(sm_90a: 6) {
        let m0 = program_id(0) * 64;
        let mut d: tmem f32[64, 128] = zeros(64, 128);
        for kk in 0..cdiv(K, 64) {
            let at: smem = load a[m0..+64, kk * 64..+64];
            let bt: smem = load b[kk * 64..+64, :];
            d += at @ bt;
        }
        store c[m0..+64, :] = d;
    }";
    let dir = std::env::temp_dir().join(format!("tilec-residency-{}", std::process::id()));
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ptxas: true, ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let e = tilec::build::build_source(src, "acc.tile", &opts).err().expect("ptxas runs out of registers");
    let text = e.to_string();
    assert!(text.contains("Insufficient registers (80)"), "{text}");
    assert!(text.contains("\nhelp: `ctas_per_sm(sm_90a: 6)` in kernel `acc` leaves ptxas 80 registers per thread (6 CTAs of 128 threads)"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_kernel_whose_registers_do_not_fit_one_cta_is_refused_at_build() {
    // gemm at threads(640), no launch bounds: ptxas gives each thread what the accumulator and
    // addresses take (161 registers when measured); 20 warps at that many registers (allocated
    // per warp in units of 256) are more than an SM's 65,536, so the launch would fail. The build
    // says so, with the most threads that fit; threads(256) builds.
    let ptxas = tilec::artifact::find_ptxas();
    assert!(ptxas.is_some(), "ptxas is needed: run scripts/setup.sh and source .tools/env.sh (CI does)");
    let gemm = example("gemm.tile");
    let wide = gemm.replace("threads(256)", "threads(640)");
    assert_ne!(wide, gemm);
    let dir = std::env::temp_dir().join(format!("tilec-launchable-{}", std::process::id()));
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ptxas: true, ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let e = tilec::build::build_source(&wide, "gemm.tile", &opts).err().expect("the build refuses a kernel that cannot launch");
    let text = e.to_string();
    let registers: u32 = text.split("ptxas gave it ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let per_warp = (registers * 32).div_ceil(256) * 256;
    assert!(640 / 32 * per_warp > 65_536, "{text}");
    assert!(text.contains(&format!("640 threads per CTA take {} of the 65536 an SM has", 640 / 32 * per_warp)), "{text}");
    assert!(text.contains(&format!("a CTA has room for {} threads", 65_536 / per_warp * 32)), "{text}");
    // The shipped 256 threads fit: 8 warps.
    let r = tilec::build::build_source(&gemm, "gemm.tile", &opts).expect("gemm builds");
    let p = r.built[0].meta.ptxas.as_ref().expect("ptxas figures");
    assert!(256 / 32 * (p.registers * 32).div_ceil(256) * 256 <= 65_536);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_residency_that_drops_the_copy_ring_is_w0505() {
    // K#1 declared for three CTAs on every target: on sm_100a (accumulators in tensor memory)
    // its 83 KB one-stage ring keeps two, so the planner drops the ring to keep three — a
    // warning at the declaration, per kernel; sm_90a keeps its ring at three. Declared for
    // sm_90a only, or not at all (as shipped), no warning.
    let (src, every) = k1_declared("");
    let (_, d) = check(&every, &Target::ALL);
    let w: Vec<&Diagnostic> = d.iter().filter(|d| d.code.as_str() == "W0505").collect();
    assert_eq!(w.len(), 2, "{d:?}");
    for x in &w {
        assert!(x.message.contains("copies unpipelined on sm_100a: no copy ring keeps 3 CTAs per SM"), "{}", x.message);
        assert!(x.notes.iter().any(|n| n.contains("a 1-stage ring at 2 CTAs per SM")), "{:?}", x.notes);
    }
    for src in [src, k1_declared("sm_90a: ").1] {
        let (_, d) = check(&src, &Target::ALL);
        assert!(d.is_empty(), "{d:?}");
    }
}

#[test]
fn k1_declared_for_three_ctas_gets_launch_bounds_and_fresh_thread_indices() {
    // K#1 with `ctas_per_sm(sm_90a: 3)` (the thirteenth session's form, measured slower on the
    // H200): launch bounds for ptxas on sm_90a, the fragment loops read the thread index anew
    // (more than one read), registers that let three CTAs of 128 threads share the register
    // file (3 · 128 · registers ≤ 65,536) without spills; nothing on sm_100a.
    let (_, declared) = k1_declared("sm_90a: ");
    let dir = std::env::temp_dir().join(format!("tilec-residency-k1-{}", std::process::id()));
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ptxas: true, ..tilec::build::BuildOptions::ptx_only(Target::ALL.to_vec()) };
    let r = tilec::build::build_source(&declared, "k1_reverse_scan.tile", &opts).expect("builds");
    assert_eq!(r.built.len(), 12); // k1_scan_scalar, k1_scan_channel and their bf16-dU and W = 0 instances x 2 targets
    for b in &r.built {
        let stem = format!("{}.{}", b.kernel, b.target);
        let bounded = b.target == Target::Sm90a;
        assert_eq!(b.compiled.ptx.contains(".maxntid 128") && b.compiled.ptx.contains(".minnctapersm 3"), bounded, "{stem}: launch bounds");
        assert_eq!(b.compiled.ptx.matches("%tid.x").count() > 2, bounded, "{stem}: thread-index reads");
        // The declaration lets ptxas spill on its target (RES-02 reads the contract), nowhere else.
        assert_eq!(b.meta.contract.no_spill, !bounded, "{stem}: contract.no_spill");
        if let (true, Some(p)) = (r.ptxas_ran && bounded, b.meta.ptxas.as_ref()) {
            assert_eq!(p.spill_store_bytes, 0, "{stem} spills");
            assert!(3 * 128 * p.registers <= 65_536, "{stem}: {} registers do not let 3 CTAs share an SM", p.registers);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PTX lines of each loop (a label up to the last branch back to it) of `ptx`.
fn ptx_loops(ptx: &str) -> Vec<Vec<&str>> {
    let lines: Vec<&str> = ptx.lines().collect();
    let mut out = vec![];
    for (i, l) in lines.iter().enumerate() {
        let Some(label) = l.strip_suffix(':').filter(|x| x.starts_with("$L__BB")) else { continue };
        let back = lines.iter().enumerate().skip(i + 1).filter(|(_, b)| b.contains("bra") && b.trim_end().ends_with(&format!("{label};"))).map(|(j, _)| j).last();
        if let Some(j) = back {
            out.push(lines[i..=j].to_vec());
        }
    }
    out
}

#[test]
fn a_short_loop_without_products_reads_the_thread_index_before_it() {
    // A key-row loop as dqkwg_channel's in a kernel declared for two CTAs per SM (fragment loops
    // read the thread index anew, `fragment_tid`): with 15 steps (SHORT_LOOP = 16) the fragment
    // loops of its body share one read before the loop, so the loop itself reads none and LLVM
    // adds each step's row stride to offsets computed once; with 17 steps every step reads it.
    let src = |steps: u32| {
        format!(
            "kernel t(x: f32[96, 32], b: f32[64, 32], y: out f32[64, 32]) grid(1) threads(256) ctas_per_sm(sm_90a: 2) {{
                let xs: smem = load x[:, :];
                let band: smem = load b[:, :];
                let ib = row_index(64, 1) % 16;
                let blk = row_index(64, 1) - ib;
                let mut e: tmem f32[64, 32] = full(64, 32, 1.0);
                let mut acc: tmem f32[64, 32] = zeros(64, 32);
                for t in 0..{steps} {{
                    let sj = 14 - t % 15;
                    e = select(ib > sj, e * xs[16 + blk + sj, :], e);
                    acc += select(ib > sj, band[:, sj] * xs[blk + sj, :] * e, 0.0);
                }}
                store y[:, :] = acc;
            }}"
        )
    };
    for (steps, inside) in [(15, false), (17, true)] {
        let r = tilec::build::build_source(&src(steps), "t.tile", &tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a])).expect("builds");
        let ptx = &r.built[0].compiled.ptx;
        let loops = ptx_loops(ptx);
        let step = loops.iter().find(|l| l.iter().any(|x| x.contains("mul.rn.f32"))).unwrap_or_else(|| panic!("no loop of products in\n{ptx}"));
        assert_eq!(step.iter().any(|x| x.contains("%tid.x")), inside, "{steps} steps:\n{}", step.join("\n"));
        assert!(ptx.matches("%tid.x").count() >= 2, "{steps} steps: fragment loops read the thread index anew");
    }
}
