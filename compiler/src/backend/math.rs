//! f32 `exp2` and `log2` without `ex2.approx`/`lg2.approx` (2 ulp, flushing subnormals).
//!
//! exp2 is the IR's own sequence of f32 operations ([`crate::ir::exp2`]), emitted here in the
//! order the interpreter performs it: the GPU's exp2 is the interpreter's bit for bit, within
//! one ulp of the correctly rounded result.
//! log2: computed in f64 and rounded once to f32. `x = m·2^e` with `m ∈ [√½, √2)`;
//! `ln m = 2·atanh(s)`, `s = (m-1)/(m+1)`, `|s| ≤ 0.172`, series to `s^23` (truncation < 1e-18).
//! A standard range reduction (e.g. Muller, "Elementary Functions", ch. 11); the code is
//! written here from those formulas.

use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::FloatPredicate;

use super::emit::Codegen;
use super::BackendError;
use crate::ir::exp2::Exp2Arith;

impl<'ctx> Codegen<'ctx, '_> {
    fn f64c(&self, c: f64) -> FloatValue<'ctx> {
        self.ctx.f64_type().const_float(c)
    }

    fn call_f64(&self, name: &str, args: &[BasicValueEnum<'ctx>]) -> Result<FloatValue<'ctx>, BackendError> {
        Ok(self.call(name, Some(self.ctx.f64_type().into()), args)?.into_float_value())
    }

    /// `2^x` for f32 `x`: the IR's operation sequence ([`crate::ir::exp2`]) on LLVM values.
    pub fn exp2_accurate(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        crate::ir::exp2::exp2(&Exp2Ops(self), x)
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

/// [`Exp2Arith`] as LLVM instructions: `llvm.fma.f32` (`fma.rn.f32`), `llvm.rint.f32`
/// (`cvt.rni.f32.f32`), `llvm.maxnum`/`minnum.f32`, and IEEE `fmul`/`fsub` (no fast-math flags,
/// subnormals kept), so that each step rounds as the interpreter's f32 step does.
struct Exp2Ops<'a, 'ctx, 'm>(&'a Codegen<'ctx, 'm>);

impl<'ctx> Exp2Arith for Exp2Ops<'_, 'ctx, '_> {
    type F = FloatValue<'ctx>;
    type I = IntValue<'ctx>;
    type E = BackendError;
    fn constant(&self, c: f32) -> FloatValue<'ctx> {
        self.0.ctx.f32_type().const_float(c as f64)
    }
    fn fma(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>, c: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        self.call_f32("llvm.fma.f32", &[a.into(), b.into(), c.into()])
    }
    fn mul(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        Ok(self.0.b.build_float_mul(a, b, "")?)
    }
    fn sub(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        Ok(self.0.b.build_float_sub(a, b, "")?)
    }
    fn clamp(&self, x: FloatValue<'ctx>, lo: f32, hi: f32) -> Result<FloatValue<'ctx>, BackendError> {
        let x = self.call_f32("llvm.maxnum.f32", &[x.into(), self.constant(lo).into()])?;
        self.call_f32("llvm.minnum.f32", &[x.into(), self.constant(hi).into()])
    }
    fn rint(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        self.call_f32("llvm.rint.f32", &[x.into()])
    }
    fn to_int(&self, x: FloatValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.0.b.build_float_to_signed_int(x, self.0.ctx.i32_type(), "")?)
    }
    fn half_floor(&self, n: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.0.b.build_right_shift(n, self.0.ctx.i32_type().const_int(1, false), true, "")?)
    }
    fn isub(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.0.b.build_int_sub(a, b, "")?)
    }
    fn pow2(&self, e: IntValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        let (b, i32t) = (&self.0.b, self.0.ctx.i32_type());
        let biased = b.build_int_add(e, i32t.const_int(127, false), "")?;
        let bits = b.build_left_shift(biased, i32t.const_int(23, false), "")?;
        Ok(b.build_bit_cast(bits, self.0.ctx.f32_type(), "")?.into_float_value())
    }
    fn keep_nan(&self, x: FloatValue<'ctx>, r: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, BackendError> {
        let nan = self.0.b.build_float_compare(FloatPredicate::UNO, x, x, "")?;
        Ok(self.0.b.build_select(nan, x, r, "exp2")?.into_float_value())
    }
}

impl<'ctx> Exp2Ops<'_, 'ctx, '_> {
    fn call_f32(&self, name: &str, args: &[BasicValueEnum<'ctx>]) -> Result<FloatValue<'ctx>, BackendError> {
        Ok(self.0.call(name, Some(self.0.ctx.f32_type().into()), args)?.into_float_value())
    }
}
