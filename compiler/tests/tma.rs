//! TMA on sm_90a (issue 9, item 3): which pipelined loads become tensor-map copies, the boxes
//! and swizzles, the ring depth (with the resident-CTA rule), the metadata records and the PTX —
//! every expected value derived from the tile shapes. The GPU side (results equal to the
//! interpreter with and without usable maps) is `scripts/h200-check.sh`.

use tilec::backend::Target;
use tilec::frontend::{check_source, Options};
use tilec::layout::swizzle::Swizzle;
use tilec::passes::target_plan::TargetPlan;

fn plans(src: &str) -> Vec<(String, TargetPlan)> {
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    c.kernels().map(|k| (k.kernel.name.clone(), k.target(Target::Sm90a).expect("sm_90a plan").clone())).collect()
}

/// Builds example `name` for sm_90a (no ptxas) into a fresh temporary folder `tilec-<tag>-<pid>`.
fn build_sm90a(name: &str, tag: &str) -> (std::path::PathBuf, tilec::build::BuildReport) {
    let dir = std::env::temp_dir().join(format!("tilec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name);
    let (_, r) = tilec::build::build_file(&path, &opts).expect("the example builds");
    (dir, r)
}

fn example(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name)).expect("example")
}

#[test]
fn gemm_operands_are_tma_copies_into_128b_swizzled_rings() {
    let ps = plans(&example("gemm.tile"));
    let tp = &ps[0].1;
    // `at` = a[m0..+128, k..+64]: a 64-column bf16 row is 128 bytes, one 128B panel, box
    // [128 rows, 64]; `bt` = b[k..+64, n0..+256]: four 64-column panels, box [64, 64].
    let maps: Vec<(Vec<u32>, Option<Swizzle>)> = tp.tma.maps.iter().map(|m| (m.box_dims.clone(), m.swizzle)).collect();
    assert_eq!(maps, vec![(vec![128, 64], Some(Swizzle::B128)), (vec![64, 64], Some(Swizzle::B128))]);
    let loads: Vec<(u32, u32)> = tp.tma.loads.values().flatten().map(|l| (l.panels, l.bytes)).collect();
    assert_eq!(loads, vec![(1, 128 * 64 * 2), (4, 64 * 256 * 2)]);
    let p = tp.pipelines.values().flatten().next().expect("gemm's loop is pipelined");
    // The MMA stays in flight: the deepest ring that fits, 4 stages of (16 + 32) KiB.
    assert_eq!((p.stages, p.overlap_mma, p.distance()), (4, true, 2));
    // The header holds the mbarriers from byte 16 and keeps stages 1024-byte aligned.
    assert_eq!(tp.header_bytes, 1024);
    assert_eq!(tp.tma.loops.values().flatten().copied().collect::<Vec<_>>(), vec![16]);
    for (v, ring) in tp.smem.rings.iter() {
        if let Some((stages, stride)) = ring {
            assert_eq!(*stages, 4);
            assert_eq!((tp.header_bytes + tp.smem.vars[v].expect("placed")) % 1024, 0);
            assert_eq!(stride % 1024, 0);
        }
    }
}

#[test]
fn k1_rings_keep_three_ctas_per_sm_by_shared_memory() {
    let ps = plans(&example("k1_reverse_scan.tile"));
    let (swz, row) = (|c: u32| (vec![1, 64, 1, c], Some(Swizzle::B128)), |c: u32| (vec![1, 64, 1, c], None));
    // dv (64 x 32 bf16: 64-byte rows) is read in dvn's fragment order (`dvn += dv`): 64B swizzle.
    let b64 = (vec![1, 64, 1, 32], Some(Swizzle::B64));
    for (name, tp) in &ps {
        // Rank-4 tensors: box 1 on the point dimensions. Both kernels load k (kg) and q (qg)
        // as wgmma operands (K = 128: two 128B panels) — k1_scan_scalar scales the C x BV
        // products by its per-row gate, k1_scan_channel takes them gated — in the body's
        // order: k, q, dout (v0..+32, a plain tile), dv (swizzled, above; loaded after
        // `d += qᵀ·do` so that product runs while `k·bf16(d)` is in flight), w. k1_scan_scalar's gate column
        // g[b, t0..+64, h] (4 bytes a row) has no box and stays a cp.async copy.
        let boxes: Vec<(Vec<u32>, Option<Swizzle>)> = tp.tma.maps.iter().map(|m| (m.box_dims.clone(), m.swizzle)).collect();
        // The W = 0 instances (`w: zeros`) have no w to load.
        let mut want = vec![swz(64), swz(64), row(32), b64.clone(), swz(64)];
        if name.ends_with("_w0") {
            want.pop();
        }
        let (thread_copies, per_stage) = match name.as_str() {
            // (and its bf16-dU instance: the same copies)
            n if n.starts_with("k1_scan_scalar") => (1, 3 * (64 * 128 * 2) + 2 * (64 * 32 * 2) + 64 * 4),
            _ => (0, 3 * (64 * 128 * 2) + 2 * (64 * 32 * 2)),
        };
        assert_eq!(boxes, want, "{name}");
        let (l, p) = tp.pipelines.iter().find_map(|(l, p)| p.as_ref().map(|p| (l, p))).expect("the reverse chunk loop is pipelined");
        assert_eq!(p.writes.iter().filter(|&&w| tp.tma.thread_copy(l, w)).count(), thread_copies, "{name}");
        assert!(p.reverse && !p.overlap_mma, "{name}");
        let info = Target::Sm90a.info();
        let resident = |bytes: u32| info.smem_per_sm / (bytes + info.smem_reserved_per_cta);
        let total = tp.smem_bytes();
        if name.ends_with("_w0") {
            // Without w's tile a second stage still keeps two CTAs per SM, the least a ring may
            // go down to where the accumulators are registers: the pass takes it.
            assert_eq!((p.stages, tp.resident_ctas(128)), (2, 2), "{name}: {total} B");
            continue;
        }
        if p.stages == 1 {
            // One stage keeps three CTAs per SM by shared memory (its registers allow two; a
            // declared `ctas_per_sm(sm_90a: 3)` would make it three, tests/residency.rs); a
            // second stage would drop to one, below the two a ring may go down to. Each tile
            // is refilled after its last read, on its own
            // mbarrier.
            assert!(resident(total) >= 3 && resident(total + per_stage) < resident(total), "{name}: {total} B");
            assert_eq!(tp.resident_ctas(128), resident(total).min(16), "{name}");
            assert!(tilec::passes::tma::early_refill(p));
            assert_eq!(tilec::passes::tma::barriers_of(p), p.writes.len() as u32);
        } else {
            // One CTA per SM already at one stage: the deepest ring that fits.
            assert_eq!(resident(total - (p.stages - 1) * per_stage), resident(total), "{name}");
            // (3 stages is the deepest without an MMA in flight; `total` includes the header.)
            assert!(p.stages == 3 || total + per_stage > info.smem_per_cta, "{name}: a deeper ring would have fit");
        }
    }
    let stages: Vec<u32> = ps.iter().map(|(_, tp)| tp.pipelines.values().flatten().next().map_or(0, |p| p.stages)).collect();
    assert_eq!(stages, vec![1, 1, 1, 1, 2, 2], "all four (the bf16-dU instances too) fit three CTAs per SM with one stage; the W = 0 ones two with two");
}

#[test]
fn a_copy_tma_cannot_do_stays_cp_async_beside_the_tma_copies() {
    // A rank-6 operand: a tensor map has at most 5 dimensions.
    let src = "kernel rank6(a: bf16[P, Q, R, S, M, K], b: bf16[K, N], c: out f32[M, N]) grid(1) threads(128) {
        let mut acc: tmem f32[64, 64] = zeros(64, 64);
        for kk in 0..cdiv(K, 64) {
            let at: smem = load a[0, 0, 0, 0, 0..+64, kk * 64..+64];
            let bt: smem = load b[kk * 64..+64, 0..+64];
            acc += at @ bt;
        }
        store c[0..+64, 0..+64] = acc;
    }";
    let ps = plans(src);
    let tp = &ps[0].1;
    let (l, p) = tp.pipelines.iter().find_map(|(l, p)| p.as_ref().map(|p| (l, p))).expect("the loop is pipelined");
    assert_eq!(p.writes.len(), 2);
    // `bt` is a TMA copy (one map, a 64 x 64 box in one 128B panel); `at` stays a cp.async
    // copy by the threads in the same loop.
    assert_eq!(tp.tma.maps.iter().map(|m| (m.box_dims.clone(), m.swizzle)).collect::<Vec<_>>(), vec![(vec![64, 64], Some(Swizzle::B128))]);
    assert_eq!(p.writes.iter().map(|&w| tp.tma.thread_copy(l, w)).collect::<Vec<_>>(), vec![true, false]);
    assert!(tp.tma.loop_barriers(l).is_some() && tp.header_bytes > 0);
    // The same kernel at rank 5 takes TMA for both.
    let ps = plans(&src.replace("P, Q, R, S, M, K", "Q, R, S, M, K").replace("a[0, 0, 0, 0, ", "a[0, 0, 0, "));
    assert_eq!(ps[0].1.tma.maps.len(), 2);
    let tp = &ps[0].1;
    let (l, p) = tp.pipelines.iter().find_map(|(l, p)| p.as_ref().map(|p| (l, p))).expect("pipelined");
    assert!(p.writes.iter().all(|&w| !tp.tma.thread_copy(l, w)));
}

#[test]
fn a_gate_column_is_prefetched_by_4_byte_cp_async() {
    // k1_scan_scalar's g[b, t0..+64, h] is a column of f32 H elements apart: no 16-byte chunk
    // and no TMA box, so each element is one 4-byte `cp.async.ca` (zero-filled past the tensor),
    // issued for the next chunk after this chunk's last read of the gates (the early refill)
    // and once before the loop, and waited for with `cp.async.wait_all` before its first read.
    // Each site twice: beside the TMA copies, and in the path for tensors the runtime could not
    // encode a map of (every tile copied by the threads, then waited for).
    let (dir, _) = build_sm90a("k1_reverse_scan.tile", "gate");
    let ptx = std::fs::read_to_string(dir.join("k1_scan_scalar.sm_90a.ptx")).expect("ptx");
    let copies: Vec<&str> = ptx.lines().filter(|l| l.contains("cp.async.ca.shared.global")).collect();
    assert_eq!(copies.len(), 2 * 2, "{copies:?}");
    assert!(copies.iter().all(|l| l.contains(", 4, ")), "{copies:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gemm_metadata_and_ptx_carry_the_tensor_maps() {
    let (dir, r) = build_sm90a("gemm.tile", "tma");
    let meta = tilec_abi::meta::KernelMeta::load(&dir.join("gemm.sm_90a.meta.json")).expect("metadata");
    assert_eq!(meta.schema_version, 2);
    let recs: Vec<(&str, Vec<u32>, &str, &str)> = meta.tensor_maps.iter().map(|m| (m.tensor.as_str(), m.box_dims.clone(), m.swizzle.as_str(), m.oob_fill.as_str())).collect();
    assert_eq!(recs, vec![("a", vec![128, 64], "128B", "zero"), ("b", vec![64, 64], "128B", "zero")]);
    let ptx = &r.built[0].compiled.ptx;
    // Two 128-byte grid-constant parameters after the 3 tensors and 3 sizes.
    assert_eq!(ptx.matches(".param .align 64 .b8 gemm_param_").count(), 2, "{ptx}");
    assert!(ptx.contains("gemm_param_6[128]") && ptx.contains("gemm_param_7[128]"));
    // (1 + 4) panels per iteration, issued at D = 2 prologue sites and one in the loop.
    assert_eq!(ptx.matches("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes").count(), (1 + 4) * (2 + 1));
    assert_eq!(ptx.matches("mbarrier.init.shared.b64").count(), 4);
    assert!(ptx.contains("mbarrier.try_wait.parity"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn operand_tiles_the_threads_write_are_swizzled_too() {
    // K#1's dos = bf16(do ⊙ gate) (64 x 32), db = bf16(d) (128 x 32: 64B panels) and dvb
    // (64 x 32) are written by the threads, not TMA: swizzled all the same, so the 8 chunks of a
    // row land in 8 bank groups.
    let ps = plans(&example("k1_reverse_scan.tile"));
    for (name, tp) in &ps {
        let k = tilec::frontend::check_source(&example("k1_reverse_scan.tile"), &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
        let kernel = k.kernels().find(|pk| &pk.kernel.name == name).expect("kernel").kernel;
        let sw = |n: &str| kernel.vars.iter().find(|(_, d)| d.name == n).and_then(|(v, _)| tp.tma.swizzle_of(v));
        // dos = bf16(do ⊙ gate, or masked) (64 x 32), db, dvb; kt and qt are TMA operands.
        // (The W = 0 instances have no dvb: it fed only the folded Wᵀ dU product.)
        let dvb = if name.ends_with("_w0") { None } else { Some(Swizzle::B64) };
        assert_eq!([sw("dos"), sw("db"), sw("dvb"), sw("kt"), sw("qt")], [Some(Swizzle::B64), Some(Swizzle::B64), dvb, Some(Swizzle::B128), Some(Swizzle::B128)], "{name}");
        // Plain tiles read element by element stay row-major, but dvt: read in dvn's fragment
        // order, it is swizzled (8 bank groups for 8 rows).
        assert_eq!([sw("dot"), sw("dvt")], [None, Some(Swizzle::B64)], "{name}");
        assert_eq!(tp.header_bytes % 1024, 0);
    }
}

#[test]
fn tensor_maps_stay_within_the_kernel_parameter_space() {
    // n tensors loaded in one loop: n maps of 128 bytes after the pointers and sizes. sm_90a
    // emits PTX 8.0, whose kernels take at most 4,352 parameter bytes: 31 maps fit
    // (8·32 + 4·2 = 264 → 320, + 31·128 = 4,288), 32 do not (4,416); that loop keeps cp.async.
    // sm_100a (PTX 8.8, 32,764 bytes) takes all 32.
    let src = |n: usize| {
        let params: Vec<String> = (0..n).map(|i| format!("a{i}: bf16[M, K]")).collect();
        let body: Vec<String> = (0..n).map(|i| format!("        let t{i}: smem = load a{i}[m0..+64, kk * 16..+16];\n        acc += t{i};")).collect();
        format!("kernel many({}, y: out f32[M, 16]) grid(cdiv(M, 64)) threads(128) {{\n    let m0 = program_id(0) * 64;\n    let mut acc = zeros(64, 16);\n    for kk in 0..cdiv(K, 16) {{\n{}\n    }}\n    store y[m0..+64, :] = acc;\n}}\n", params.join(", "), body.join("\n"))
    };
    let maps = |n: usize, t: Target| {
        let c = check_source(&src(n), &Options { deny_warnings: false, targets: vec![t], ..Options::default() });
        assert!(c.ok(), "{:?}", c.diags);
        let k = c.kernels().next().expect("kernel");
        let tp = k.target(t).expect("plan");
        assert!(tp.pipelines.values().flatten().next().is_some(), "pipelined either way");
        tp.tma.maps.len()
    };
    assert_eq!(Target::Sm90a.info().max_param_bytes, 4352);
    assert_eq!(maps(31, Target::Sm90a), 31);
    assert_eq!(maps(32, Target::Sm90a), 0);
    assert_eq!(maps(32, Target::Sm100a), 32);
}

/// A loop of a compile-time trip count gets no deeper ring than it can fill: two iterations
/// need two stages (three with the MMA left in flight, whose minimum that is), where the
/// budget alone would allow four. A loop over a run-time extent keeps the deepest that fits.
#[test]
fn rings_are_no_deeper_than_a_constant_trip_count() {
    let src = |hi: &str| {
        format!(
            "kernel f(a: bf16[M, K], b: bf16[K, N], c: out f32[M, N]) grid(cdiv(M, 64), cdiv(N, 64)) threads(128) {{
                let mut acc: tmem f32[64, 64] = zeros(64, 64);
                for k in 0..{hi} {{
                    let at: smem = load a[program_id(0) * 64..+64, k * 64..+64];
                    let bt: smem = load b[k * 64..+64, program_id(1) * 64..+64];
                    acc += at @ bt;
                }}
                store c[program_id(0) * 64..+64, program_id(1) * 64..+64] = acc;
            }}"
        )
    };
    let ring = |hi: &str| {
        let ps = plans(&src(hi));
        let p = ps[0].1.pipelines.values().flatten().next().expect("the loop is pipelined").clone();
        (p.stages, p.overlap_mma, p.trips)
    };
    assert_eq!(ring("2"), (3, true, Some(2)));
    assert_eq!(ring("128 / 64"), (3, true, Some(2)));
    assert_eq!(ring("1"), (3, true, Some(1)));
    assert_eq!(ring("cdiv(K, 64)"), (4, true, None));
}

/// An operand tile the threads also read back keeps the layout the tensor core reads in place
/// (swizzled panels: no staging copy before each MMA); the threads address it in that layout.
/// The interpreter gives the same values either way; the GPU side is `scripts/h200-check.sh`
/// (solve_tril, K#2 and dqkwg read operand tiles back).
#[test]
fn an_operand_tile_read_back_by_the_threads_is_read_in_place() {
    let src = "kernel f(a: bf16[64, 64], b: bf16[64, 64], c: out f32[64, 64], d: out f32[64, 64]) grid(1) threads(128) {
            let at: smem = load a[0..+64, 0..+64];
            let bt: smem = bf16(load b[0..+64, 0..+64] * 2.0);
            let p: tmem = at @ bt;
            store c[0..+64, 0..+64] = p;
            store d[0..+64, 0..+64] = bt + at;
        }";
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    let pk = c.kernels().next().expect("kernel f");
    let tp = pk.target(Target::Sm90a).expect("sm_90a plan");
    for (v, d) in pk.kernel.vars.iter() {
        if d.name == "at" || d.name == "bt" {
            assert!(tp.roles.is_tiled(v), "{} is read in place", d.name);
        }
    }
    // No instruction stages an operand: no scratch buffer in the plan.
    assert!(tp.smem.scratch.values().all(Option::is_none), "no operand staging");
}

/// A register accumulator written only by MMAs and `zeros` has no shared-memory buffer even
/// when the threads read it (sm_90a): a read the fragment order cannot evaluate (a column sum)
/// gets the fragments written straight into its result tile — one 16 KB tile here, where a
/// buffer and a copy of it took two.
#[test]
fn an_accumulator_read_by_the_threads_needs_no_buffer() {
    let src = "kernel f(a: bf16[64, 64], b: bf16[64, 64], s: out f32[64]) grid(1) threads(128) {
            let at: smem = load a[0..+64, 0..+64];
            let bt: smem = load b[0..+64, 0..+64];
            let p: tmem = at @ bt;
            store s[0..+64] = col_sum(p).T;
        }";
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    let pk = c.kernels().next().expect("kernel f");
    let tp = pk.target(Target::Sm90a).expect("sm_90a plan");
    let (p, _) = pk.kernel.vars.iter().find(|(_, d)| d.name == "p").expect("p");
    assert!(tp.roles.accumulator(p).is_some() && tp.roles.is_register_only(p) && !tp.roles.is_stored_only(p));
    assert_eq!(tp.smem.vars[p], None, "no buffer for p");
    let f32_tiles = tp.smem.placements.iter().filter(|pl| pl.bytes == 64 * 64 * 4).count();
    assert_eq!(f32_tiles, 1, "one 64x64 f32 tile: the read's result");
}

/// A B operand read in wgmma N pieces narrower than its panel keeps the widest swizzle when the
/// pieces divide the panel (each piece starts inside a panel and ends in it): the per-channel
/// backwards' [C, 32] hi/lo tiles, read in pieces of 16 by two warpgroups, are 64B-swizzled,
/// where the core-matrix layout put a row's four 16-byte chunks in one bank group. Pieces
/// that would cross a panel boundary (24 columns of 16-column 32B panels) leave the tile in
/// core matrices.
#[test]
fn narrow_n_pieces_inside_a_panel_keep_the_swizzle() {
    let kernel = |n: u32, threads: u32| {
        format!(
            "kernel f(a: bf16[64, 64], x: f32[64, {n}], c: out f32[64, {n}]) grid(1) threads({threads}) {{
                let at: smem = load a[0..+64, 0..+64];
                let bh: smem = bf16(load x[0..+64, 0..+{n}] * 2.0);
                let p: tmem = at.T @ bh;
                store c[0..+64, 0..+{n}] = p;
            }}"
        )
    };
    // (N, threads) → the accumulator's piece and the swizzle of bh.
    for (n, threads, piece, want) in [(32, 256, 16, Some(Swizzle::B64)), (32, 128, 32, Some(Swizzle::B64)), (64, 256, 32, Some(Swizzle::B128)), (48, 256, 24, None)] {
        let c = check_source(&kernel(n, threads), &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
        assert!(c.ok(), "{:?}", c.diags);
        let pk = c.kernels().next().expect("kernel f");
        let tp = pk.target(Target::Sm90a).expect("sm_90a plan");
        let var = |name: &str| pk.kernel.vars.iter().find(|(_, d)| d.name == name).expect(name).0;
        let dist = tp.roles.accumulator(var("p")).expect("p is a wgmma accumulator");
        assert_eq!(dist.piece_n, piece, "N = {n}, {threads} threads");
        assert_eq!(tp.tma.swizzle_of(var("bh")), want, "N = {n}, pieces of {piece}");
    }
}

#[test]
fn a_conversion_to_the_tensors_own_type_is_no_instruction_and_the_load_is_a_tma_copy() {
    // `bf16(load x[...])`: with x bf16 (as KDA's dU) the
    // conversion is the identity, so the tile is a plain load the pipeline copies with TMA; with
    // x f32 it converts, and the threads fill the tile.
    let src = |elem: &str| {
        format!(
            "kernel t(x: {elem}[256, 64], w: bf16[64, 64], y: out f32[64, 64]) grid(1) threads(128) {{
                let ws: smem = load w[:, :];
                let mut acc: tmem f32[64, 64] = zeros(64, 64);
                for j in 0..4 {{
                    let xs: smem = bf16(load x[j * 64..+64, :]);
                    acc += xs @ ws;
                }}
                store y[:, :] = acc;
            }}"
        )
    };
    // (conversion instructions, TMA loads) of the kernel on sm_90a.
    let casts = |src: &str| {
        let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
        let pk = c.kernels().next().expect("a kernel");
        let mut n = 0;
        pk.kernel.walk(|i| n += usize::from(matches!(pk.kernel.insts[i].op, tilec::ir::Op::Cast(..))));
        (n, pk.target(Target::Sm90a).expect("sm_90a plan").tma.loads.values().flatten().count())
    };
    assert_eq!(casts(&src("bf16")), (0, 1));
    assert_eq!(casts(&src("f32")), (1, 0));
}
