//! The IR's `exp2` on f32: one fixed sequence of f32 operations, each IEEE round-to-nearest-even
//! (an FMA rounds once), that the interpreter ([`exp2_f32`]) and every back end
//! (`backend::math`) perform in the same order, so the GPU's `exp2` equals the interpreter's bit
//! for bit at every argument that is not a NaN (a NaN gives a NaN; payloads are not kept bit for
//! bit). The operations are abstract ([`Exp2Arith`]): the interpreter runs them on `f32`, the
//! back end on LLVM values, and [`exp2`] is the one place the order lives.
//!
//! Range reduction: `x` is clamped to [−160, 130] (beyond, the f32 result is already 0 or +inf),
//! `n = rint(x)` and `f = x − n` (exact: `n` and `x` are within 1/2 of each other), `|f| ≤ 1/2`.
//! Polynomial: `2^f = 1 + f·q(f)` with `q` of degree 5 ([`Q`]: minimax for the relative error
//! of `1 + f·q(f)` against 2^f on [−1/2, 1/2], below 3.0e-9 with the f32 coefficients), `q` by
//! Estrin's scheme (three dependent FMAs deep; Knuth, TAOCP vol. 2, §4.6.4), then one FMA
//! `f·q + 1` so that the error of `q` is scaled by `|f·q| ≤ √2 − 1 ≈ 0.41` before the one
//! rounding that dominates. Until the thirty-second session `q` was the degree-7 Taylor polynomial
//! (`(ln 2)^i / i!`): two FMAs and two coefficient registers more per element in the kernels that
//! spend most of their instructions here (kkt_channel, scores_channel). Reconstruction:
//! `2^f · 2^⌊n/2⌋ · 2^(n−⌊n/2⌋)`, both powers normal f32 numbers built from exponent bits; the
//! first product is exact, the second rounds once (into the subnormal range as IEEE does, or to
//! +inf). A NaN argument returns itself.
//!
//! Accuracy (the tests' sweep: 2,855,407 arguments over [−150, 129], subnormal results and
//! overflow included): within one ulp of the correctly rounded 2^x everywhere, correctly rounded
//! at 92.4 % of them (92.5 % with the degree-7 Taylor `q` before); an exhaustive sweep of all 2³²
//! arguments (`exp2_is_within_an_ulp_at_every_f32`, ignored: run it with `--ignored`) finds none
//! more than one ulp off. The verifier's rounding model counts it as two roundings
//! (`verify::roundings`). The f64 evaluation the GPU used before (until 2026-12-06) was 30–35 %
//! of the instructions executed by the per-channel-gate kernels (Nsight Compute,
//! bench/ncu_kda.h100.2026-12-06.txt).

/// The f32 operations [`exp2`] is made of. `F` is an f32 value, `I` an i32 value; every float
/// operation is IEEE binary32 with round to nearest even and subnormals kept (no flush to zero).
pub trait Exp2Arith {
    /// An f32 value.
    type F: Copy;
    /// An i32 value.
    type I: Copy;
    /// Why an operation could not be built (the back end's builder errors).
    type E;
    /// The f32 constant `c`.
    fn constant(&self, c: f32) -> Self::F;
    /// `a·b + c` rounded once.
    fn fma(&self, a: Self::F, b: Self::F, c: Self::F) -> Result<Self::F, Self::E>;
    /// `a·b`.
    fn mul(&self, a: Self::F, b: Self::F) -> Result<Self::F, Self::E>;
    /// `a − b`.
    fn sub(&self, a: Self::F, b: Self::F) -> Result<Self::F, Self::E>;
    /// `min(max(x, lo), hi)` for a non-NaN `x` (a NaN `x` may give anything: [`Exp2Arith::keep_nan`] replaces it).
    fn clamp(&self, x: Self::F, lo: f32, hi: f32) -> Result<Self::F, Self::E>;
    /// `x` rounded to the nearest integer, ties to even (an integral f32).
    fn rint(&self, x: Self::F) -> Result<Self::F, Self::E>;
    /// An integral f32 in [−160, 130] as an i32 (exact).
    fn to_int(&self, x: Self::F) -> Result<Self::I, Self::E>;
    /// `⌊n/2⌋` (an arithmetic shift right by one).
    fn half_floor(&self, n: Self::I) -> Result<Self::I, Self::E>;
    /// `a − b` in i32 (no overflow in this range).
    fn isub(&self, a: Self::I, b: Self::I) -> Result<Self::I, Self::E>;
    /// `2^e` for `e` in [−126, 127]: the f32 whose bits are `(e + 127) << 23`.
    fn pow2(&self, e: Self::I) -> Result<Self::F, Self::E>;
    /// `x` where `x` is NaN, else `r`.
    fn keep_nan(&self, x: Self::F, r: Self::F) -> Result<Self::F, Self::E>;
}

/// Below this argument 2^x rounds to 0 in f32 (2⁻¹⁵¹ is below half the least subnormal).
const CLAMP_LO: f32 = -160.0;
/// Above this argument 2^x overflows f32 (2¹²⁸ is past f32::MAX).
const CLAMP_HI: f32 = 130.0;

/// The coefficients of `q`, lowest degree first: the minimax polynomial of degree 5 for the
/// relative error `|(1 + f·q(f)) / 2^f − 1|` on [−1/2, 1/2], found by Lawson's iteratively
/// reweighted least squares (Lawson 1961; Muller, *Elementary Functions*, 3rd ed., §3.6) on
/// 40,000 points, the coefficients rounded to f32 one at a time from the lowest, the higher ones
/// refitted after each rounding. The error with these f32 values is below 3.0e-9 (f64
/// evaluation), a twentieth of an f32 ulp; five coefficients (degree 4) would leave 9.2e-8,
/// more than half an ulp. Bit patterns, so that no decimal rounding intervenes.
const Q: [f32; 6] = [
    f32::from_bits(0x3f31_7218), // 0.6931472   (ln 2 rounded to f32)
    f32::from_bits(0x3e75_fdee), // 0.24022648
    f32::from_bits(0x3d63_57be), // 0.0555036
    f32::from_bits(0x3c1d_96f0), // 0.009618506
    f32::from_bits(0x3aaf_8417), // 0.0013390806
    f32::from_bits(0x3920_b59d), // 0.00015326445
];

/// Most coefficients [`estrin`] takes (its terms live in a stack array: no allocation on the
/// interpreter's per-element path).
const MAX_COEFFICIENTS: usize = 16;

/// `Σ coef[i]·y^i` by Estrin's scheme over any arithmetic (`fma(a, m, c) = a·m + c` rounded
/// once, `mul`): terms are paired as `coef[2k] + coef[2k+1]·y`, the pairs combined with `y²`,
/// those with `y⁴`, and so on, so the dependence depth is about log₂ of the degree.
fn estrin<T: Copy, E>(y: T, coef: &[T], fma: &dyn Fn(T, T, T) -> Result<T, E>, mul: &dyn Fn(T, T) -> Result<T, E>) -> Result<T, E> {
    assert!(!coef.is_empty() && coef.len() <= MAX_COEFFICIENTS, "estrin takes 1 to {MAX_COEFFICIENTS} coefficients");
    let mut terms = [coef[0]; MAX_COEFFICIENTS];
    let mut len = 0;
    for c in coef.chunks(2) {
        terms[len] = if c.len() == 2 { fma(c[1], y, c[0])? } else { c[0] };
        len += 1;
    }
    let mut power = y;
    while len > 1 {
        power = mul(power, power)?;
        let mut next = 0;
        for i in (0..len).step_by(2) {
            terms[next] = if i + 1 < len { fma(terms[i + 1], power, terms[i])? } else { terms[i] };
            next += 1;
        }
        len = next;
    }
    Ok(terms[0])
}

/// `2^x` for f32 `x` by the operations of `a`, in the order the module docs give.
pub fn exp2<A: Exp2Arith>(a: &A, x: A::F) -> Result<A::F, A::E> {
    let xc = a.clamp(x, CLAMP_LO, CLAMP_HI)?;
    let n = a.rint(xc)?;
    let f = a.sub(xc, n)?;
    let coef = Q.map(|c| a.constant(c));
    let q = estrin(f, &coef, &|p, m, c| a.fma(p, m, c), &|p, m| a.mul(p, m))?;
    let p = a.fma(f, q, a.constant(1.0))?;
    let ni = a.to_int(n)?;
    let n1 = a.half_floor(ni)?;
    let n2 = a.isub(ni, n1)?;
    let r = a.mul(a.mul(p, a.pow2(n1)?)?, a.pow2(n2)?)?;
    a.keep_nan(x, r)
}

/// [`Exp2Arith`] on the CPU's f32.
struct Cpu;

impl Exp2Arith for Cpu {
    type F = f32;
    type I = i32;
    type E = std::convert::Infallible;
    fn constant(&self, c: f32) -> f32 {
        c
    }
    fn fma(&self, a: f32, b: f32, c: f32) -> Result<f32, Self::E> {
        Ok(a.mul_add(b, c))
    }
    fn mul(&self, a: f32, b: f32) -> Result<f32, Self::E> {
        Ok(a * b)
    }
    fn sub(&self, a: f32, b: f32) -> Result<f32, Self::E> {
        Ok(a - b)
    }
    fn clamp(&self, x: f32, lo: f32, hi: f32) -> Result<f32, Self::E> {
        Ok(x.max(lo).min(hi))
    }
    fn rint(&self, x: f32) -> Result<f32, Self::E> {
        Ok(x.round_ties_even())
    }
    fn to_int(&self, x: f32) -> Result<i32, Self::E> {
        Ok(x as i32)
    }
    fn half_floor(&self, n: i32) -> Result<i32, Self::E> {
        Ok(n >> 1)
    }
    fn isub(&self, a: i32, b: i32) -> Result<i32, Self::E> {
        Ok(a - b)
    }
    fn pow2(&self, e: i32) -> Result<f32, Self::E> {
        Ok(f32::from_bits(((e + 127) as u32) << 23))
    }
    fn keep_nan(&self, x: f32, r: f32) -> Result<f32, Self::E> {
        Ok(if x.is_nan() { x } else { r })
    }
}

/// The IR's `exp2(x)` on the CPU (the interpreter's), bitwise what the back ends compute.
pub fn exp2_f32(x: f32) -> f32 {
    match exp2(&Cpu, x) {
        Ok(r) => r,
        Err(e) => match e {},
    }
}

#[cfg(test)]
mod tests {
    use super::{estrin, exp2_f32};

    /// The correctly rounded 2^x for f32 `x` (f64's exp2 is within an f64 ulp; the rare double
    /// rounding that could cause is below what these tests count).
    fn exact(x: f32) -> f32 {
        (x as f64).exp2() as f32
    }

    #[test]
    fn estrin_equals_the_polynomial_it_schedules() {
        // Integer coefficients and y = 2: every intermediate is exact, so any schedule that
        // takes every term once gives the sum; every length exercises the odd leftovers.
        let coef: Vec<f64> = (1..=14).map(f64::from).collect();
        let fma = |a: f64, m: f64, c: f64| Ok::<_, ()>(a * m + c);
        let mul = |a: f64, m: f64| Ok::<_, ()>(a * m);
        for len in 1..=14 {
            let want: f64 = coef[..len].iter().enumerate().map(|(i, c)| c * 2f64.powi(i as i32)).sum();
            assert_eq!(estrin(2.0, &coef[..len], &fma, &mul).unwrap(), want, "degree {}", len - 1);
        }
    }

    #[test]
    fn exp2_is_within_an_ulp_everywhere_and_mostly_correctly_rounded() {
        // 758,253 arguments from −150 (subnormal results) to past overflow at 128, and 2²⁰ + 1
        // evenly spaced reduced arguments in [−1/2, 1/2], each shifted into the normal range.
        let sweep = (0..758_253).map(|i| -150.0f32 + i as f32 * 0.000_37);
        let reduced = (-(1 << 19)..=1 << 19).flat_map(|k| [k as f32 / (1 << 20) as f32, k as f32 / (1 << 20) as f32 - 37.0]);
        let (mut n, mut off) = (0u32, 0u32);
        for x in sweep.chain(reduced) {
            let (got, want) = (exp2_f32(x), exact(x));
            n += 1;
            if got.to_bits() != want.to_bits() {
                off += 1;
                assert_eq!(got.to_bits().abs_diff(want.to_bits()), 1, "x = {x:e}: {got:e} against 2^x = {want:e}");
            }
        }
        assert_eq!(n, 758_253 + 2 * ((1 << 20) + 1));
        // 217,633 of these (7.6 %) are one ulp off: the final FMA rounds once, and q's own
        // rounding (scaled by |f·q| ≤ √2 − 1 ≈ 0.41) moves about one in thirteen across a
        // halfway point.
        assert!(off * 10 <= n, "{off} of {n} points not correctly rounded");
        eprintln!("exp2: {off} of {n} points one ulp off, the rest correctly rounded");
    }

    #[test]
    #[ignore = "exhaustive over all 2³² f32 arguments: about two minutes on two cores; run with --ignored"]
    fn exp2_is_within_an_ulp_at_every_f32() {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
        let span = (1u64 << 32).div_ceil(threads);
        let worst: Vec<(u32, u32)> = std::thread::scope(|s| {
            let parts: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let (mut off, mut far) = (0u32, 0u32);
                        for bits in (t * span)..((t + 1) * span).min(1 << 32) {
                            let x = f32::from_bits(bits as u32);
                            if x.is_nan() {
                                continue;
                            }
                            let d = exp2_f32(x).to_bits().abs_diff(exact(x).to_bits());
                            off += u32::from(d == 1);
                            far += u32::from(d > 1);
                        }
                        (off, far)
                    })
                })
                .collect();
            parts.into_iter().map(|p| p.join().expect("sweep thread")).collect()
        });
        let (off, far) = worst.iter().fold((0, 0), |(a, b), (o, f)| (a + o, b + f));
        eprintln!("exp2 over every non-NaN f32: {off} one ulp off, {far} further");
        assert_eq!(far, 0, "{far} arguments more than one ulp off");
    }

    #[test]
    fn exp2_special_values() {
        assert_eq!(exp2_f32(0.0), 1.0);
        assert_eq!(exp2_f32(-0.0), 1.0);
        for k in -149..=127 {
            assert_eq!(exp2_f32(k as f32), (k as f64).exp2() as f32, "2^{k} is exact");
        }
        assert_eq!(exp2_f32(128.0), f32::INFINITY);
        assert_eq!(exp2_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp2_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp2_f32(-151.0), 0.0);
        assert_eq!(exp2_f32(-149.5), exact(-149.5));
        assert!(exp2_f32(f32::NAN).is_nan());
        assert_eq!(exp2_f32(127.99999), exact(127.99999));
    }
}
