//! Long programs build: 436 sequential MMA loops once overflowed a code-generation thread's
//! stack (`tilec build --target all` aborted, exit 134) and, with that fixed, took 319 s; the
//! growth is measured by `cargo bench -p tilec --bench build_growth`.

mod programs;

use tilec::build::{build_source, BuildOptions};
use tilec::target::Target;

#[test]
fn four_hundred_thirty_six_sequential_mma_loops_build_for_both_targets() {
    let src = programs::sequential_mma_loops(436);
    let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
    let r = build_source(&src, "many.tile", &opts).unwrap_or_else(|e| panic!("does not build: {e}"));
    assert_eq!(r.built.len(), 2);
    for b in &r.built {
        // Each of the 436 MMA statements is in the PTX once (loops stay loops): 2 x 64-row units per K = 16 step on sm_90a
        // (wgmma, 128 x 64 over one warpgroup), one tcgen05.mma per K step on sm_100a.
        let (needle, per_mma) = match b.target {
            Target::Sm90a => ("wgmma.mma_async", 2 * 4),
            Target::Sm100a => ("tcgen05.mma.cta_group::1", 4),
        };
        assert_eq!(b.compiled.ptx.matches(needle).count(), 436 * per_mma, "{}", b.target);
    }
}
