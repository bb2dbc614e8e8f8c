//! Matrix products with an all-zero operand, folded: `acc += a @ b` is removed and `acc = a @ b`
//! becomes `acc = 0` when every write of `a` (or `b`) stores a tile of zeros.
//!
//! Why: an instance that declares an input all zeros (`kernel k1_w0 = k1_scan_scalar(w: zeros);`,
//! docs/language.md "Kernel instances") turns `let ws: smem = load w[...]` into a zero tile, but
//! the product `d -= ws.T @ dvb` would still run — a wgmma in the reverse scan's sequential
//! loop for the members whose W is 0 (SSD, LA, GLA). Folded, dead-code elimination
//! ([`super::dce`], run next) removes the operand's copy and conversion too.
//!
//! Exactness: each product of a zero is ±0 and their f32 sum is ±0, so `acc ± that` equals `acc`
//! except that the hardware could turn an accumulator's −0.0 into +0.0; the folded kernel keeps
//! the −0.0. The interpreter runs the same folded IR, so the GPU and the interpreter still agree
//! bit for bit.

use cranelift_entity::SecondaryMap;

use crate::ir::builder::Builder;
use crate::ir::{Kernel, Op, Value, ValueDef, Var};

/// Folds `k`'s products with an all-zero operand; returns how many.
pub fn run(k: &mut Kernel) -> usize {
    // Per variable: (written at all, every write a zero tile).
    let mut zero: SecondaryMap<Var, (bool, bool)> = SecondaryMap::new();
    let mut order = vec![];
    k.walk(|i| order.push(i));
    for &i in &order {
        match &k.insts[i].op {
            Op::WriteVar(v, x) => {
                let z = is_zero(k, *x);
                let e = &mut zero[*v];
                *e = (true, if e.0 { e.1 && z } else { z });
            }
            Op::Mma { dst, .. } => zero[*dst] = (true, false),
            _ => {}
        }
    }
    let all_zero = |v: Var| zero[v] == (true, true);
    let mut folded = 0;
    for &i in &order {
        let Op::Mma { dst, a, b, accumulate, .. } = k.insts[i].op else { continue };
        if !(all_zero(a.var) || all_zero(b.var)) {
            continue;
        }
        let Some((blk, at)) = k.blocks.iter().find_map(|(blk, d)| d.insts.iter().position(|&x| x == i).map(|at| (blk, at))) else { continue };
        folded += 1;
        if accumulate {
            // acc ± 0: unchanged.
            k.blocks[blk].insts.remove(at);
            k.insts[i].op = Op::ConstInt(0); // inert, as dead-code elimination leaves what it removes
            continue;
        }
        // acc = 0 · b: a tile of zeros of the accumulator's type, written where the product was.
        let ty = k.vars[dst].ty;
        let mut b = Builder::new(k);
        b.insert_at(blk, at);
        b.set_span(b.kernel.inst_spans[i]);
        let z = b.fconst(0.0);
        let zeros = b.value(Op::Splat(z), ty);
        k.insts[i].op = Op::WriteVar(dst, zeros);
    }
    folded
}

/// Whether `x` is a tile (or scalar) of zeros: a splat of a constant 0, through casts.
fn is_zero(k: &Kernel, x: Value) -> bool {
    let ValueDef::Result(d) = k.values[x].def else { return false };
    match &k.insts[d].op {
        Op::ConstFloat(c) => *c == 0.0,
        Op::ConstInt(c) => *c == 0,
        Op::Splat(s) | Op::Cast(s, _) => is_zero(k, *s),
        _ => false,
    }
}
