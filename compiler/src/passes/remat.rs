//! Index tiles recomputed at each gather instead of shared: a gather's row or column index that
//! is built only from `row_index`/`col_index`, triangular masks, scalars (any scalar value:
//! constants, loop counters, sizes, program ids, parameters, scalar loads — each is computed once
//! and read where it is) and cheap integer or predicate operations gets a private copy of that
//! expression, placed right before the gather, whenever some node of the expression has another
//! use.
//!
//! Why: elementwise fusion ([`super::fuse`]) evaluates a value inside its consumer only when it
//! has one use; a `let` index bound once and read by several gathers (the paired distance loops
//! of gdn_channel.tile's scores_channel and kda_wy.tile's kkt_channel: the row a step computes
//! and its partner's key row) was therefore written to a shared-memory buffer and read back per
//! element — 47 instead of 37 SASS instructions per element (docs/results.md, thirty-second
//! session), so those kernels wrote their indices inline, four times per step. A copy per
//! gather is a few integer instructions per element, which LLVM hoists out of the column loop
//! with the gather's own index arithmetic.
//!
//! Exactness: the copies compute the same integers and predicates, so results are bitwise
//! unchanged; the interpreter runs the same IR. The originals that nothing else reads are
//! removed by dead-code elimination ([`super::dce`], run next) — so, as for any unused code, an
//! index computed before a loop and read only by the loop's gathers is evaluated in the loop: a
//! loop that runs zero times no longer reports that index's i32 overflow (a value no gather
//! reads; the GPU never checked it).

use cranelift_entity::SecondaryMap;

use crate::ir::builder::Builder;
use crate::ir::{BinOp, Block, Elem, Inst, Kernel, Op, UnOp, Value, ValueDef};

/// Largest expression (nodes, counted as a tree) copied per gather operand: the paired loops'
/// indices have up to 17; a larger one keeps its buffer rather than grow every gather's code.
pub const MAX_NODES: usize = 32;

/// Gives each gather of `k` private copies of its shared index expressions (see the module
/// docs); returns how many operands were copied.
pub fn run(k: &mut Kernel) -> usize {
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    let mut gathers: Vec<(Block, Inst)> = vec![];
    fn index(k: &Kernel, b: Block, uses: &mut SecondaryMap<Value, u32>, gathers: &mut Vec<(Block, Inst)>) {
        for &i in &k.blocks[b].insts {
            for a in k.inst_args(i) {
                uses[a] += 1;
            }
            match k.insts[i].op {
                Op::Gather { .. } => gathers.push((b, i)),
                Op::For { body, .. } => index(k, body, uses, gathers),
                _ => {}
            }
        }
    }
    index(k, k.body, &mut uses, &mut gathers);
    let mut copied = 0;
    for (b, g) in gathers {
        let Op::Gather { row, col, .. } = k.insts[g].op else { continue };
        let mut new = [row, col];
        for x in new.iter_mut() {
            let Some(nodes) = tree_size(k, *x) else { continue };
            if nodes > MAX_NODES || !shared(k, &uses, *x) {
                continue;
            }
            // (The gather is in block `b`: `index` found it there, and copies only go before it.)
            let Some(at) = k.blocks[b].insts.iter().position(|&i| i == g) else { continue };
            let mut bld = Builder::new(k);
            bld.insert_at(b, at);
            *x = copy(&mut bld, *x);
            copied += 1;
        }
        if let Op::Gather { row, col, .. } = &mut k.insts[g].op {
            (*row, *col) = (new[0], new[1]);
        }
    }
    copied
}

/// The operands of an index-expression node, or `None` when `v` is no such node: a tile of i32
/// or predicates made by an iota, a mask, a splat, or a cheap integer/predicate operation (no
/// division or remainder by anything but a constant, no float operand).
fn node_args(k: &Kernel, v: Value) -> Option<Vec<Value>> {
    let ty = k.values[v].ty;
    ty.shape()?;
    if !matches!(ty.elem(), Elem::I32 | Elem::Bool) {
        return None;
    }
    let ValueDef::Result(d) = k.values[v].def else { return None };
    let int_or_pred = |a: &Value| matches!(k.values[*a].ty.elem(), Elem::I32 | Elem::Bool);
    let args = match k.insts[d].op {
        Op::Iota(_) | Op::Mask(_) => vec![],
        Op::Splat(s) => vec![s],
        Op::Unary(UnOp::Neg | UnOp::Abs | UnOp::Not, a) => vec![a],
        Op::Binary(BinOp::Div | BinOp::Rem | BinOp::Cdiv, a, b) => {
            super::pipeline::const_int(k, b)?;
            vec![a, b]
        }
        Op::Binary(_, a, b) | Op::Cmp(_, a, b) => vec![a, b],
        Op::Select(c, a, b) => vec![c, a, b],
        _ => return None,
    };
    args.iter().all(int_or_pred).then_some(args)
}

/// The number of tile nodes of the index expression `v` counted as a tree (a shared node once
/// per path), or `None` when `v` is not an index expression; scalars are leaves and not counted.
fn tree_size(k: &Kernel, v: Value) -> Option<usize> {
    if k.values[v].ty.shape().is_none() {
        return Some(0);
    }
    let mut n = 1;
    for a in node_args(k, v)? {
        n += tree_size(k, a)?;
        if n > MAX_NODES {
            return Some(n);
        }
    }
    Some(n)
}

/// Whether some tile node of the index expression `v` has more than one use.
fn shared(k: &Kernel, uses: &SecondaryMap<Value, u32>, v: Value) -> bool {
    k.values[v].ty.shape().is_some() && (uses[v] > 1 || node_args(k, v).unwrap_or_default().into_iter().any(|a| shared(k, uses, a)))
}

/// A copy of the index expression `v` made by `b` (inserting before the gather): tile nodes
/// are new instructions with the spans of the ones they copy, scalars are read where they are.
fn copy(b: &mut Builder<'_>, v: Value) -> Value {
    let k = &*b.kernel;
    let ValueDef::Result(d) = k.values[v].def else { return v };
    if k.values[v].ty.shape().is_none() {
        return v;
    }
    let (ty, op, span) = (k.values[v].ty, k.insts[d].op.clone(), k.inst_spans[d]);
    let args: Vec<Value> = node_args(k, v).unwrap_or_default().into_iter().map(|a| copy(b, a)).collect();
    let op = match (op, args.as_slice()) {
        (Op::Splat(_), [s]) => Op::Splat(*s),
        (Op::Unary(u, _), [a]) => Op::Unary(u, *a),
        (Op::Binary(o, _, _), [a, c]) => Op::Binary(o, *a, *c),
        (Op::Cmp(o, _, _), [a, c]) => Op::Cmp(o, *a, *c),
        (Op::Select(..), [c, a, e]) => Op::Select(*c, *a, *e),
        (op, _) => op, // Iota, Mask: no operands
    };
    b.set_span(span);
    b.value(op, ty)
}
