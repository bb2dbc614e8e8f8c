//! Accurate f32 `exp2` and `log2` computed in f64 and rounded once to f32, so the GPU agrees
//! with the CPU interpreter's `f32::exp2` / `f32::log2` (correctly rounded except in rare
//! double-rounding cases) instead of the 2-ulp `ex2.approx` / `lg2.approx`.
//!
//! exp2: `x = n + f`, `n = rint(x)`, `|f| ≤ 1/2`; `2^f = exp(f·ln2)` by its Taylor series to
//! degree 13 (|f·ln2| ≤ 0.347, truncation < 2e-17 relative); `2^n` built from exponent bits.
//! log2: `x = m·2^e` with `m ∈ [√½, √2)`; `ln m = 2·atanh(s)`, `s = (m-1)/(m+1)`, `|s| ≤ 0.172`,
//! series to `s^23` (truncation < 1e-18). Standard range reductions (e.g. Muller, "Elementary
//! Functions", ch. 11); the code is written here from those formulas.

use inkwell::values::{BasicValueEnum, FloatValue};
use inkwell::FloatPredicate;

use super::emit::Codegen;
use super::BackendError;

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
        // Horner over 1/i!, i = 13..0.
        let mut coef = [1.0f64; 14];
        for i in 1..14 {
            coef[i] = coef[i - 1] / i as f64;
        }
        let mut p = self.f64c(coef[13]);
        for i in (0..13).rev() {
            p = self.call_f64("llvm.fma.f64", &[p.into(), y.into(), self.f64c(coef[i]).into()])?;
        }
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
