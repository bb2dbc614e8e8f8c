//! Elementwise operations (unary, binary with NumPy broadcasting, comparisons, select, casts)
//! on scalars and tiles, and the tile generators (splat, iota, triangular masks, transpose).
//!
//! Numerics: arithmetic on bf16/f16 is done in f32 and a bf16/f16 result is rounded to nearest
//! even (`cvt.rn`); f32 division and square root are IEEE-rounded (`div.rn`, `sqrt.rn`); `exp2`
//! and `exp` use the accurate routine of [`super::math`], not `ex2.approx`. Integer division and
//! remainder are signed (indices are non-negative).

use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

use crate::ir::{Axis, BinOp, CmpOp, Elem, Inst, Op, TriMask, Type, UnOp, Value};

use super::emit::Codegen;
use super::BackendError;

/// Register class of an element type.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Class {
    /// `i1`
    Bool,
    /// `i32`
    Int,
    /// `f32`
    Float,
}

/// The register class of `e`.
pub fn class(e: Elem) -> Class {
    match e {
        Elem::Bool => Class::Bool,
        Elem::I32 => Class::Int,
        Elem::F16 | Elem::Bf16 | Elem::F32 => Class::Float,
    }
}

impl<'ctx> Codegen<'ctx, '_> {
    /// Converts a compute value of `from` to a compute value of `to`; narrowing to bf16/f16
    /// rounds to nearest even (and the value stays widened to f32).
    pub fn convert(&self, v: BasicValueEnum<'ctx>, from: Elem, to: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let v = self.to_class(v, class(from), class(to))?;
        if from != to && matches!(to, Elem::F16 | Elem::Bf16) {
            let narrow = self.to_storage(v, to)?;
            return self.to_compute(narrow, to);
        }
        Ok(v)
    }

    /// Changes register class (no rounding).
    fn to_class(&self, v: BasicValueEnum<'ctx>, from: Class, to: Class) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let (i32t, f32t) = (self.ctx.i32_type(), self.ctx.f32_type());
        Ok(match (from, to) {
            (a, b) if a == b => v,
            (Class::Bool, Class::Int) => self.b.build_int_z_extend(v.into_int_value(), i32t, "")?.into(),
            (Class::Bool, Class::Float) => self.b.build_unsigned_int_to_float(v.into_int_value(), f32t, "")?.into(),
            (Class::Int, Class::Float) => self.b.build_signed_int_to_float(v.into_int_value(), f32t, "")?.into(),
            (Class::Int, Class::Bool) => self.b.build_int_compare(IntPredicate::NE, v.into_int_value(), i32t.const_zero(), "")?.into(),
            (Class::Float, Class::Int) => self.b.build_float_to_signed_int(v.into_float_value(), i32t, "")?.into(),
            (Class::Float, Class::Bool) => self.b.build_float_compare(FloatPredicate::UNE, v.into_float_value(), f32t.const_zero(), "")?.into(),
            _ => v,
        })
    }

    /// Rounds a freshly computed f32 result to its bf16/f16 type (identity otherwise).
    fn round_to(&self, v: BasicValueEnum<'ctx>, e: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        if matches!(e, Elem::F16 | Elem::Bf16) {
            let n = self.to_storage(v, e)?;
            self.to_compute(n, e)
        } else {
            Ok(v)
        }
    }

    /// One element of a value at `(r, c)` of the consumer's iteration space, with broadcasting
    /// (a dimension of extent 1 is read at index 0). Fused values are computed here.
    pub fn operand(&self, v: Value, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        match self.k.values[v].ty {
            Type::Scalar(_) => self.scalar(v),
            Type::Tile { elem, rows, cols } => {
                let r = if rows == 1 { self.i32(0) } else { r };
                let c = if cols == 1 { self.i32(0) } else { c };
                if self.tp.fusion.is_fused(v) {
                    if let crate::ir::ValueDef::Result(d) = self.k.values[v].def {
                        return self.element(d, elem, r, c);
                    }
                }
                let idx = self.b.build_int_add(self.b.build_int_mul(r, self.i32(cols as i32), "")?, c, "")?;
                self.load_elem(self.value_buf(v)?, idx, elem)
            }
        }
    }

    /// Emits an elementwise instruction (scalar: in registers; tile: a CTA-wide loop).
    pub fn elementwise(&mut self, i: Inst) -> Result<(), BackendError> {
        let res = self.k.insts[i].result.ok_or_else(|| BackendError::Invalid("elementwise op without a result".into()))?;
        let rty = self.k.values[res].ty;
        match rty {
            Type::Scalar(_) => {
                let z = self.i32(0);
                let v = self.element(i, rty.elem(), z, z)?;
                self.scalars[res] = Some(v);
                Ok(())
            }
            Type::Tile { elem, rows, cols } => {
                let buf = self.value_buf(res)?;
                self.cta_loop(rows * cols, &mut |cg, e| {
                    let (r, c) = cg.tile_coords(e, cols)?;
                    let v = cg.element(i, elem, r, c)?;
                    cg.store_elem(buf, e, elem, v)
                })
            }
        }
    }

    /// The value of element `(r, c)` of instruction `i`'s result, of type `out`.
    pub fn element(&self, i: Inst, out: Elem, r: IntValue<'ctx>, c: IntValue<'ctx>) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let el = |v: Value| self.k.values[v].ty.elem();
        Ok(match &self.k.insts[i].op {
            op @ (Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..)) => {
                let xs = self.k.inst_args(i).into_iter().map(|a| self.operand(a, r, c)).collect::<Result<Vec<_>, _>>()?;
                self.apply(op, out, &xs)?
            }
            Op::Splat(a) => {
                let x = self.scalar(*a)?;
                self.convert(x, el(*a), out)?
            }
            Op::Iota(axis) => {
                let v = match axis {
                    Axis::Row => r,
                    Axis::Col => c,
                };
                self.convert(v.into(), Elem::I32, out)?
            }
            Op::Mask(m) => {
                let pred = match m {
                    TriMask::StrictLower => IntPredicate::ULT,
                    TriMask::Lower => IntPredicate::ULE,
                };
                let b = self.b.build_int_compare(pred, c, r, "mask")?;
                self.convert(b.into(), Elem::Bool, out)?
            }
            Op::Transpose(a) => {
                // Result (r, c) = input (c, r).
                let x = self.operand(*a, c, r)?;
                self.convert(x, el(*a), out)?
            }
            Op::Slice { src, row, col } => self.slice_element(*src, *row, *col, out, r, c)?,
            Op::Gather { src, row, col } => self.gather_element(*src, *row, *col, out, r, c)?,
            Op::Insert { base, value, row, col, rows, cols } => self.insert_element(*base, *value, *row, *col, (*rows, *cols), out, r, c)?,
            Op::Load { src, index } => {
                // Only reached for fused loads (see `fuse`).
                let v = self.load_global(*src, index, r, c)?;
                let te = self.k.params[*src].kind.elem();
                self.convert(v, te, out)?
            }
            Op::ReadVar(var) => {
                // Only reached for fused reads: of a register accumulator in its fragment order
                // (the element's own register), or of a shared-memory variable.
                if let Some(slot) = self.frag_read(*var) {
                    let x = self.b.build_load(self.ctx.f32_type(), slot, "frag")?;
                    return self.convert(x, Elem::F32, out);
                }
                let shape = self.shape_of(self.k.vars[*var].ty, "variable")?;
                let ve = self.k.vars[*var].ty.elem();
                let x = self.load_elem_in(self.var_base(*var)?, self.var_layout(*var), r, c, shape, ve)?;
                self.convert(x, ve, out)?
            }
            other => return Err(BackendError::Invalid(format!("{other:?} is not elementwise"))),
        })
    }

    /// The arithmetic of the elementwise `op` (Unary, Binary, Cmp, Select or Cast) on the values
    /// `xs` of its operands, in operand order, as a value of `out`: the one place each element's
    /// operation is emitted, whether its operands were evaluated one element at a time
    /// ([`Codegen::element`]) or a group at a time (`backend::groups`).
    pub(crate) fn apply(&self, op: &Op, out: Elem, xs: &[BasicValueEnum<'ctx>]) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let el = |v: Value| self.k.values[v].ty.elem();
        Ok(match (op, xs) {
            (Op::Unary(u, a), [x]) => {
                let x = self.to_class(*x, class(el(*a)), class(out))?;
                let y = self.unary(*u, x, out)?;
                self.round_to(y, out)?
            }
            (Op::Binary(o, a, b), [x, y]) => {
                let x = self.to_class(*x, class(el(*a)), class(out))?;
                let y = self.to_class(*y, class(el(*b)), class(out))?;
                let z = self.binary(*o, x, y, class(out))?;
                self.round_to(z, out)?
            }
            (Op::Cmp(o, a, b), [x, y]) => {
                let cl = class(el(*a)).max(class(el(*b)));
                let x = self.to_class(*x, class(el(*a)), cl)?;
                let y = self.to_class(*y, class(el(*b)), cl)?;
                self.compare(*o, x, y, cl)?.into()
            }
            (Op::Select(cnd, a, b), [p, x, y]) => {
                let p = self.to_class(*p, class(el(*cnd)), Class::Bool)?.into_int_value();
                let x = self.convert(*x, el(*a), out)?;
                let y = self.convert(*y, el(*b), out)?;
                self.b.build_select(p, x, y, "sel")?
            }
            (Op::Cast(a, to), [x]) => self.convert(*x, el(*a), *to)?,
            (other, _) => return Err(BackendError::Invalid(format!("{other:?} with {} operands is no elementwise operation", xs.len()))),
        })
    }

    fn unary(&self, op: UnOp, x: BasicValueEnum<'ctx>, out: Elem) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let f32t = self.ctx.f32_type();
        Ok(match (op, class(out)) {
            (UnOp::Neg, Class::Float) => self.b.build_float_neg(x.into_float_value(), "")?.into(),
            (UnOp::Neg, Class::Int) => self.b.build_int_neg(x.into_int_value(), "")?.into(),
            (UnOp::Abs, Class::Float) => self.call("llvm.fabs.f32", Some(f32t.into()), &[x])?,
            (UnOp::Abs, Class::Int) => {
                let neg = self.b.build_int_neg(x.into_int_value(), "")?;
                let lt = self.b.build_int_compare(IntPredicate::SLT, x.into_int_value(), self.i32(0), "")?;
                self.b.build_select(lt, neg, x.into_int_value(), "")?
            }
            (UnOp::Not, Class::Bool) => self.b.build_not(x.into_int_value(), "")?.into(),
            (UnOp::Sqrt, Class::Float) => self.call("llvm.sqrt.f32", Some(f32t.into()), &[x])?,
            (UnOp::Exp2, Class::Float) => self.exp2_accurate(x.into_float_value())?.into(),
            (UnOp::Exp, Class::Float) => {
                // exp(x) = exp2(x * log2(e)) with the product rounded to f32 (the IR's definition).
                let l2e = f32t.const_float(std::f32::consts::LOG2_E as f64);
                let y = self.b.build_float_mul(x.into_float_value(), l2e, "")?;
                self.exp2_accurate(y)?.into()
            }
            (UnOp::Log2, Class::Float) => self.log2_accurate(x.into_float_value())?.into(),
            (op, cl) => return Err(self.unsupported(format!("unary {op:?} on {cl:?} values"))),
        })
    }

    fn binary(&self, op: BinOp, x: BasicValueEnum<'ctx>, y: BasicValueEnum<'ctx>, cl: Class) -> Result<BasicValueEnum<'ctx>, BackendError> {
        let b = &self.b;
        Ok(match cl {
            Class::Float => {
                let (x, y) = (x.into_float_value(), y.into_float_value());
                let f32t = self.ctx.f32_type();
                match op {
                    BinOp::Add => b.build_float_add(x, y, "")?.into(),
                    BinOp::Sub => b.build_float_sub(x, y, "")?.into(),
                    BinOp::Mul => b.build_float_mul(x, y, "")?.into(),
                    BinOp::Div => b.build_float_div(x, y, "")?.into(),
                    // [`BinOp::Rem`]'s sequence, spelled out rather than left to LLVM's
                    // lowering of `frem` (the interpreter follows it bit for bit).
                    BinOp::Rem => {
                        let q = b.build_float_div(x, y, "")?;
                        let t = self.call("llvm.trunc.f32", Some(f32t.into()), &[q.into()])?.into_float_value();
                        let nt = b.build_float_neg(t, "")?;
                        let r = self.call("llvm.fma.f32", Some(f32t.into()), &[nt.into(), y.into(), x.into()])?;
                        let ay = self.call("llvm.fabs.f32", Some(f32t.into()), &[y.into()])?.into_float_value();
                        let inf = b.build_float_compare(FloatPredicate::OEQ, ay, f32t.const_float(f64::INFINITY), "")?;
                        b.build_select(inf, x, r.into_float_value(), "")?
                    }
                    // IEEE 754-2019 minimum/maximum (NaN-propagating): min.NaN / max.NaN.f32.
                    BinOp::Min => self.call("llvm.minimum.f32", Some(f32t.into()), &[x.into(), y.into()])?,
                    BinOp::Max => self.call("llvm.maximum.f32", Some(f32t.into()), &[x.into(), y.into()])?,
                    // minNum/maxNum (NaN-ignoring): min.f32 / max.f32.
                    BinOp::FMin => self.call("llvm.minnum.f32", Some(f32t.into()), &[x.into(), y.into()])?,
                    BinOp::FMax => self.call("llvm.maxnum.f32", Some(f32t.into()), &[x.into(), y.into()])?,
                    BinOp::Cdiv | BinOp::And | BinOp::Or => return Err(self.unsupported(format!("{op:?} on floats"))),
                }
            }
            Class::Int => {
                let (x, y) = (x.into_int_value(), y.into_int_value());
                match op {
                    BinOp::Add => b.build_int_add(x, y, "")?.into(),
                    BinOp::Sub => b.build_int_sub(x, y, "")?.into(),
                    BinOp::Mul => b.build_int_mul(x, y, "")?.into(),
                    BinOp::Div => b.build_int_signed_div(x, y, "")?.into(),
                    BinOp::Rem => b.build_int_signed_rem(x, y, "")?.into(),
                    BinOp::Cdiv => {
                        // ceil(x / y) for any signs, as the interpreter: the truncated quotient,
                        // one up where the exact quotient is positive and inexact. No
                        // intermediate sum that could wrap ((x + y − 1) / y did near 2³¹, and
                        // rounded −4 / 2 to −1).
                        let q = b.build_int_signed_div(x, y, "")?;
                        let r = b.build_int_signed_rem(x, y, "")?;
                        let inexact = b.build_int_compare(IntPredicate::NE, r, self.i32(0), "")?;
                        let xp = b.build_int_compare(IntPredicate::SGT, x, self.i32(0), "")?;
                        let yp = b.build_int_compare(IntPredicate::SGT, y, self.i32(0), "")?;
                        let up = b.build_and(inexact, b.build_int_compare(IntPredicate::EQ, xp, yp, "")?, "")?;
                        b.build_int_add(q, b.build_int_z_extend(up, self.ctx.i32_type(), "")?, "cdiv")?.into()
                    }
                    BinOp::Min | BinOp::Max => {
                        let pred = if op == BinOp::Min { IntPredicate::SLT } else { IntPredicate::SGT };
                        let c = b.build_int_compare(pred, x, y, "")?;
                        b.build_select(c, x, y, "")?
                    }
                    BinOp::And => b.build_and(x, y, "")?.into(),
                    BinOp::Or => b.build_or(x, y, "")?.into(),
                    BinOp::FMin | BinOp::FMax => return Err(self.unsupported(format!("{op:?} on integers"))),
                }
            }
            Class::Bool => {
                let (x, y) = (x.into_int_value(), y.into_int_value());
                match op {
                    BinOp::And => b.build_and(x, y, "")?.into(),
                    BinOp::Or => b.build_or(x, y, "")?.into(),
                    _ => return Err(self.unsupported(format!("{op:?} on bool values"))),
                }
            }
        })
    }

    fn compare(&self, op: CmpOp, x: BasicValueEnum<'ctx>, y: BasicValueEnum<'ctx>, cl: Class) -> Result<IntValue<'ctx>, BackendError> {
        Ok(match cl {
            Class::Float => {
                let p = match op {
                    CmpOp::Eq => FloatPredicate::OEQ,
                    CmpOp::Ne => FloatPredicate::UNE,
                    CmpOp::Lt => FloatPredicate::OLT,
                    CmpOp::Le => FloatPredicate::OLE,
                    CmpOp::Gt => FloatPredicate::OGT,
                    CmpOp::Ge => FloatPredicate::OGE,
                };
                self.b.build_float_compare(p, x.into_float_value(), y.into_float_value(), "cmp")?
            }
            Class::Int | Class::Bool => {
                let p = match op {
                    CmpOp::Eq => IntPredicate::EQ,
                    CmpOp::Ne => IntPredicate::NE,
                    CmpOp::Lt => IntPredicate::SLT,
                    CmpOp::Le => IntPredicate::SLE,
                    CmpOp::Gt => IntPredicate::SGT,
                    CmpOp::Ge => IntPredicate::SGE,
                };
                let (x, y) = if cl == Class::Bool {
                    let i32t = self.ctx.i32_type();
                    (self.b.build_int_z_extend(x.into_int_value(), i32t, "")?, self.b.build_int_z_extend(y.into_int_value(), i32t, "")?)
                } else {
                    (x.into_int_value(), y.into_int_value())
                };
                self.b.build_int_compare(p, x, y, "cmp")?
            }
        })
    }
}
