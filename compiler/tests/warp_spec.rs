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
use tilec::passes::warp_spec::{PRODUCER_REGISTERS, PRODUCER_THREADS};

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
    let opts = tilec::build::BuildOptions { targets: vec![Target::Sm90a], out_dir: Some(dir.clone()), ptxas, write_llvm: false, frontend: Options::default(), cache: None };
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
    // The register file (65,536 on sm_90a) over 384 threads at entry; what the producer gives
    // back goes to the consumers; both multiples of 8.
    let file = Target::Sm90a.info().registers_per_sm;
    assert_eq!(ws.entry_registers, file / (threads + PRODUCER_THREADS) / 8 * 8);
    assert_eq!(ws.consumer_registers, (file - PRODUCER_THREADS * PRODUCER_REGISTERS) / threads / 8 * 8);
    assert_eq!((ws.entry_registers, ws.consumer_registers), (168, 232));
    // The producer's and the consumers' registers fill at most the file.
    assert!(PRODUCER_THREADS * PRODUCER_REGISTERS + threads * ws.consumer_registers <= file);

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
    // A store in the loop body (still a TMA ring with its MMA in flight, but not only the
    // main loop of a product).
    let body = gemm.replace("acc += at @ bt;", "acc += at @ bt;\n        store c[m0, n0] = 0.0;");
    assert_ne!(body, gemm);
    assert!(plans(&body)[0].1.is_none());
}
