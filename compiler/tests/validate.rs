//! The IR validator catches broken IR: scope violations, type errors, MMA operand spaces,
//! TMEM lifecycle shape, and the warp-to-lane-quarter rule of tcgen05.ld/st.

use tilec::diag::Span;
use tilec::frontend::{check_source, Options};
use tilec::ir::builder::Builder;
use tilec::ir::validate::validate;
use tilec::ir::{Elem, Kernel, MmaOperand, Op, Space, Type};

fn errors(k: &Kernel) -> Vec<String> {
    validate(k).err().unwrap_or_default().into_iter().map(|e| e.message).collect()
}

fn checked_k1() -> Kernel {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/k1_reverse_scan.tile");
    let c = check_source(&std::fs::read_to_string(p).unwrap(), &Options::default());
    c.module.kernels.into_iter().next().unwrap()
}

#[test]
fn lowered_examples_are_valid() {
    assert_eq!(errors(&checked_k1()), Vec::<String>::new());
}

#[test]
fn use_outside_scope_is_caught() {
    let mut k = Kernel::new("k", Span::default());
    let mut b = Builder::new(&mut k);
    let lo = b.iconst(0);
    let hi = b.iconst(4);
    let (_, _, body) = b.for_loop(lo, hi, false);
    let top = b.block();
    b.switch_to(body);
    let inner = b.iconst(1);
    b.switch_to(top);
    b.value(Op::Binary(tilec::ir::BinOp::Add, inner, lo), Type::Scalar(Elem::I32));
    let e = errors(&k);
    assert!(e.iter().any(|m| m.contains("outside its scope")), "{e:?}");
}

#[test]
fn broadcast_and_mma_errors_are_caught() {
    let mut k = Kernel::new("k", Span::default());
    let mut b = Builder::new(&mut k);
    let z = b.fconst(0.0);
    let t1 = b.value(Op::Splat(z), Type::tile(Elem::F32, 64, 32));
    let t2 = b.value(Op::Splat(z), Type::tile(Elem::F32, 64, 16));
    b.value(Op::Binary(tilec::ir::BinOp::Add, t1, t2), Type::tile(Elem::F32, 64, 32));
    let d = b.var("d", Space::Tmem, Type::tile(Elem::F32, 128, 64), Span::default());
    let a = b.var("a", Space::Reg, Type::tile(Elem::Bf16, 128, 32), Span::default());
    let bb = b.var("b", Space::Smem, Type::tile(Elem::Bf16, 16, 64), Span::default());
    b.effect(Op::Mma { dst: d, a: MmaOperand { var: a, transposed: false }, b: MmaOperand { var: bb, transposed: false }, accumulate: false, negate: false });
    let e = errors(&k);
    assert!(e.iter().any(|m| m.contains("do not broadcast")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("do not chain")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("must be in shared or tensor memory")), "{e:?}");
}

#[test]
fn lifecycle_must_be_one_alloc_relinquish_dealloc() {
    let mut k = checked_k1();
    let extra = k.insts.push(tilec::ir::InstData { op: Op::TmemAlloc { columns: 64 }, result: None });
    let body = k.body;
    k.blocks[body].insts.insert(0, extra);
    let e = errors(&k);
    assert!(e.iter().any(|m| m.contains("2 alloc / 1 relinquish / 1 dealloc")), "{e:?}");
}

#[test]
fn lane_quarter_rule_needs_whole_warpgroups() {
    let mut k = checked_k1();
    k.threads = 96;
    let e = errors(&k);
    assert!(e.iter().any(|m| m.contains("whole warpgroups")), "{e:?}");
    // The assignment the back end emits (layout::tmem::lane_base): warp w owns 32*(w%4)..+32.
    let bases: Vec<u32> = (0..8).map(|w| tilec::layout::eval(tilec::layout::tmem::lane_base(&tilec::layout::Eval, w))).collect();
    assert_eq!(bases, [0, 32, 64, 96, 0, 32, 64, 96]);
}
