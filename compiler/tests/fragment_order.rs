//! Elementwise work on register fragments (issue 9, item 1): which `Store`/`WriteVar` roots are
//! evaluated in a register accumulator's fragment order on sm_90a. The GPU equality with the
//! interpreter is `scripts/h200-check.sh` (K#1 at T=100, V=80).

use tilec::backend::Target;
use tilec::frontend::{check_source, Options};
use tilec::ir::Op;

/// `(kernel, root instruction's op name, accumulator name)` of every fragment-order root.
fn roots(src: &str) -> Vec<(String, String, String)> {
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    let mut out = vec![];
    for pk in c.kernels() {
        let k = pk.kernel;
        let tp = pk.target(Target::Sm90a).expect("sm_90a plan");
        k.walk(|i| {
            if let Some(v) = tp.fusion.frag_root(i) {
                let what = match &k.insts[i].op {
                    Op::Store { dst, .. } => format!("store {}", k.params[*dst].name),
                    Op::WriteVar(w, _) => format!("write {}", k.vars[*w].name),
                    Op::Reduce(op, axis, _) => format!("reduce {op:?} {axis:?}"),
                    other => format!("{other:?}"),
                };
                out.push((k.name.clone(), what, k.vars[v].name.clone()));
            }
        });
    }
    out
}

fn example(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(name)).expect("example")
}

#[test]
fn k1_state_updates_and_stores_stay_in_registers() {
    let r = roots(&example("k1_reverse_scan.tile"));
    let scalar: Vec<(String, String)> = r.iter().filter(|x| x.0 == "k1_scan_scalar").map(|x| (x.1.clone(), x.2.clone())).collect();
    // In source order: d = its first value (a load, evaluated straight into d's fragments: a
    // whole-tile write into a register accumulator); store dh = d; db = bf16(d); d = d *
    // exp2(glast); dvn += dv; store dv2 = dvn; dvb = bf16(dvn); store dh0 = d.
    let want = [("write d", "d"), ("store dh", "d"), ("write db", "d"), ("write d", "d"), ("write dvn", "dvn"), ("store dv2", "dvn"), ("write dvb", "dvn"), ("store dh0", "d")];
    assert_eq!(scalar, want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec());
}

#[test]
fn gemm_epilogue_is_a_fragment_order_store() {
    assert_eq!(roots(&example("gemm.tile")), vec![("gemm".to_string(), "store c".to_string(), "acc".to_string())]);
}

#[test]
fn a_transposed_or_column_reduced_read_goes_through_shared_memory() {
    let src = "kernel t(a: bf16[64, 64], b: bf16[64, 64], x: out f32[64, 64], y: out f32[64, 1], z: out f32[64, 64]) grid(1) threads(128) {
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+64];
        let mut acc: tmem f32[64, 64] = at @ bt;
        store x[0..+64, 0..+64] = acc.T;
        store y[0..+64, 0..+1] = col_sum(acc).T;
        store z[0..+64, 0..+64] = acc * 2.0;
    }";
    // Only the third store reads each element where its thread holds it: a column's elements
    // are spread over 8 lanes and 4 warps, and its order is sequential from row 0.
    assert_eq!(roots(src), vec![("t".to_string(), "store z".to_string(), "acc".to_string())]);
}

#[test]
fn a_row_reduction_is_folded_where_the_fragments_are() {
    let src = "kernel t(a: bf16[64, 64], b: bf16[64, 64], y: out f32[64, 1], z: out f32[64, 1]) grid(1) threads(128) {
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+64];
        let acc: tmem = at @ bt;
        store y[0..+64, 0..+1] = row_sum(acc * 2.0);
        store z[0..+64, 0..+1] = row_max(acc);
    }";
    let want = [("reduce Sum Row", "acc"), ("reduce Max Row", "acc")];
    assert_eq!(roots(src), want.map(|(a, b)| ("t".to_string(), a.to_string(), b.to_string())).to_vec());
    // No read of the accumulator is copied to a shared-memory tile (every `ReadVar` result is
    // fused); a column sum's read is.
    let copied = |src: &str| {
        let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
        let pk = c.kernels().next().expect("kernel");
        let (k, tp) = (pk.kernel, pk.target(Target::Sm90a).expect("plan"));
        let mut n = 0;
        k.walk(|i| n += usize::from(matches!(k.insts[i].op, Op::ReadVar(_)) && k.insts[i].result.is_some_and(|r| !tp.fusion.is_fused(r))));
        n
    };
    assert_eq!(copied(src), 0);
    assert_eq!(copied(&src.replace("row_max(acc)", "col_sum(acc).T")), 1);
}

#[test]
fn accumulators_of_one_distribution_are_read_in_the_same_registers() {
    // `p + q` in p's order reads q at the same register index (both 64 x 64 on one warpgroup);
    // r is 64 x 128, distributed otherwise: its read is written back to shared memory.
    let src = "kernel t(a: bf16[64, 64], b: bf16[128, 64], z: out f32[64, 64], y: out f32[64, 64]) grid(1) threads(128) {
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+64];
        let ct: smem = load b[64..+64, 0..+64];
        let wt: smem = load b[0..+128, 0..+64];
        let p: tmem = at @ bt.T;
        let q: tmem = at @ ct.T;
        let r: tmem = at @ wt.T;
        store z[0..+64, 0..+64] = p + q;
        store y[0..+64, 0..+64] = p * r[:, 0..+64];
    }";
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    let pk = c.kernels().next().expect("kernel");
    let (k, tp) = (pk.kernel, pk.target(Target::Sm90a).expect("plan"));
    let var = |n: &str| k.vars.iter().find(|(_, d)| d.name == n).map(|(v, _)| v).expect("var");
    let mut stores = vec![];
    k.walk(|i| {
        if let Op::Store { dst, .. } = &k.insts[i].op {
            stores.push((k.params[*dst].name.clone(), ["p", "q", "r"].map(|n| tp.fusion.reads_fragments_of(i, var(n)))));
        }
    });
    assert_eq!(stores, vec![("z".to_string(), [true, true, false]), ("y".to_string(), [true, false, false])]);
}

#[test]
fn wide_accumulators_with_a_buffer_keep_the_shared_memory_path() {
    // 64 x 128 on one warpgroup is 64 registers per thread, over the 32 of straight-line
    // fragment-order code (K#2 spilled at 64); 64 x 64 is 32; 64 x 256 is 128.
    let mk = |n: u32| format!("kernel w(a: bf16[64, 64], b: bf16[64, {n}], z: out f32[64, {n}], s: out f32[64, 1]) grid(1) threads(128) {{
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+{n}];
        let mut acc: tmem f32[64, {n}] = at @ bt;
        store s[0..+64, 0..+1] = row_sum(acc);
        store z[0..+64, 0..+{n}] = acc * 2.0;
    }}");
    // The row sum keeps only its partials live: it is folded in fragments up to 64 registers.
    let ops = |n| roots(&mk(n)).into_iter().map(|x| x.1).collect::<Vec<_>>();
    assert_eq!(ops(64), ["reduce Sum Row", "store z"]);
    assert_eq!(ops(128), ["reduce Sum Row"]);
    assert!(ops(256).is_empty());
    assert_eq!(tilec::passes::fuse::MAX_FRAGMENT_ROOT_FLOATS, 32);
    assert_eq!(tilec::passes::fuse::MAX_FRAGMENT_REDUCE_FLOATS, 64);
}

#[test]
fn fragment_pairs_are_written_by_vector_stores_with_an_element_fallback() {
    // k1_scan_scalar on one warpgroup: d (128 x 32) is two 64 x 32 wgmma units, 16 floats per
    // thread each, in 8 pairs (columns c, c + 1 of a row); dvn (64 x 32) one unit. A unit 32
    // columns wide is one block.
    // - 2-byte elements: per row half of a block the quad trades its pairs' words and their
    //   write flags (4 butterfly shuffles per word, 2 words), then each lane writes its row
    //   segment with one 16-byte store or, where a flag is off (a tensor's edge, a masked row),
    //   element by element (8 conditional 2-byte stores).
    // - 4-byte elements: no trade (`row_segments_apply`); each pair is one 8-byte store, or
    //   two 4-byte ones where a flag is off or the pair is misaligned.
    //   dh = bf16(d): 2 blocks (bf16); dv2 = dvn: 1 block (f32); dh0 = d: 2 blocks (f32).
    // No warp vote: the decision is each lane's (or each pair group's).
    let dir = std::env::temp_dir().join(format!("tilec-pairs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = tilec::build::BuildOptions { out_dir: Some(dir.clone()), ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/k1_reverse_scan.tile");
    tilec::build::build_file(&path, &opts).expect("k1 builds");
    let count = |kernel: &str| {
        let ptx = std::fs::read_to_string(dir.join(format!("{kernel}.sm_90a.ptx"))).expect("ptx");
        let n = |m: &str| ptx.matches(&format!("{m} ")).count();
        // [16-byte stores, shuffles, 2-byte pair stores, 4-byte pair stores, votes, 4-byte elements, 2-byte elements]
        [n("st.global.v4.b32"), n("shfl.sync.bfly.b32"), n("st.global.v2.b16"), n("st.global.v2.b32"), n("vote.sync.all.pred"), n("st.global.b32"), n("st.global.b16")]
    };
    let (halves, pairs) = (2, 8); // per block and thread
    let want = |blocks_b16: usize, blocks_f32: usize| [halves * blocks_b16, halves * 2 * 4 * blocks_b16, 0, pairs * blocks_f32, 0, 2 * pairs * blocks_f32, halves * 8 * blocks_b16];
    assert_eq!(count("k1_scan_scalar"), want(2, 1 + 2));
    // The bf16 instances write dv2 at 2 bytes: its block joins dh's.
    assert_eq!(count("k1_scan_scalar_bf16"), want(2 + 1, 2));
    assert_eq!(count("k1_scan_channel_bf16"), want(2 + 1, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emit_ir_names_how_each_fragment_order_store_writes() {
    // `--emit ir` states the rule the code generator follows (one function for both):
    // K#1's bf16 stores are 16-byte row segments, its f32 ones a column pair per store; under a
    // declared register budget (K#1 with `ctas_per_sm(sm_90a: 3)`) every store writes pairs.
    let report = |src: &str| {
        let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
        assert!(c.ok(), "{:?}", c.diags);
        let pk = c.kernels().find(|pk| pk.kernel.name == "k1_scan_scalar").expect("k1_scan_scalar");
        tilec::passes::layout_report::render(pk.kernel, pk.target(Target::Sm90a).expect("plan"))
    };
    let line = |r: &str, dst: &str| r.lines().find(|l| l.contains(&format!("stored to `{dst}`"))).map(str::to_string).unwrap_or_default();
    let k1 = example("k1_reverse_scan.tile");
    let shipped = report(&k1);
    assert!(line(&shipped, "dh").ends_with("written as 16-byte row segments, each quad trading its column pairs"), "{}", line(&shipped, "dh"));
    for dst in ["dv2", "dh0"] {
        assert!(line(&shipped, dst).ends_with("written a column pair per store"), "{}", line(&shipped, dst));
    }
    let budget = k1.replace(") grid(cdiv(V, BV), B * H * (NP - 1)) threads(128)\n{", ") grid(cdiv(V, BV), B * H * (NP - 1)) threads(128) ctas_per_sm(sm_90a: 3)\n{");
    assert_ne!(budget, k1, "the declaration was not inserted");
    let budgeted = report(&budget);
    assert!(line(&budgeted, "dh").ends_with("written a column pair per store"), "{}", line(&budgeted, "dh"));
}

/// The sm_90a PTX of `src` (no ptxas).
fn sm90_ptx(name: &str, src: &str) -> String {
    let opts = tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]);
    let r = tilec::build::build_source(src, &format!("{name}.tile"), &opts).expect("builds");
    r.built.iter().map(|b| b.compiled.ptx.clone()).collect()
}

/// Shared-memory loads of `ptx` by kind: (`ld.shared.b32`, `ld.shared.v2.b32`).
fn shared_loads(ptx: &str) -> (usize, usize) {
    let count = |op: &str| ptx.lines().filter(|l| l.trim_start().starts_with(op) && l.trim_start()[op.len()..].starts_with([' ', '\t'])).count();
    (count("ld.shared.b32"), count("ld.shared.v2.b32"))
}

/// A fragment pair `(r, c)`, `(r, c + 1)` (c even) read from a shared-memory tile is one 8-byte
/// load where the two are adjacent (backend/groups.rs): a gather whose row index is a
/// column vector and whose column index is the element's own, and a view starting at an even
/// column. A view starting at an odd column is read one element at a time. One warpgroup holds
/// a 64 x 32 accumulator as 16 floats a thread, 8 pairs.
#[test]
fn a_fragment_pair_is_read_with_one_load_where_adjacent() {
    let pairs_per_thread = 64 * 32 / 128 / 2;
    let gather = "kernel pairs(a: bf16[64, 64], b: bf16[64, 32], x: f32[80, 32], y: out f32[64, 32]) grid(1) threads(128) {
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+32];
        let xs: smem = load x[0..+80, 0..+32];
        let acc: tmem f32[64, 32] = at @ bt;
        store y[0..+64, 0..+32] = acc * xs[row_index(64, 1) % 16 + 3, :];
    }";
    assert_eq!(shared_loads(&sm90_ptx("pairs", gather)), (0, pairs_per_thread));
    // xs's view at column 1: 2 loads a pair; ys's at column 2: one (distinct tiles, so that no
    // load is shared between them).
    let views = "kernel views(a: bf16[64, 64], b: bf16[64, 32], x: f32[80, 34], z: f32[64, 34], y: out f32[64, 32]) grid(1) threads(128) {
        let at: smem = load a[0..+64, 0..+64];
        let bt: smem = load b[0..+64, 0..+32];
        let xs: smem = load x[0..+80, 0..+34];
        let ys: smem = load z[0..+64, 0..+34];
        let acc: tmem f32[64, 32] = at @ bt;
        store y[0..+64, 0..+32] = acc * xs[0..+64, 1..+32] + ys[0..+64, 2..+32];
    }";
    assert_eq!(shared_loads(&sm90_ptx("views", views)), (2 * pairs_per_thread, pairs_per_thread));
}

#[test]
fn a_tile_written_by_a_load_stays_in_registers_with_or_without_a_conversion() {
    // `f32(load x)` of an f32 tensor is the load itself (no conversion instruction): the tmem
    // tile is still written and read where its fragments are, as with a bf16 x.
    for elem in ["bf16", "f32"] {
        let src = format!(
            "kernel t(x: {elem}[64, 32], y: out f32[64, 32]) grid(1) threads(128) {{
                let tt: tmem f32[64, 32] = f32(load x[:, :]);
                let mut acc: tmem f32[64, 32] = zeros(64, 32);
                acc += tt * 2.0;
                store y[:, :] = acc;
            }}"
        );
        let r = roots(&src);
        assert!(r.iter().any(|x| x.1 == "write tt" && x.2 == "tt"), "{elem}: {r:?}");
    }
}
