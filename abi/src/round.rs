//! Correctly rounded narrowing to the 16-bit formats: f32 or f64 → bf16 / f16, round to
//! nearest, ties to even — the rounding of the GPU's `cvt.rn.bf16.f32` / `cvt.rn.f16.f32`.
//!
//! Every tool that turns a wide value into a 16-bit one (host tensors, the interpreter's
//! storage rounding, kverify's input generation and error model) calls these functions, so a
//! value has the same 16-bit image everywhere.
//!
//! From f32, `half`'s `from_f32` is already a single correct rounding. From f64 it is not:
//! `half::bf16::from_f64` goes through f32 with round-to-nearest first, and that double
//! rounding is wrong for values just above a tie (`1 + 2⁻⁸ + 2⁻⁴⁰` becomes 1.0 instead of
//! 1.0078125). Here f64 → 16-bit is done in two steps, f64 → f32 with *round to odd*, then
//! f32 → 16-bit with round to nearest even. Rounding to odd in a format with at least two more
//! significand bits than the target makes the second rounding exact (Boldo & Melquiond,
//! "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd",
//! IEEE TC 2008, §3); f32 has 24 significand bits against bf16's 8 and f16's 11. The
//! exponent ranges also fit: every f16 and bf16 subnormal is an f32 normal or subnormal with
//! at least two spare bits below it, so the argument holds there too.

use half::{bf16, f16};

/// Rounds an f64 to f32 with round-to-odd: if `x` is not exactly representable, the result is
/// the neighbour toward zero with its last significand bit forced to 1. NaN stays NaN; values
/// beyond `f32::MAX` become `±f32::MAX` with its odd last bit (which the next rounding then
/// sends to infinity or keeps, as a direct rounding would).
fn f64_to_f32_round_odd(x: f64) -> f32 {
    let r = x as f32;
    if x.is_nan() || f64::from(r) == x {
        return r;
    }
    // Truncate toward zero: step back one ulp if the nearest rounding went away from zero.
    let mut bits = r.to_bits();
    if f64::from(r).abs() > x.abs() {
        bits -= 1; // magnitude bits are monotone in the value; r != 0 here since |r| > |x| ≥ 0
    }
    f32::from_bits(bits | 1)
}

/// f32 → bf16, round to nearest, ties to even (NaN stays NaN, overflow gives ±∞).
#[inline]
pub fn f32_to_bf16(x: f32) -> bf16 {
    bf16::from_f32(x)
}

/// f32 → f16, round to nearest, ties to even (NaN stays NaN, overflow gives ±∞).
#[inline]
pub fn f32_to_f16(x: f32) -> f16 {
    f16::from_f32(x)
}

/// f64 → bf16 with one correct rounding to nearest, ties to even (see the module docs).
pub fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_round_odd(x))
}

/// f64 → f16 with one correct rounding to nearest, ties to even (see the module docs).
pub fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_round_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn f64_narrowing_is_correctly_rounded() {
        // Just above the bf16 tie between 1.0 and 1 + 2^-7, by less than f32 can show:
        // correct rounding goes up; dropping the low bits first (double rounding) goes down.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(f64::from(f64_to_bf16(x)), 1.0078125);
        assert_eq!(f64::from(f64_to_bf16(x)), 1.0 + 2f64.powi(-7));
        assert_eq!(f64::from(half::bf16::from_f64(x)), 1.0, "half's double rounding, for the record");
        assert_eq!(f64::from(f64_to_bf16(1.0 + 2f64.powi(-8))), 1.0);
        let y = 1.0 + 2f64.powi(-11) + 2f64.powi(-45);
        assert_eq!(f64::from(f64_to_f16(y)), 1.0 + 2f64.powi(-10));
        assert_eq!(f64::from(f64_to_f16(1.0 + 2f64.powi(-11))), 1.0);
        // Negative, overflow, subnormal, NaN.
        assert_eq!(f64::from(f64_to_bf16(-x)), -(1.0 + 2f64.powi(-7)));
        assert!(f64::from(f64_to_f16(1e6)).is_infinite());
        assert!(f64::from(f64_to_bf16(1e300)).is_infinite());
        assert_eq!(f64::from(f64_to_f16(2f64.powi(-24))), 2f64.powi(-24)); // smallest f16 subnormal
        assert_eq!(f64::from(f64_to_f16(2f64.powi(-26))), 0.0); // below half of it
        assert_eq!(f64::from(f64_to_f16(2f64.powi(-25) + 2f64.powi(-60))), 2f64.powi(-24));
        assert_eq!(f64::from(f64_to_bf16(1e-300)), 0.0);
        assert!(f64::from(f64_to_bf16(f64::NAN)).is_nan());
        assert!(f64::from(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn round_odd_helper() {
        assert_eq!(f64_to_f32_round_odd(1.5), 1.5);
        let x = 1.0 + 2f64.powi(-30);
        let r = f64_to_f32_round_odd(x);
        assert_eq!(r.to_bits(), 1.0f32.to_bits() | 1);
        let r = f64_to_f32_round_odd(-x);
        assert_eq!(r.to_bits(), (-1.0f32).to_bits() | 1);
        assert_eq!(f64_to_f32_round_odd(1e-60).to_bits(), 1); // smallest subnormal, odd
        assert_eq!(f64_to_f32_round_odd(1e60), f32::MAX);
    }

    /// A 16-bit format as the oracle sees it: value of a bit pattern, and its bit patterns.
    struct Format {
        value: fn(u16) -> f64,
        /// Bits of the largest finite magnitude.
        max_bits: u16,
        /// log2 of the spacing between the largest finite value and the next (virtual) one.
        top_ulp_log2: i32,
    }

    const BF16: Format = Format { value: |b| f64::from(bf16::from_bits(b)), max_bits: 0x7f7f, top_ulp_log2: 127 - 7 };
    const F16: Format = Format { value: |b| f64::from(f16::from_bits(b)), max_bits: 0x7bff, top_ulp_log2: 15 - 10 };

    /// Signed position of a non-NaN bit pattern on the number line (±0 both map to 0).
    fn order(bits: u16) -> i32 {
        let mag = i32::from(bits & 0x7fff);
        if bits & 0x8000 != 0 {
            -mag
        } else {
            mag
        }
    }

    fn from_order(o: i32) -> u16 {
        if o < 0 {
            0x8000 | (-o) as u16
        } else {
            o as u16
        }
    }

    /// Whether `got` is the round-to-nearest-even image of `x`, checked independently of the
    /// conversion: `x` must lie between the midpoints to `got`'s two neighbours (midpoints of
    /// 16-bit numbers are exact in f64, so the comparisons are exact), and on a midpoint `got`
    /// must have an even last bit. ±∞ is right exactly beyond the overflow threshold.
    fn is_correctly_rounded(f: &Format, x: f64, got: u16) -> bool {
        let max = (f.value)(f.max_bits);
        let threshold = max + 2f64.powi(f.top_ulp_log2 - 1); // max + half an ulp: ties go to ∞
        let got_v = (f.value)(got);
        if got_v.is_infinite() {
            return x.abs() >= threshold && got_v.signum() == x.signum();
        }
        let o = order(got);
        let neighbour = |d: i32| -> f64 {
            if o.abs() == i32::from(f.max_bits) && (o + d).abs() > o.abs() {
                got_v.signum() * (max + 2f64.powi(f.top_ulp_log2)) // the virtual next value
            } else {
                (f.value)(from_order(o + d))
            }
        };
        let (lo_mid, hi_mid) = ((neighbour(-1) + got_v) / 2.0, (neighbour(1) + got_v) / 2.0);
        let even = got & 1 == 0;
        (x > lo_mid || (x == lo_mid && even)) && (x < hi_mid || (x == hi_mid && even))
    }

    /// Finite f64 values around the 16-bit ranges: random sign and significand, exponents from
    /// below the smallest subnormal to beyond the largest finite bf16.
    fn wide_f64() -> impl Strategy<Value = f64> {
        (any::<bool>(), 0u64..(1 << 52), -150i32..130).prop_map(|(neg, mant, e)| {
            let x = (1.0 + mant as f64 / (1u64 << 52) as f64) * 2f64.powi(e);
            if neg {
                -x
            } else {
                x
            }
        })
    }

    /// Values within a few f64 ulps of a 16-bit midpoint, where double rounding goes wrong.
    fn near_ties(f: &'static Format) -> impl Strategy<Value = f64> {
        (0u16..=f.max_bits, any::<bool>(), -3i64..=3).prop_map(move |(bits, neg, ulps)| {
            let lo = (f.value)(bits);
            let hi = if bits == f.max_bits { lo + 2f64.powi(f.top_ulp_log2) } else { (f.value)(bits + 1) };
            let mid = (lo + hi) / 2.0;
            let x = f64::from_bits((mid.to_bits() as i64 + ulps) as u64);
            if neg {
                -x
            } else {
                x
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn f64_to_bf16_is_exactly_rounded(x in wide_f64()) {
            prop_assert!(is_correctly_rounded(&BF16, x, f64_to_bf16(x).to_bits()), "x = {x:e}");
        }

        #[test]
        fn f64_to_bf16_is_exactly_rounded_near_ties(x in near_ties(&BF16)) {
            prop_assert!(is_correctly_rounded(&BF16, x, f64_to_bf16(x).to_bits()), "x = {x:e}");
        }

        #[test]
        fn f64_to_f16_is_exactly_rounded(x in wide_f64()) {
            prop_assert!(is_correctly_rounded(&F16, x, f64_to_f16(x).to_bits()), "x = {x:e}");
        }

        #[test]
        fn f64_to_f16_is_exactly_rounded_near_ties(x in near_ties(&F16)) {
            prop_assert!(is_correctly_rounded(&F16, x, f64_to_f16(x).to_bits()), "x = {x:e}");
        }

        #[test]
        fn f32_to_16_bit_is_exactly_rounded(x in wide_f64()) {
            let x = x as f32;
            prop_assert!(is_correctly_rounded(&BF16, f64::from(x), f32_to_bf16(x).to_bits()));
            prop_assert!(is_correctly_rounded(&F16, f64::from(x), f32_to_f16(x).to_bits()));
        }
    }

    #[test]
    fn the_oracle_catches_double_rounding() {
        // The oracle must reject half's answer for the review's example, or it proves nothing.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert!(!is_correctly_rounded(&BF16, x, half::bf16::from_f64(x).to_bits()));
        assert!(is_correctly_rounded(&BF16, x, f64_to_bf16(x).to_bits()));
    }
}
