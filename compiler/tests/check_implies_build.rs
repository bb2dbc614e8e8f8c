//! `tilec check` runs the same planners and limits as `tilec build`: a program that checks
//! cleanly must build for every target, and one that builds must have checked. A fuzzer had found
//! programs that passed `check` and were then rejected by the back end (shared memory past the
//! descriptor range, an unaligned operand); this property covers the gemm family over tile sizes
//! around and past the budget.

use proptest::prelude::*;
use tilec::backend::Target;
use tilec::build::{build_source, BuildError, BuildOptions};
use tilec::frontend::{check_source, Options};

fn gemm(bm: u32, bn: u32, bk: u32) -> String {
    format!(
        "kernel g(a: bf16[M, K], b: bf16[K, N], c: out f32[M, N]) grid(cdiv(M, {bm}), cdiv(N, {bn})) threads(128) {{
  let m0 = program_id(0) * {bm};
  let n0 = program_id(1) * {bn};
  let mut acc: tmem f32[{bm}, {bn}] = zeros({bm}, {bn});
  for kk in 0..cdiv(K, {bk}) {{
    let at: smem = load a[m0..+{bm}, kk * {bk}..+{bk}];
    let bt: smem = load b[kk * {bk}..+{bk}, n0..+{bn}];
    acc += at @ bt;
  }}
  store c[m0..+{bm}, n0..+{bn}] = acc;
}}
"
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn check_ok_iff_build_ok(bm in prop::sample::select(vec![64u32, 128]), bn in 1u32..=16, bk in 1u32..=16) {
        let (bn, bk) = (bn * 16, bk * 16);
        let src = gemm(bm, bn, bk);
        let checked = check_source(&src, &Options::default());
        let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
        match build_source(&src, "g.tile", &opts) {
            Ok(r) => {
                prop_assert!(checked.ok(), "built but check failed: {}", checked.diags.render("g.tile", &src, false));
                // Every buffer the back end addresses lies inside the planned bytes, within the limit.
                for b in &r.built {
                    prop_assert!(b.compiled.smem_bytes <= b.target.info().smem_per_cta);
                }
            }
            Err(BuildError::Source(d)) => {
                prop_assert!(!checked.ok(), "check passed but build rejected the source: {}", d.render("g.tile", &src, false));
                prop_assert!(d.iter().all(|x| x.code.as_str() == "E0405" || x.code.as_str() == "E0401"), "{}", d.render("g.tile", &src, false));
            }
            Err(e) => prop_assert!(false, "check passed ({}) but the back end failed: {e}", checked.ok()),
        }
    }
}
