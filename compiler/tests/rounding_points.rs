//! The rounding points verify-on-compile counts per output (`tilec::verify::output_roundings`):
//! only the narrowing sites whose results reach an output, through values, variables, loops,
//! matrix products and the buffers between launches — each counted here by hand from the
//! source — and, on the shipped operators, never more than the operator's whole count.

use tilec::frontend::{check_source, Options};
use tilec::verify::{output_roundings, rounding_points};

const TWO_KERNELS: &str = r#"
// `first`: one site feeds `h` (the bf16 store of an f32 value), two feed `s` (bf16 casts as
// the MMA's operands, through a loop-carried accumulator), and `unrounded` gets none.
kernel first(x: f32[64, 64], h: out bf16[64, 64], s: out f32[64, 64], unrounded: out f32[64, 64]) grid(1) threads(128) {
    let t: smem = load x[:, :];
    store h[:, :] = t * 2.0;
    let mut acc: tmem f32[64, 64] = zeros(64, 64);
    for i in 0..2 {
        let a: smem = bf16(t);
        let b: smem = bf16(t * 0.5);
        acc += a @ b;
    }
    store s[:, :] = acc;
    store unrounded[:, :] = t + 1.0;
}

// `second`: reads h (one site upstream) and adds one of its own.
kernel second(h: bf16[64, 64], y: out bf16[64, 64]) grid(1) threads(128) {
    let t: smem = load h[:, :];
    store y[:, :] = bf16(t * 3.0);
}

operator op(x: f32[64, 64], y: out bf16[64, 64], s: out f32[64, 64], unrounded: out f32[64, 64]) {
    let h: bf16[64, 64];
    first(x, h, s, unrounded);
    second(h, y);
}
"#;

#[test]
fn each_output_counts_the_sites_that_reach_it() {
    let c = check_source(TWO_KERNELS, &Options::default());
    assert!(c.ok(), "{:?}", c.diags);
    let op = &c.module.operators[0];
    let r = output_roundings(&c.module, op, &[]);
    // y: first's store of h (f32 → bf16) and second's bf16(...) — its store of an already-bf16
    // value into a bf16 tensor rounds nothing. s: the two casts in the loop (once each).
    // unrounded: no site (R = 1, the floor).
    assert_eq!(r["y"], 2);
    assert_eq!(r["s"], 2);
    assert_eq!(r["unrounded"], 1);
    // The operator's whole count: the four sites.
    assert_eq!(rounding_points(&c.module, op).0, 4);
}

#[test]
fn a_rounded_input_is_one_site_of_the_outputs_that_read_it() {
    let src = TWO_KERNELS.replace("operator op(x: f32[64, 64],", "operator op(x: bf16[64, 64],").replace("kernel first(x: f32[64, 64],", "kernel first(x: bf16[64, 64],");
    let c = check_source(&src, &Options::default());
    assert!(c.ok(), "{:?}", c.diags);
    let op = &c.module.operators[0];
    let r = output_roundings(&c.module, op, &["x"]);
    // x is bf16 now, so `bf16(t)` rounds nothing: y has x and its two sites, s x and
    // bf16(t * 0.5), unrounded only x (it was at the floor of 1 before).
    assert_eq!((r["y"], r["s"], r["unrounded"]), (3, 2, 1));
    // Named but not a rounded dtype's input: nothing added.
    assert_eq!(output_roundings(&c.module, op, &["nothing"])["y"], 2);
}

#[test]
fn shipped_operators_count_no_more_per_output_than_in_all() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples");
    for file in ["gdn_fwd.tile", "gdn.tile"] {
        let path = root.join(file);
        let src = std::fs::read_to_string(&path).expect("example");
        let c = check_source(&src, &Options::default().for_file(&path));
        assert!(c.ok(), "{file}: {:?}", c.diags);
        for op in c.module.operators.iter().filter(|o| o.contract.is_some()) {
            let saved_in = op.params.iter().filter(|p| tilec::verify::SAVED.contains(&p.name.as_str()) && matches!(p.kind, tilec::ir::ParamKind::Tensor { output: false, .. })).count();
            let all = rounding_points(&c.module, op).0 + saved_in;
            let per = output_roundings(&c.module, op, &tilec::verify::SAVED);
            eprintln!("{}: all {all}, {per:?}", op.name);
            assert!(per.values().all(|&r| r >= 1 && r <= all), "{}: {per:?} vs {all}", op.name);
            // The forward's Ai comes from kkt and the triangular solve only, its Pᵀ from the
            // scores stage only: fewer sites than o, which reads Pᵀ.
            for kept in tilec::verify::SAVED {
                if let (Some(s), Some(o)) = (per.get(kept), per.get("o")) {
                    assert!(s < o, "{}: {kept} {s}, o {o}", op.name);
                }
            }
        }
    }
}

#[test]
fn a_kernel_reading_back_its_own_output_keeps_the_sites_it_stored() {
    // `z` is stored rounded (one site), read back and stored again through bf16(...) (a
    // second): z and the output read from it carry both, whatever order the parameters take.
    for order in ["z: out bf16[64, 64], y: out bf16[64, 64]", "y: out bf16[64, 64], z: out bf16[64, 64]"] {
        let src = format!(
            "kernel k(x: f32[64, 64], {order}) grid(1) threads(128) {{
                let t: smem = load x[:, :];
                store z[:, :] = t * 2.0;
                let back: smem = load z[:, :];
                store y[:, :] = bf16(back * 3.0);
            }}
            operator op(x: f32[64, 64], {order}) {{ k(x, {}); }}",
            if order.starts_with('z') { "z, y" } else { "y, z" }
        );
        let c = check_source(&src, &Options::default());
        assert!(c.ok(), "{:?}", c.diags);
        let r = output_roundings(&c.module, &c.module.operators[0], &[]);
        assert_eq!((r["z"], r["y"]), (1, 2), "{order}");
    }
}

/// The wide twin's count (`Sites::Arithmetic`): every float operation whose result reaches the
/// output, an MMA once per K = 16 step — counted by hand from `TWO_KERNELS`.
#[test]
fn the_wide_count_takes_every_float_operation() {
    use tilec::verify::roundings::{output_sites, Sites};
    let c = check_source(TWO_KERNELS, &Options::default());
    assert!(c.ok(), "{:?}", c.diags);
    let op = &c.module.operators[0];
    let r = output_sites(&c.module, op, &[], Sites::Arithmetic);
    // h = t * 2.0 (one multiply) reaches y, which adds t * 3.0: 2. s: `acc += a @ b` over
    // K = 64 is four K steps, one for the products and one for the old accumulator, and
    // b = bf16(t * 0.5) one multiply (the casts round nothing in this count): 7.
    // unrounded = t + 1.0: 1.
    assert_eq!((r["y"], r["s"], r["unrounded"]), (2, 7, 1));
    // Widened, nothing narrows any more: every output is at the narrowing count's floor.
    let w = tilec::verify::widen::widened(&c.module);
    assert!(output_roundings(&w, &w.operators[0], &[]).values().all(|&n| n == 1));
    assert_eq!(rounding_points(&w, &w.operators[0]).1, 2f64.powi(-24));
}

#[test]
fn exp2_counts_two_arithmetic_roundings_and_exp_three() {
    // exp2 is within one ulp, not half of one (tilec::ir::exp2): two roundings; exp is a
    // rounded product x·log2 e and then exp2: three; a multiply is one.
    let src = r#"
kernel k(x: f32[64, 64], a: out f32[64, 64], e: out f32[64, 64], m: out f32[64, 64]) grid(1) threads(128) {
    let t: smem = load x[:, :];
    store a[:, :] = exp2(t);
    store e[:, :] = exp(t);
    store m[:, :] = t * 3.0;
}
operator op(x: f32[64, 64], a: out f32[64, 64], e: out f32[64, 64], m: out f32[64, 64]) {
    k(x, a, e, m);
}
"#;
    let c = check_source(src, &Options::default());
    assert!(c.ok(), "{:?}", c.diags);
    let r = tilec::verify::roundings::output_sites(&c.module, &c.module.operators[0], &[], tilec::verify::roundings::Sites::Arithmetic);
    assert_eq!((r["a"], r["e"], r["m"]), (2, 3, 1));
}
