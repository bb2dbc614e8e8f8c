//! MMA numerics: which association of the accumulation the interpreter follows, per target
//! ([`crate::interp::Options::target`]).
//!
//! Both lowerings issue one tensor-core instruction per K = 16 step ([`STEP_K`]); they differ
//! in where the old accumulator `D_old` enters and where `-=` negates:
//!
//! * `mma.sync.m16n8k16` — `compiler/src/backend/sm90/mma_sync.rs`, for accumulators held in
//!   shared memory: the accumulator registers start at +0, every K step accumulates into them,
//!   and at the end `D = D_old + acc` (`+=`), `D = D_old − acc` (`-=`), `D = acc` (`=`) or
//!   `D = −acc` (`= −`), each one f32 operation. So `D_old + (s₁ + s₂ + …)`: the product sum
//!   first.
//! * `tcgen05.mma` (sm_100a, `compiler/src/backend/sm100/mma.rs`, a TMEM accumulator) and
//!   `wgmma.mma_async` (sm_90a, `compiler/src/backend/sm90/wgmma.rs`, a register-resident
//!   accumulator: `passes::var_roles::VarRoles::accumulators`): the accumulator is the MMA's D;
//!   the first step takes D_old as input when accumulating (`enable_input_d` / scale-d), every
//!   later step accumulates into D, and `-=` negates A (the negate-A bit of the instruction
//!   descriptor / imm-scale-a = −1), so every step adds `(−a)·b`. So `((D_old + s₁) + s₂) + …`.
//!   Any other accumulator (not in tensor memory on sm_100a; over the register budget, or not
//!   f32, on sm_90a) takes `mma.sync`.
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
use crate::ir::{Kernel, Space, Var};
use crate::passes::var_roles::VarRoles;

/// K extent of one tensor-core instruction (`m16n8k16`, `tcgen05.mma kind::f16`).
pub const STEP_K: usize = 16;

/// Whether an MMA into `dst` of kernel `k` runs, on `target`, seeded with the old accumulator
/// (`tcgen05.mma` or `wgmma`, rather than `mma.sync`, which adds it after the product sum). The
/// same test as the back end's dispatch (each target's `Lowering`).
pub fn seeds_accumulator(target: Target, k: &Kernel, roles: &VarRoles, dst: Var) -> bool {
    (target.info().mma.tcgen05 && k.vars[dst].space == Space::Tmem) || roles.accumulator(dst).is_some()
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

/// Independent elements of one output row advanced together by [`row`]: as many dependency
/// chains of f64 additions in flight as fit in registers.
const LANES: usize = 8;

/// Row `i` of an MMA: element `j < n` is `element(kd, |kk| a_row[kk] · b_cols[j·kd + kk],
/// old[j], negate, seeded)` (`kd = a_row.len()`; `b_cols` holds B's `n` columns, each
/// contiguous), appended to `out`.
///
/// The same operations in the same order per element as [`element`] (so the same bits, a NaN's
/// sign and payload aside: x86 returns one operand's NaN, and which one follows the operand
/// order the Rust compiler chose; the GPU returns its canonical NaN anyway), but
/// [`LANES`] columns at a time: one element's K loop is a chain of dependent f64 additions, and
/// interleaving independent chains keeps the adder busy.
pub fn row(a_row: &[f32], b_cols: &[f32], n: usize, old: Option<&[f32]>, negate: bool, seeded: bool, out: &mut Vec<f32>) {
    let kd = a_row.len();
    let mut j0 = 0;
    while j0 < n {
        let w = LANES.min(n - j0);
        let col = |l: usize| &b_cols[(j0 + l) * kd..(j0 + l + 1) * kd];
        let old_at = |l: usize| old.map(|o| o[j0 + l]);
        if w < LANES || kd == 0 {
            // The ragged end of the row (or no K at all), one element at a time.
            out.extend((0..w).map(|l| {
                let c = col(l);
                element(kd, |kk| a_row[kk] * c[kk], old_at(l), negate, seeded)
            }));
            j0 += w;
            continue;
        }
        let cols: [&[f32]; LANES] = std::array::from_fn(col);
        if seeded {
            // `element`'s seeded branch per lane: D_old (if any) enters the first step's sum.
            let sign = if negate { -1.0f32 } else { 1.0 };
            let mut d: [Option<f32>; LANES] = std::array::from_fn(old_at);
            for k0 in (0..kd).step_by(STEP_K) {
                let k1 = (k0 + STEP_K).min(kd);
                let mut s: [f64; LANES] = std::array::from_fn(|l| {
                    let p = f64::from(sign * (a_row[k0] * cols[l][k0]));
                    d[l].map_or(p, |c| f64::from(c) + p)
                });
                for kk in k0 + 1..k1 {
                    for l in 0..LANES {
                        s[l] += f64::from(sign * (a_row[kk] * cols[l][kk]));
                    }
                }
                d = std::array::from_fn(|l| Some(s[l] as f32));
            }
            out.extend(d.iter().map(|x| x.unwrap_or(0.0)));
        } else {
            // `element`'s mma.sync branch per lane: steps from +0, D_old added at the end.
            let mut acc = [0.0f32; LANES];
            for k0 in (0..kd).step_by(STEP_K) {
                let k1 = (k0 + STEP_K).min(kd);
                let mut s: [f64; LANES] = std::array::from_fn(|l| f64::from(acc[l]));
                for kk in k0..k1 {
                    for l in 0..LANES {
                        s[l] += f64::from(a_row[kk] * cols[l][kk]);
                    }
                }
                acc = std::array::from_fn(|l| s[l] as f32);
            }
            out.extend((0..LANES).map(|l| match (old_at(l), negate) {
                (Some(o), false) => o + acc[l],
                (Some(o), true) => o - acc[l],
                (None, false) => acc[l],
                (None, true) => -acc[l],
            }));
        }
        j0 += LANES;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: f32 = 16_777_216.0; // 2^24: the f32 spacing above it is 2

    #[test]
    fn seeded_accumulators_follow_the_lowering() {
        // `acc` (128 x 128: 128 floats per thread) is a wgmma register accumulator on sm_90a and
        // a TMEM accumulator on sm_100a; `wide` (128 x 512: 512 floats per thread) is over the
        // sm_90a register budget and takes mma.sync there.
        let src = "kernel k(a: bf16[128, 64], b: bf16[64, 512], y: out f32[128, 512]) grid(1) threads(128) {
            let at: smem = load a[:, :];
            let bt: smem = load b[:, 0..+128];
            let bw: smem = load b[:, :];
            let acc: tmem = at @ bt;
            store y[:, 0..+128] = acc;
            let wide: tmem = at @ bw;
            store y[:, :] = wide;
        }";
        // Lowered only: the seeding rule is about the IR (the kernel is over the sm_90a
        // shared-memory budget, which is not this test's concern).
        let (file, _) = crate::syntax::parse(src);
        let (module, diags) = crate::sema::lower(&file);
        assert!(!diags.has_errors(), "{diags:?}");
        let k = &module.kernels[0];
        let var = |name: &str| k.vars.iter().find(|(_, d)| d.name == name).map(|(v, _)| v).unwrap();
        let seeds = |t: Target, v| seeds_accumulator(t, k, &VarRoles::compute(k, t.info()), var(v));
        assert!(seeds(Target::Sm100a, "acc"));
        assert!(seeds(Target::Sm100a, "wide"));
        assert!(seeds(Target::Sm90a, "acc"));
        assert!(!seeds(Target::Sm90a, "wide"));
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
    fn a_row_is_its_elements_bit_for_bit() {
        // splitmix64: a fixed stream, no dependency.
        let mut state = 7u64;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        // Values spanning many binades, signed zeros and ties near 2^24, so that any change of
        // order, lane or association shows in the bits.
        let mut draw = || -> f32 {
            let r = next();
            match r % 8 {
                0 => 0.0,
                1 => -0.0,
                2 => BIG,
                3 => -1.0,
                _ => {
                    let unit = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                    round_bf16(unit * 2f32.powi((r >> 8) as i32 % 30))
                }
            }
        };
        for kd in [0, 1, 15, 16, 17, 40, 64] {
            for n in [1, 7, 8, 9, 19, 32] {
                let a: Vec<f32> = (0..kd).map(|_| draw()).collect();
                let b: Vec<f32> = (0..n * kd).map(|_| draw()).collect();
                let old: Vec<f32> = (0..n).map(|_| draw()).collect();
                for (negate, seeded, with_old) in (0..8).map(|m| (m & 1 == 1, m & 2 == 2, m & 4 == 4)) {
                    let o = with_old.then_some(old.as_slice());
                    let mut got = vec![];
                    row(&a, &b, n, o, negate, seeded, &mut got);
                    let want: Vec<u32> = (0..n).map(|j| element(kd, |kk| a[kk] * b[j * kd + kk], o.map(|o| o[j]), negate, seeded).to_bits()).collect();
                    assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want, "kd {kd} n {n} negate {negate} seeded {seeded} old {with_old}");
                }
            }
        }
    }

    fn round_bf16(x: f32) -> f32 {
        tilec_abi::round::f32_to_bf16(x).to_f32()
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
