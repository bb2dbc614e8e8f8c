//! MMA numerics: which association of the accumulation the interpreter follows, per target.
//!
//! Both lowerings issue one tensor-core instruction per K = 16 step ([`STEP_K`]); they differ
//! in where the old accumulator `D_old` enters and where `-=` negates:
//!
//! * [`MmaNumerics::Sm90a`] — `compiler/src/backend/mma_sm90.rs` (`mma.sync.m16n8k16`): the
//!   accumulator registers start at +0, every K step accumulates into them, and at the end
//!   `D = D_old + acc` (`+=`), `D = D_old − acc` (`-=`), `D = acc` (`=`) or `D = −acc` (`= −`),
//!   each one f32 operation. So `D_old + (s₁ + s₂ + …)`: the product sum first.
//! * [`MmaNumerics::Sm100a`] — `compiler/src/backend/mma_sm100.rs` (`tcgen05.mma`): the
//!   accumulator in tensor memory is the MMA's D; the first step has `enable_input_d` =
//!   accumulate (D_old is the seed), every later step accumulates into D, and `-=` sets the
//!   negate-A bit of the instruction descriptor, so every step adds `(−a)·b`. So
//!   `((D_old + s₁) + s₂) + …`. An accumulator that is not in tensor memory falls back to
//!   `mma.sync` on sm_100a too (`mma_sm100`: `space != Space::Tmem` → `mma_sm90`), so it gets
//!   the sm_90a order.
//!
//! One K step (PTX ISA, `mma` and `tcgen05.mma`: `D = A·B + C`) is modelled as its exact
//! products (bf16·bf16 and f16·f16 products are exact in f32) summed together with the
//! incoming accumulator C in f64 and rounded once to f32. The tensor core's internal order,
//! alignment and rounding within one step are not specified by NVIDIA and are not modelled:
//! the GPU may differ from the interpreter in the last bits of a step. The f64 sum is exact
//! while the 17 terms span less than about 2^28 in magnitude; beyond that the smallest terms
//! are rounded once in f64 before the f32 rounding.

use std::fmt;
use std::str::FromStr;

use crate::ir::Space;

/// K extent of one tensor-core instruction (`m16n8k16`, `tcgen05.mma kind::f16`).
pub const STEP_K: usize = 16;

/// Whose MMA accumulation order the interpreter follows (see the module docs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum MmaNumerics {
    /// The sm_90a lowering (`mma.sync`): product sum first, then one f32 operation with the old
    /// accumulator.
    #[default]
    Sm90a,
    /// The sm_100a lowering: `tcgen05.mma` seeded with the old accumulator for TMEM
    /// accumulators (every K step rounds into it), `mma.sync` (as [`MmaNumerics::Sm90a`]) for
    /// the others.
    Sm100a,
}

impl MmaNumerics {
    /// Every variant.
    pub const ALL: [MmaNumerics; 2] = [MmaNumerics::Sm90a, MmaNumerics::Sm100a];

    /// The target name (`sm_90a`, `sm_100a`).
    pub fn name(self) -> &'static str {
        match self {
            MmaNumerics::Sm90a => "sm_90a",
            MmaNumerics::Sm100a => "sm_100a",
        }
    }

    /// Whether an MMA into an accumulator in `space` seeds the tensor core with the old
    /// accumulator (the `tcgen05.mma` path) rather than adding it after the product sum.
    pub fn seeds_accumulator(self, space: Space) -> bool {
        self == MmaNumerics::Sm100a && space == Space::Tmem
    }
}

impl fmt::Display for MmaNumerics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MmaNumerics {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        MmaNumerics::ALL.into_iter().find(|n| n.name() == s).ok_or_else(|| format!("unknown target `{s}` (expected sm_90a or sm_100a)"))
    }
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
/// ([`MmaNumerics::seeds_accumulator`]).
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
    fn names_round_trip() {
        for n in MmaNumerics::ALL {
            assert_eq!(n.name().parse::<MmaNumerics>(), Ok(n));
        }
        assert_eq!(MmaNumerics::default(), MmaNumerics::Sm90a);
        assert!("sm_80".parse::<MmaNumerics>().is_err());
    }

    #[test]
    fn only_tmem_accumulators_on_sm100a_are_seeded() {
        assert!(MmaNumerics::Sm100a.seeds_accumulator(Space::Tmem));
        for s in [Space::Reg, Space::Smem] {
            assert!(!MmaNumerics::Sm100a.seeds_accumulator(s));
        }
        for s in [Space::Reg, Space::Smem, Space::Tmem] {
            assert!(!MmaNumerics::Sm90a.seeds_accumulator(s));
        }
    }

    #[test]
    fn association_with_the_old_accumulator() {
        // Two K steps, each summing to 1: 2^24 + 1 is a tie that rounds to even (2^24).
        let prod = |kk: usize| if kk % 16 == 0 { 1.0 } else { 0.0 };
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
