//! MMA numerics: which association of the accumulation the interpreter follows, per target
//! ([`crate::interp::Options::target`]).
//!
//! Both lowerings issue one tensor-core instruction per K = 16 step ([`STEP_K`]); they differ
//! in where the old accumulator `D_old` enters and where `-=` negates:
//!
//! * sm_90a — `compiler/src/backend/sm90/mma_sync.rs` (`mma.sync.m16n8k16`): the
//!   accumulator registers start at +0, every K step accumulates into them, and at the end
//!   `D = D_old + acc` (`+=`), `D = D_old − acc` (`-=`), `D = acc` (`=`) or `D = −acc` (`= −`),
//!   each one f32 operation. So `D_old + (s₁ + s₂ + …)`: the product sum first.
//! * sm_100a — `compiler/src/backend/sm100/mma.rs` (`tcgen05.mma`): the
//!   accumulator in tensor memory is the MMA's D; the first step has `enable_input_d` =
//!   accumulate (D_old is the seed), every later step accumulates into D, and `-=` sets the
//!   negate-A bit of the instruction descriptor, so every step adds `(−a)·b`. So
//!   `((D_old + s₁) + s₂) + …`. An accumulator that is not in tensor memory falls back to
//!   `mma.sync` on sm_100a too (`backend/sm100/mod.rs`: `space != Space::Tmem` → `mma_sync`), so it gets
//!   the sm_90a order.
//!
//! One K step (PTX ISA, `mma` and `tcgen05.mma`: `D = A·B + C`) is modelled as its exact
//! products (bf16·bf16 and f16·f16 products are exact in f32) summed together with the
//! incoming accumulator C in f64 and rounded once to f32. The tensor core's internal order,
//! alignment and rounding within one step are not specified by NVIDIA and are not modelled:
//! the GPU may differ from the interpreter in the last bits of a step. The f64 sum is exact
//! while the largest and smallest of the 17 terms lie within a factor of 2^25 of each other
//! (53 bits hold a 24-bit accumulator or 16/22-bit products, shifted, plus 5 carry bits);
//! beyond that the smallest terms are rounded in f64 before the final f32 rounding.

use crate::backend::Target;
use crate::ir::Space;

/// K extent of one tensor-core instruction (`m16n8k16`, `tcgen05.mma kind::f16`).
pub const STEP_K: usize = 16;

/// Whether an MMA into an accumulator in `space` runs, on `target`, as `tcgen05.mma` seeded with
/// the old accumulator (rather than `mma.sync`, which adds it after the product sum). The same
/// test as the back end's dispatch (the target's `Lowering`: tcgen05 exists, then the sm_100a
/// lowering's TMEM check).
pub fn seeds_accumulator(target: Target, space: Space) -> bool {
    target.info().mma.tcgen05 && space == Space::Tmem
}

/// One K step: `round_f32(c + Σ products)`, the sum taken in f64; without an input `c`
/// (`enable_input_d` false) just the rounded product sum.
fn step(c: Option<f32>, products: impl Iterator<Item = f32>) -> f32 {
    let mut s: Option<f64> = c.map(f64::from);
    for p in products {
        let p = f64::from(p);
        s = Some(s.map_or(p, |s| s + p));
    }
    s.unwrap_or(0.0) as f32
}

/// Element `(i, j)` of an MMA: `kd` products `prod(kk)` (each already exact in f32), the old
/// accumulator `old` when accumulating, negation for `-=`, in the order `seeded` selects
/// ([`seeds_accumulator`]).
pub fn element(kd: usize, prod: impl Fn(usize) -> f32, old: Option<f32>, negate: bool, seeded: bool) -> f32 {
    let steps = (0..kd).step_by(STEP_K).map(|k0| k0..(k0 + STEP_K).min(kd));
    if seeded {
        // tcgen05.mma: D_old seeds the first step; negation is on A, so in every product.
        let sign = if negate { -1.0f32 } else { 1.0 };
        let mut d = old;
        for r in steps {
            d = Some(step(d, r.map(|kk| sign * prod(kk))));
        }
        d.unwrap_or(0.0)
    } else {
        // mma.sync: registers from +0, then one f32 operation with D_old at the end.
        let mut acc = 0.0f32;
        for r in steps {
            acc = step(Some(acc), r.map(&prod));
        }
        match (old, negate) {
            (Some(o), false) => o + acc,
            (Some(o), true) => o - acc,
            (None, false) => acc,
            (None, true) => -acc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: f32 = 16_777_216.0; // 2^24: the f32 spacing above it is 2

    #[test]
    fn only_tmem_accumulators_on_sm100a_are_seeded() {
        assert!(seeds_accumulator(Target::Sm100a, Space::Tmem));
        for s in [Space::Reg, Space::Smem] {
            assert!(!seeds_accumulator(Target::Sm100a, s));
        }
        for s in [Space::Reg, Space::Smem, Space::Tmem] {
            assert!(!seeds_accumulator(Target::Sm90a, s));
        }
    }

    #[test]
    fn association_with_the_old_accumulator() {
        // Two K steps, each summing to 1: 2^24 + 1 is a tie that rounds to even (2^24).
        let prod = |kk: usize| if kk.is_multiple_of(16) { 1.0 } else { 0.0 };
        assert_eq!(element(32, prod, Some(BIG), false, false), BIG + 2.0);
        assert_eq!(element(32, prod, Some(BIG), false, true), BIG);
        // -= from −2^24: sm_90a computes −2^24 − 2 (exact); sm_100a adds −1 twice, and
        // −2^24 − 1 is a tie that rounds to even (−2^24) each time.
        assert_eq!(element(32, prod, Some(-BIG), true, false), -BIG - 2.0);
        assert_eq!(element(32, prod, Some(-BIG), true, true), -BIG);
        // Without accumulation both are the plain (negated) step sums.
        for seeded in [false, true] {
            assert_eq!(element(32, prod, None, false, seeded), 2.0);
            assert_eq!(element(32, prod, None, true, seeded), -2.0);
        }
    }

    #[test]
    fn one_rounding_per_step() {
        // 2^24 + 1 − 1 within one step is exact in f64: the step is 2^24, not the f32
        // sequential (2^24 + 1) − 1 = 2^24 − 1.
        let v = [BIG, 1.0, -1.0];
        assert_eq!(element(3, |kk| v[kk], None, false, false), BIG);
        // A partial last step (K = 20: steps of 16 and 4).
        assert_eq!(element(20, |_| 1.0, Some(BIG), false, true), BIG + 20.0);
    }
}
