//! Warp specialisation (issue 9, item 5; `passes::warp_spec`, `backend::warp_spec`): which
//! kernels get a producer warpgroup under `TILEC_WARP_SPECIALIZE`, and what the sm_90a PTX and
//! metadata of gemm then hold — every expected number derived from the register file, the
//! threads and the ring. The GPU side (outputs bitwise equal to the single-role kernel, racecheck,
//! synccheck and memcheck clean, the speed measured) is in docs/results.md.
//!
//! Every test of this binary builds with the variable set (the environment is the process's, and
//! this file is its own test process). Without it nothing changes: every other test binary and
//! the golden PTX build the same kernels single-role.

use tilec::backend::Target;
use tilec::frontend::{check_source, Options};
use tilec::passes::warp_spec::{register_split, PRODUCER_REGISTERS, PRODUCER_THREADS};

fn on() {
    std::env::set_var("TILEC_WARP_SPECIALIZE", "1");
}

fn example(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name)).expect("example")
}

/// Each kernel's warp-specialisation plan on sm_90a.
fn plans(src: &str) -> Vec<(String, Option<tilec::passes::warp_spec::WarpSpecialization>)> {
    on();
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    c.kernels().map(|k| (k.kernel.name.clone(), k.target(Target::Sm90a).expect("sm_90a plan").warp_spec)).collect()
}

/// Builds `src` for sm_90a (ptxas where the set-up installed it) and returns each kernel's PTX
/// and metadata text.
fn build(src: &str, tag: &str) -> Vec<(String, String, tilec_abi::meta::KernelMeta)> {
    on();
    let dir = std::env::temp_dir().join(format!("tilec-ws-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ptxas = std::env::var_os("TILEC_PTXAS").is_some();
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ptxas, ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let r = tilec::build::build_source(src, &format!("{tag}.tile"), &opts).expect("builds");
    let out = r.built.iter().map(|b| (b.kernel.clone(), b.compiled.ptx.clone(), tilec_abi::meta::KernelMeta::load(&dir.join(format!("{}.sm_90a.meta.json", b.kernel))).expect("metadata"))).collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn gemm_gets_a_producer_warpgroup_with_the_registers_split() {
    let src = example("gemm.tile");
    let ws = plans(&src)[0].1.expect("gemm's main loop is warp-specialised");
    let threads = 256; // gemm.tile: threads(256), two consumer warpgroups
    assert_eq!((ws.consumer_threads, ws.launch_threads()), (threads, threads + PRODUCER_THREADS));
    // The register file (65,536 on sm_90a) over 384 threads at entry: 170, 168 in multiples of
    // 8; the CTA holds 168 · 384 = 64,512, the producer keeps 128 · 40 and the consumers get the
    // rest: 59,392 / 256 = 232.
    let file = Target::Sm90a.info().registers_per_sm;
    assert_eq!(ws.entry_registers, file / (threads + PRODUCER_THREADS) / 8 * 8);
    assert_eq!((ws.entry_registers, ws.consumer_registers), (168, 232));

    // `--emit ir` says so.
    let c = check_source(&src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    let pk = c.kernels().next().expect("gemm");
    let report = tilec::passes::layout_report::render(pk.kernel, pk.target(Target::Sm90a).expect("plan"));
    assert!(report.contains("warp-specialised pipelined loop: a producer warpgroup (128 threads, 40 registers) issues `at`, `bt` by TMA copies into 4 stages"), "{report}");
    assert!(report.contains("the 256 consumer threads (232 registers)"), "{report}");

    let built = build(&src, "gemm");
    let (_, ptx, meta) = &built[0];
    assert_eq!(meta.launch.block_threads, threads + PRODUCER_THREADS);
    assert!(ptx.contains(&format!(".maxntid {}", threads + PRODUCER_THREADS)), "launch bound");
    assert!(ptx.contains(&format!(".maxnreg {}", ws.entry_registers)), "register cap at entry");
    assert!(ptx.contains(&format!("setmaxnreg.dec.sync.aligned.u32 \t{PRODUCER_REGISTERS};")));
    assert!(ptx.contains(&format!("setmaxnreg.inc.sync.aligned.u32 \t{};", ws.consumer_registers)));
    // Full and empty mbarriers for each of the 4 stages: the full ones with one arrival (the
    // producer's expect_tx), the empty ones with one per consumer warp.
    assert_eq!(ptx.matches("mbarrier.init.shared.b64").count(), 2 * 4);
    assert_eq!(ptx.matches("mbarrier.arrive.expect_tx").count(), 1, "one issue site: the producer's loop");
    assert_eq!(ptx.matches("mbarrier.arrive.shared.b64").count(), 1, "one hand-back site: the end of a consumer's iteration");
    // CTA barriers: the two around the barriers' initialisation are the whole CTA's; after the
    // split every one is named barrier 1 over the 256 consumers (the fallback copy's and the
    // one after the loop) — none inside the TMA path of the loop.
    let split = ptx.find("setmaxnreg.dec").expect("the split");
    assert_eq!(ptx[..split].matches("bar.sync \t0;").count(), 2);
    assert_eq!(ptx[split..].matches("bar.sync \t0;").count(), 0);
    assert_eq!(ptx[split..].matches(&format!("bar.sync \t1, {threads};")).count(), 2);
    if let Some(p) = &meta.ptxas {
        // ptxas honours the cap: no spill, at most the entry registers.
        assert!(p.registers <= ws.entry_registers, "{} registers", p.registers);
        assert_eq!((p.spill_store_bytes, p.spill_load_bytes), (0, 0));
    }
}

#[test]
fn the_consumers_take_no_more_registers_than_the_producer_gives_back() {
    // `setmaxnreg.inc` waits until the CTA's pool has the registers: at every consumer count
    // the producer's and the consumers' registers after the split fit what the CTA held at
    // entry, the consumers never get fewer than at entry, and both are multiples of 8.
    let info = Target::Sm90a.info();
    for threads in (128..=896).step_by(128) {
        let (entry, consumer) = register_split(info, threads);
        assert!(PRODUCER_THREADS * PRODUCER_REGISTERS + threads * consumer <= entry * (threads + PRODUCER_THREADS), "{threads} threads: {entry} / {consumer}");
        assert!(consumer >= entry && consumer <= info.max_registers_per_thread, "{threads} threads: {entry} / {consumer}");
        assert_eq!((entry % 8, consumer % 8), (0, 0));
    }
    // 512 consumers: 65,536 / 640 = 102 → 96 at entry; (96 · 640 − 5,120) / 512 = 110 → 104
    // (from the whole file, 118 → 112, it asked for 8 · 512 registers the pool never had).
    assert_eq!(register_split(info, 512), (96, 104));
}

#[test]
fn only_a_matrix_products_main_loop_is_specialised() {
    // K#1: elementwise work on loop-carried registers inside the loop, a tile load before it.
    for (name, ws) in plans(&example("k1_reverse_scan.tile")) {
        assert!(ws.is_none(), "{name}");
    }
    let gemm = example("gemm.tile");
    // A declared residency caps the registers itself.
    let capped = gemm.replace("threads(256)", "threads(256) ctas_per_sm(1)");
    assert_ne!(capped, gemm);
    assert!(plans(&capped)[0].1.is_none());
    // No room for another warpgroup: 1,024 threads already.
    let full = gemm.replace("threads(256)", "threads(1024)");
    assert!(plans(&full)[0].1.is_none());
    // 384 consumers: 152 registers each, short of gemm's 128 floats of accumulator and the
    // headroom ptxas needs (it asked for 154, C7602); the single-role kernel builds at 161.
    let wide = gemm.replace("threads(256)", "threads(384)");
    assert_eq!(register_split(Target::Sm90a.info(), 384).1, 152);
    assert!(plans(&wide)[0].1.is_none());
    // An accumulator set from more than a scalar before the loop: the producer warpgroup would
    // compute it too (rows past the tile, memory the consumers share).
    // (At BN = 128, where such an accumulator's buffer fits; a zero start is specialised there.)
    let narrow = gemm.replace("const BN = 256;", "const BN = 128;");
    assert!(plans(&narrow)[0].1.is_some());
    let init = narrow.replace("= zeros(BM, BN);", "= zeros(BM, BN) + f32(row_index(BM, BN));");
    assert_ne!(init, narrow);
    assert!(plans(&init)[0].1.is_none());
    // A store in the loop body (still a TMA ring with its MMA in flight, but not only the
    // main loop of a product).
    let body = gemm.replace("acc += at @ bt;", "acc += at @ bt;\n        store c[m0, n0] = 0.0;");
    assert_ne!(body, gemm);
    assert!(plans(&body)[0].1.is_none());
}
