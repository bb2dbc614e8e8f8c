//! Index tiles recomputed where they are read instead of shared: an index tile built only from
//! `row_index`/`col_index`, triangular masks, scalars (any scalar value: constants, loop
//! counters, sizes, program ids, parameters, scalar loads — each is computed once and read where
//! it is) and cheap integer or predicate operations gets a private copy of its expression,
//! placed right before the instruction that reads it, in two cases:
//!
//! 1. **Read in a loop, made outside it**: an operand of a unary, binary, compare or select
//!    operation (or a gather's row or column index) in a loop body whose value is made in
//!    another block. (A cast or transpose of such a tile still reads its buffer.)
//! 2. **Shared by gathers**: a gather's row or column index some node of which has another use.
//!
//! Why: elementwise fusion ([`super::fuse`]) evaluates a value inside its consumer only when it
//! has one use in the consumer's block; anything else is written to a shared-memory buffer and
//! read back per element. For a gather's index that was 47 instead of 37 SASS instructions per
//! element (the paired distance loops of gdn_channel.tile's scores_channel and kda_wy.tile's
//! kkt_channel, docs/results.md, thirty-second session); in the key-row loops of dqkwg_channel
//! and k2_keys_channel a row's place in its block, its block's first row and the valid-row
//! predicate, all made before the loop, were 10 shared loads of each step's 30 (218 → 200
//! SASS instructions a step, docs/results.md, thirty-fourth session). A copy is a few integer
//! instructions per element, which LLVM hoists out of the column loop with the consumer's own
//! index arithmetic.
//!
//! Exactness: the copies compute the same integers and predicates, so results are bitwise
//! unchanged; the interpreter runs the same IR. The originals that nothing else reads are
//! removed by dead-code elimination ([`super::dce`], run next) — so, as for any unused code, an
//! index computed before a loop and read only in the loop is evaluated in the loop: a
//! loop that runs zero times no longer reports that index's i32 overflow (a value no gather
//! reads in that case; the GPU never checked it).

use cranelift_entity::SecondaryMap;

use crate::ir::builder::Builder;
use crate::ir::{BinOp, Block, Elem, Inst, Kernel, Op, UnOp, Value, ValueDef};

/// Largest expression (nodes, counted as a tree) copied per operand: the paired loops'
/// indices have up to 17; a larger one keeps its buffer rather than grow every gather's code.
pub const MAX_NODES: usize = 32;

/// Gives each gather of `k` private copies of its shared index expressions, and each
/// elementwise instruction in a loop body copies of the index expressions it reads from outside
/// the loop (see the module docs); returns how many operands were copied.
pub fn run(k: &mut Kernel) -> usize {
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    let mut def_block: SecondaryMap<Value, Option<Block>> = SecondaryMap::new();
    let mut gathers: Vec<(Block, Inst)> = vec![];
    let mut in_loops: Vec<(Block, Inst)> = vec![];
    struct Walk<'a> {
        uses: &'a mut SecondaryMap<Value, u32>,
        def_block: &'a mut SecondaryMap<Value, Option<Block>>,
        gathers: &'a mut Vec<(Block, Inst)>,
        in_loops: &'a mut Vec<(Block, Inst)>,
    }
    fn index(k: &Kernel, b: Block, in_loop: bool, w: &mut Walk<'_>) {
        for &i in &k.blocks[b].insts {
            for a in k.inst_args(i) {
                w.uses[a] += 1;
            }
            if let Some(r) = k.insts[i].result {
                w.def_block[r] = Some(b);
            }
            match k.insts[i].op {
                Op::For { body, .. } => index(k, body, true, w),
                Op::Gather { .. } | Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) if in_loop => w.in_loops.push((b, i)),
                Op::Gather { .. } => w.gathers.push((b, i)),
                _ => {}
            }
        }
    }
    index(k, k.body, false, &mut Walk { uses: &mut uses, def_block: &mut def_block, gathers: &mut gathers, in_loops: &mut in_loops });
    let mut copied = 0;
    // Index tiles read in a loop body and made outside it: fusion evaluates a value inside its
    // consumer only in the consumer's block, so each would be read back from its buffer at
    // every element of every iteration (dqkwg_channel's key-row loop: a row's place in its
    // block, its block's first row and the valid-row predicate, 10 shared loads a step).
    for (b, i) in in_loops {
        let mut args = index_operands(k, i);
        let before = args.clone();
        for x in args.iter_mut() {
            if def_block[*x].is_some_and(|d| d != b) && copy_before(k, b, i, x) {
                copied += 1;
            }
        }
        if args != before {
            set_index_operands(&mut k.insts[i].op, &args);
        } else if matches!(k.insts[i].op, Op::Gather { .. }) {
            gathers.push((b, i));
        }
    }
    // Shared index tiles read by gathers (in the gather's block).
    for (b, g) in gathers {
        let mut args = index_operands(k, g);
        for x in args.iter_mut() {
            if shared(k, &uses, *x) && copy_before(k, b, g, x) {
                copied += 1;
            }
        }
        set_index_operands(&mut k.insts[g].op, &args);
    }
    copied
}

/// The operands of `i` that may be index expressions: a gather's row and column indices, every
/// operand of an elementwise operation.
fn index_operands(k: &Kernel, i: Inst) -> Vec<Value> {
    match k.insts[i].op {
        Op::Gather { row, col, .. } => vec![row, col],
        _ => k.inst_args(i),
    }
}

/// Puts `args` back as the operands [`index_operands`] gave.
fn set_index_operands(op: &mut Op, args: &[Value]) {
    match (op, args) {
        (Op::Gather { row, col, .. }, [r, c]) => (*row, *col) = (*r, *c),
        (Op::Unary(_, a), [x]) => *a = *x,
        (Op::Binary(_, a, b) | Op::Cmp(_, a, b), [x, y]) => (*a, *b) = (*x, *y),
        (Op::Select(c, a, b), [x, y, z]) => (*c, *a, *b) = (*x, *y, *z),
        _ => {}
    }
}

/// Replaces `*x`, an operand of instruction `at` in block `b`, by a copy of its index
/// expression inserted right before `at`, when it is one of at most [`MAX_NODES`] nodes;
/// returns whether it did.
fn copy_before(k: &mut Kernel, b: Block, at: Inst, x: &mut Value) -> bool {
    match tree_size(k, *x) {
        Some(nodes) if nodes > 0 && nodes <= MAX_NODES => {}
        _ => return false,
    }
    // (`at` is in block `b`: the walk found it there, and copies only go before it.)
    let Some(pos) = k.blocks[b].insts.iter().position(|&i| i == at) else { return false };
    let mut bld = Builder::new(k);
    bld.insert_at(b, pos);
    *x = copy(&mut bld, *x);
    true
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
