//! The operator's wide twin: the same kernels and launches with every 16-bit float (bf16, f16)
//! — parameters, intermediate buffers, variables, values and `bf16(..)` conversions — made
//! f32, so that nothing is rounded to 16 bits anywhere. What is left are the f32 roundings of
//! the arithmetic itself, about 2¹⁶ times smaller than a bf16 storage rounding; a defect in the
//! mathematics (a wrong index, gate or sign) stays as large as it was and stands out by orders
//! of magnitude, where the bf16 build's value bound (`λ √R κu`, growing as √R over up to 84 bf16
//! roundings) can let an error of a few per cent through (docs/operators.md, "The wide twin").
//!
//! A semantic copy for the interpreter only: no back end builds it (tensor cores take no f32
//! operands), and the planners' decisions in it (TMEM columns, shared-memory offsets) are the
//! narrow build's, which the interpreter does not read.

use crate::ir::{Elem, Kernel, Module, Op, ParamKind, Type};

/// `e` with 16-bit floats made f32.
fn wide(e: Elem) -> Elem {
    match e {
        Elem::Bf16 | Elem::F16 => Elem::F32,
        e => e,
    }
}

fn wide_type(t: Type) -> Type {
    match t {
        Type::Scalar(e) => Type::Scalar(wide(e)),
        Type::Tile { elem, rows, cols } => Type::Tile { elem: wide(elem), rows, cols },
    }
}

fn widen_param(kind: &mut ParamKind) {
    match kind {
        ParamKind::Tensor { elem, .. } => *elem = wide(*elem),
        ParamKind::Scalar(e) => *e = wide(*e),
    }
}

fn widen_kernel(k: &mut Kernel) {
    for (_, p) in k.params.iter_mut() {
        widen_param(&mut p.kind);
    }
    for (_, v) in k.vars.iter_mut() {
        v.ty = wide_type(v.ty);
    }
    for (_, v) in k.values.iter_mut() {
        v.ty = wide_type(v.ty);
    }
    for (_, i) in k.insts.iter_mut() {
        if let Op::Cast(_, e) = &mut i.op {
            *e = wide(*e);
        }
    }
}

/// The wide twin of `module`: every kernel and operator with 16-bit floats made f32.
pub fn widened(module: &Module) -> Module {
    let mut m = module.clone();
    m.kernels.iter_mut().for_each(widen_kernel);
    for op in &mut m.operators {
        op.params.iter_mut().for_each(|p| widen_param(&mut p.kind));
        op.buffers.iter_mut().for_each(|b| b.elem = wide(b.elem));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_floats_become_f32_and_nothing_else_changes() {
        assert_eq!([wide(Elem::Bf16), wide(Elem::F16), wide(Elem::F32), wide(Elem::I32)], [Elem::F32, Elem::F32, Elem::F32, Elem::I32]);
        assert_eq!(wide_type(Type::Tile { elem: Elem::Bf16, rows: 64, cols: 32 }), Type::Tile { elem: Elem::F32, rows: 64, cols: 32 });
    }
}
