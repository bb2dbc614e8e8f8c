//! Accurate f32 `exp2` and `log2` computed in f64 and rounded once to f32, so the GPU agrees
//! with the CPU interpreter's `f32::exp2` / `f32::log2` (correctly rounded except in rare
//! double-rounding cases) instead of the 2-ulp `ex2.approx` / `lg2.approx`.
//!
//! exp2: `x = n + f`, `n = rint(x)`, `|f| ≤ 1/2`; `2^f = exp(f·ln2)` by its Taylor series to
//! degree 13 (|f·ln2| ≤ 0.347, truncation < 2e-17 relative); `2^n` built from exponent bits.
//! The polynomial is evaluated by Estrin's scheme ([`estrin`]: pairs, then quadruples, … —
//! Knuth, TAOCP vol. 2, §4.6.4): four dependent f64 operations deep instead of Horner's
//! thirteen. The per-channel-gate kernels evaluate O(C²·K) exp2 per CTA and Nsight Compute
//! showed them stalled on fixed-latency dependencies ("wait", docs/results.md, 2026-12-04).
//! log2: `x = m·2^e` with `m ∈ [√½, √2)`; `ln m = 2·atanh(s)`, `s = (m-1)/(m+1)`, `|s| ≤ 0.172`,
//! series to `s^23` (truncation < 1e-18). Standard range reductions (e.g. Muller, "Elementary
//! Functions", ch. 11); the code is written here from those formulas.

use inkwell::values::{BasicValueEnum, FloatValue};
use inkwell::FloatPredicate;

use super::emit::Codegen;
use super::BackendError;

/// The Taylor coefficients of `exp(y)` to degree 13: `1/i!`, i = 0..=13.
pub(crate) fn exp_taylor_coefficients() -> [f64; 14] {
    let mut coef = [1.0f64; 14];
    for i in 1..14 {
        coef[i] = coef[i - 1] / i as f64;
    }
    coef
}

/// `Σ coef[i]·y^i` by Estrin's scheme over any arithmetic (`fma(a, m, c) = a·m + c` rounded
/// once, `mul`): terms are paired as `coef[2k] + coef[2k+1]·y`, the pairs combined with `y²`,
/// those with `y⁴`, and so on, so the dependence depth is about log₂ of the degree. The back
/// end runs it on LLVM values; the unit tests run the same schedule on `f64`.
pub(crate) fn estrin<T: Copy, E>(y: T, coef: &[T], fma: &dyn Fn(T, T, T) -> Result<T, E>, mul: &dyn Fn(T, T) -> Result<T, E>) -> Result<T, E> {
    debug_assert!(!coef.is_empty(), "a polynomial needs a coefficient");
    let mut terms: Vec<T> = coef.chunks(2).map(|c| if c.len() == 2 { fma(c[1], y, c[0]) } else { Ok(c[0]) }).collect::<Result<_, _>>()?;
    let mut power = y;
    while terms.len() > 1 {
        power = mul(power, power)?;
        terms = terms.chunks(2).map(|t| if t.len() == 2 { fma(t[1], power, t[0]) } else { Ok(t[0]) }).collect::<Result<_, _>>()?;
    }
    Ok(terms[0])
}

impl<'ctx> Codegen<'ctx, '_> {
    fn f64c(&self, c: f64) -> FloatValue<'ctx> {
        self.ctx.f64_type().const_float(c)
    }

    fn call_f64(&self, name: &str, args: &[BasicValueEnum<'ctx>]) -> Result<FloatValue<'ctx>, BackendError> {
        Ok(self.call(name, Some(self.ctx.f64_type().into()), args)?.into_float_value())
    }

    /// `2^x` for f32 `x`, see the module docs.
    pub fn exp2_accurate(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        let b = &self.b;
        let f64t = self.ctx.f64_type();
        let xd = b.build_float_ext(x, f64t, "")?;
        // Clamp: beyond ±200 the f32 result is already 0 or inf.
        let xc = self.call_f64("llvm.maxnum.f64", &[xd.into(), self.f64c(-200.0).into()])?;
        let xc = self.call_f64("llvm.minnum.f64", &[xc.into(), self.f64c(200.0).into()])?;
        let n = self.call_f64("llvm.rint.f64", &[xc.into()])?;
        let f = b.build_float_sub(xc, n, "")?;
        let y = b.build_float_mul(f, self.f64c(std::f64::consts::LN_2), "")?;
        let fma = |a: FloatValue<'ctx>, m: FloatValue<'ctx>, c: FloatValue<'ctx>| self.call_f64("llvm.fma.f64", &[a.into(), m.into(), c.into()]);
        let mul = |a: FloatValue<'ctx>, m: FloatValue<'ctx>| Ok(b.build_float_mul(a, m, "")?);
        let coef = exp_taylor_coefficients().map(|c| self.f64c(c));
        let p = estrin(y, &coef, &fma, &mul)?;
        let i64t = self.ctx.i64_type();
        let ni = b.build_float_to_signed_int(n, i64t, "")?;
        let biased = b.build_int_add(ni, i64t.const_int(1023, false), "")?;
        let bits = b.build_left_shift(biased, i64t.const_int(52, false), "")?;
        let scale = b.build_bit_cast(bits, f64t, "")?.into_float_value();
        let r = b.build_float_mul(p, scale, "")?;
        let r32 = b.build_float_trunc(r, self.ctx.f32_type(), "")?;
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "")?;
        Ok(b.build_select(nan, x, r32, "exp2")?.into_float_value())
    }

    /// `log2(x)` for f32 `x`, see the module docs (0 → -inf, negative or NaN → NaN, inf → inf).
    pub fn log2_accurate(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        let b = &self.b;
        let (f32t, f64t, i64t) = (self.ctx.f32_type(), self.ctx.f64_type(), self.ctx.i64_type());
        let xd = b.build_float_ext(x, f64t, "")?;
        // In f64 every f32 (subnormals included) is normal: take exponent and mantissa bits.
        let bits = b.build_bit_cast(xd, i64t, "")?.into_int_value();
        let e_raw = b.build_right_shift(bits, i64t.const_int(52, false), false, "")?;
        let e_raw = b.build_and(e_raw, i64t.const_int(0x7ff, false), "")?;
        let mant = b.build_and(bits, i64t.const_int((1u64 << 52) - 1, false), "")?;
        let m = b.build_bit_cast(b.build_or(mant, i64t.const_int(1023u64 << 52, false), "")?, f64t, "")?.into_float_value();
        let e = b.build_int_sub(e_raw, i64t.const_int(1023, false), "")?;
        let e = b.build_signed_int_to_float(e, f64t, "")?;
        // Move m into [√½, √2).
        let big = b.build_float_compare(FloatPredicate::OGT, m, self.f64c(std::f64::consts::SQRT_2), "")?;
        let m = b.build_select(big, b.build_float_mul(m, self.f64c(0.5), "")?, m, "")?.into_float_value();
        let e = b.build_select(big, b.build_float_add(e, self.f64c(1.0), "")?, e, "")?.into_float_value();
        let s = b.build_float_div(b.build_float_sub(m, self.f64c(1.0), "")?, b.build_float_add(m, self.f64c(1.0), "")?, "")?;
        let s2 = b.build_float_mul(s, s, "")?;
        // atanh(s)/s = Σ s^(2k)/(2k+1), k = 0..11.
        let mut p = self.f64c(1.0 / 23.0);
        for k in (0..11).rev() {
            p = self.call_f64("llvm.fma.f64", &[p.into(), s2.into(), self.f64c(1.0 / (2 * k + 1) as f64).into()])?;
        }
        let ln_m = b.build_float_mul(b.build_float_mul(s, p, "")?, self.f64c(2.0), "")?;
        let l = self.call_f64("llvm.fma.f64", &[ln_m.into(), self.f64c(std::f64::consts::LOG2_E).into(), e.into()])?;
        let r = b.build_float_trunc(l, f32t, "")?;
        // Special cases.
        let inf = f32t.const_float(f64::INFINITY);
        let is_zero = b.build_float_compare(FloatPredicate::OEQ, x, f32t.const_zero(), "")?;
        let is_inf = b.build_float_compare(FloatPredicate::OEQ, x, inf, "")?;
        let bad = b.build_float_compare(FloatPredicate::ULT, x, f32t.const_zero(), "")?; // negative or NaN
        let r = b.build_select(is_inf, inf, r, "")?.into_float_value();
        let r = b.build_select(is_zero, f32t.const_float(f64::NEG_INFINITY), r, "")?.into_float_value();
        let r = b.build_select(bad, f32t.const_float(f64::NAN), r, "log2")?;
        Ok(r.into_float_value())
    }
}

#[cfg(test)]
mod tests {
    use super::{estrin, exp_taylor_coefficients};

    /// The back end's exp2 on the CPU: the same range reduction, the polynomial evaluated by
    /// `poly` (Estrin as emitted, or Horner as the reference).
    fn exp2_model(x: f32, poly: &dyn Fn(f64) -> f64) -> f32 {
        let xc = (x as f64).clamp(-200.0, 200.0);
        let n = xc.round_ties_even();
        let p = poly((xc - n) * std::f64::consts::LN_2);
        (p * f64::from_bits(((n as i64 + 1023) as u64) << 52)) as f32
    }

    fn estrin_f64(y: f64) -> f64 {
        let fma = |a: f64, m: f64, c: f64| Ok::<_, ()>(a.mul_add(m, c));
        let mul = |a: f64, m: f64| Ok::<_, ()>(a * m);
        estrin(y, &exp_taylor_coefficients(), &fma, &mul).unwrap()
    }

    fn horner_f64(y: f64) -> f64 {
        exp_taylor_coefficients().iter().rev().fold(0.0, |p, &c| p.mul_add(y, c))
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
    fn estrin_exp2_is_the_horner_exp2_bitwise_and_within_an_ulp_of_the_interpreter() {
        // 758,253 points from x = −150 (results around 2⁻¹⁵⁰, subnormals included) to past
        // overflow at 128.
        let (mut n, mut not_horner, mut not_libm) = (0u32, 0u32, 0u32);
        let mut x = -150.0f32;
        while x < 129.0 {
            n += 1;
            let (e, h, l) = (exp2_model(x, &estrin_f64), exp2_model(x, &horner_f64), x.exp2());
            not_horner += u32::from(e.to_bits() != h.to_bits());
            if e.to_bits() != l.to_bits() {
                not_libm += 1;
                assert_eq!(e.to_bits().abs_diff(l.to_bits()), 1, "x = {x:e}: {e:e} against f32::exp2's {l:e}");
            }
            x += 0.000_37;
        }
        assert_eq!(not_horner, 0, "Estrin and Horner differ at {not_horner} of {n} points");
        // f32::exp2 (the interpreter's) is the platform libm's exp2f, not correctly rounded:
        // 409 of these points, each one ulp (the f64 evaluation is within 2e-17 of 2^x).
        assert!(not_libm * 1000 <= n, "{not_libm} of {n} differ from f32::exp2");
    }
}
