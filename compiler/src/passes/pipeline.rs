//! Software pipelining of matrix-product loops (issue 9, item 4), derived by the compiler: in a
//! `for` loop, the global tiles loaded into operand tiles ([`super::var_roles::VarRoles::tiled`])
//! whose addresses depend only on the induction variable and loop-invariant values are issued
//! `S − 1` iterations ahead into an `S`-stage ring of shared-memory buffers, so the copies of
//! later iterations are in flight while this iteration's MMAs run.
//!
//! A loop is pipelined (counting up, or down: then "ahead" means toward the lower bound) when
//! its body (at top level) writes, exactly once
//! each, one or more operand tiles `v` with a `Load` fused into the write (`WriteVar(v, load
//! t[...])`, same element type, a shape `cp.async` can copy: [`async_copyable`]), every access
//! of `v` is in that body at top level with the write first, and the load's index values are
//! loop-invariant, the induction variable, or pure scalar arithmetic of those computed in the
//! body ([`Pipeline::slice`], re-evaluated by the code generator for a later iteration). The
//! stage count `S` (3, else 2) is the largest whose ring fits the shared-memory budget
//! ([`super::target_plan::run`]); the plan charges every stage.
//!
//! Code (`backend::pipeline`), with `D` the distance ([`Pipeline::distance`]): before the loop,
//! iterations `lo .. lo+D` are issued, one `cp.async` group each; at the first pipelined write of
//! iteration `i`, iteration `i + D` is issued into stage `(i − lo + D) mod S`, then
//! `cp.async.wait_group D` (iteration `i`'s group is complete), `fence.proxy.async` and a
//! barrier; the MMAs read stage `(i − lo) mod S`. With `D = S − 1` the stage a new copy
//! overwrites was last read by the previous iteration's MMAs, which have completed
//! (`wgmma.wait_group 0` and a barrier end every MMA). With an MMA left in flight
//! ([`Pipeline::overlap_mma`], `D = S − 2`), it was read two iterations back, and
//! `wgmma.wait_group 1` and a barrier at the end of the previous iteration's MMA mean that
//! one has completed, while the previous iteration's MMA, still running, reads another stage.

use cranelift_entity::SecondaryMap;

use crate::ir::{BinOp, Block, Index, Inst, Kernel, Op, Param, ParamKind, Space, Value, ValueDef, Var};
use super::fuse::Fusion;
use super::var_roles::VarRoles;

/// Deepest ring tried.
pub const MAX_STAGES: u32 = 4;

/// One pipelined loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    /// The pipelined writes (`WriteVar` of a fused `Load`), in body order.
    pub writes: Vec<Inst>,
    /// Their variables.
    pub vars: Vec<Var>,
    /// Scalar instructions of the body the loads' indices depend on, in body order.
    pub slice: Vec<Inst>,
    /// Ring depth (≥ 1 once chosen; [`candidates`] leaves 0).
    pub stages: u32,
    /// Whether every MMA of the body that reads a pipelined tile reads only pipelined tiles
    /// into a register accumulator: such an MMA may stay in flight into the next iteration
    /// (`wgmma.wait_group 1`), so tiles are issued `S − 2` iterations ahead instead of `S − 1`
    /// and a stage is not overwritten while the MMA in flight reads it. Needs `S ≥ 3`.
    pub overlap_mma: bool,
    /// Whether the loop counts down (`for n in rev lo..hi`): "ahead" is then toward `lo`.
    pub reverse: bool,
    /// Per write: the top-level body instruction after which its variable is no longer read in
    /// the iteration (where a fused read is evaluated, for fused reads). A one-stage TMA ring
    /// refills there for the next iteration ([`crate::backend`]'s early refill).
    pub last_read: Vec<Inst>,
    /// The trip count when both bounds are compile-time constants (a loop over `V / BVB`
    /// blocks with V fixed at build time): no ring needs more stages than it has iterations
    /// to issue ahead ([`Pipeline::useful_stages`]).
    pub trips: Option<u32>,
}

impl Pipeline {
    /// How many iterations ahead tiles are issued: `S − 2` with an MMA in flight, else `S − 1`.
    pub fn distance(&self) -> u32 {
        if self.overlap_mma {
            self.stages - 2
        } else {
            self.stages - 1
        }
    }

    /// The smallest ring this pipeline works with: one stage without an MMA in flight (the
    /// tiles are then issued at the iteration's first write and waited for at once, still one
    /// TMA copy or one cp.async group each).
    pub fn min_stages(&self) -> u32 {
        if self.overlap_mma {
            3
        } else {
            1
        }
    }

    /// The deepest ring that can be filled: a distance of `trips − 1` already issues every
    /// iteration before the loop, so stages past `trips` (one more with an MMA in flight)
    /// would only hold shared memory. Never below [`Pipeline::min_stages`].
    pub fn useful_stages(&self) -> u32 {
        match self.trips {
            Some(n) => (n + u32::from(self.overlap_mma)).max(self.min_stages()),
            None => MAX_STAGES,
        }
    }
}

/// The value of a scalar integer computed from constants only (`const`, `+ - * / %`, `cdiv`,
/// `min`, `max`), in the project's one integer arithmetic ([`tilec_abi::expr::apply`], the
/// runtime's and the interpreter's too; `cdiv` as the kernel computes it, [`crate::ir::int_cdiv`]);
/// `None` on overflow or division by zero.
pub(crate) fn const_int(k: &Kernel, v: Value) -> Option<i64> {
    use tilec_abi::expr::Op as SizeOp;
    let ValueDef::Result(i) = k.values[v].def else { return None };
    match k.insts[i].op {
        Op::ConstInt(c) => Some(c),
        Op::Binary(BinOp::Cdiv, a, b) => {
            let (x, y) = (const_int(k, a)?, const_int(k, b)?);
            (y != 0).then(|| crate::ir::int_cdiv(x, y))
        }
        Op::Binary(op, a, b) => {
            let op = match op {
                BinOp::Add => SizeOp::Add,
                BinOp::Sub => SizeOp::Sub,
                BinOp::Mul => SizeOp::Mul,
                BinOp::Div => SizeOp::Div,
                BinOp::Rem => SizeOp::Rem,
                BinOp::Min => SizeOp::Min,
                BinOp::Max => SizeOp::Max,
                _ => return None,
            };
            tilec_abi::expr::apply(op, const_int(k, a)?, const_int(k, b)?).ok()
        }
        _ => None,
    }
}

/// Whether `cp.async` can copy the `rows x cols` tile `src[index]` into a tile of `elem` (the
/// backend's `copy_tile_async` takes exactly these): by 16-byte chunks
/// ([`chunk_copyable`]) or one element per copy ([`element_copyable`]).
pub fn async_copyable(k: &Kernel, src: Param, index: &[Index], shape: (u32, u32), elem: crate::ir::Elem) -> bool {
    chunk_copyable(k, src, index, shape, elem) || element_copyable(k, src, index, elem)
}

/// 16-byte `cp.async.cg` chunks: the tensor's element type is `elem` (4 or 2 bytes), two ranged
/// indices with the columns on the last, contiguous dimension, and a row of whole 16-byte
/// chunks. Alignment is checked at run time.
pub fn chunk_copyable(k: &Kernel, src: Param, index: &[Index], (_rows, cols): (u32, u32), elem: crate::ir::Elem) -> bool {
    let ParamKind::Tensor { elem: te, .. } = &k.params[src].kind else { return false };
    let size = te.size_bytes();
    let ranges: Vec<usize> = index.iter().enumerate().filter(|(_, ix)| matches!(ix, Index::Range { .. })).map(|(d, _)| d).collect();
    *te == elem && matches!(size, 2 | 4) && ranges.len() == 2 && ranges[1] + 1 == index.len() && (cols * size) % 16 == 0
}

/// One 4-byte `cp.async.ca` per element (the smallest copy `cp.async` makes, PTX ISA
/// "cp.async": cp-size 4, 8 or 16): a tile of 4-byte elements (f32, i32) of the tensor's type,
/// whatever its indices — a per-row vector gathered down a strided dimension (`g[b, t0..+C, h]`,
/// a row stride of H elements) has no 16-byte chunk, and TMA cannot take a box 4 bytes wide.
pub fn element_copyable(k: &Kernel, src: Param, index: &[Index], elem: crate::ir::Elem) -> bool {
    let ParamKind::Tensor { elem: te, .. } = &k.params[src].kind else { return false };
    *te == elem && te.size_bytes() == 4 && index.iter().any(|ix| matches!(ix, Index::Range { .. }))
}

/// The loops that can be pipelined, keyed by their `For` instruction, with `stages` still 0.
pub fn candidates(k: &Kernel, roles: &VarRoles, fusion: &Fusion) -> SecondaryMap<Inst, Option<Pipeline>> {
    let mut out = SecondaryMap::new();
    k.walk(|i| {
        if let Op::For { lo, hi, reverse, body } = k.insts[i].op {
            let trips = const_int(k, lo).zip(const_int(k, hi)).and_then(|(lo, hi)| u32::try_from(hi.checked_sub(lo)?.max(0)).ok());
            out[i] = loop_pipeline(k, roles, fusion, i, body).map(|p| Pipeline { reverse, trips, ..p });
        }
    });
    out
}

fn loop_pipeline(k: &Kernel, roles: &VarRoles, fusion: &Fusion, for_inst: Inst, body: Block) -> Option<Pipeline> {
    let top = &k.blocks[body].insts;
    let mut inside = std::collections::HashSet::new();
    collect(k, body, &mut inside);
    let mut p = Pipeline { writes: vec![], vars: vec![], slice: vec![], stages: 0, overlap_mma: false, reverse: false, last_read: vec![], trips: None };
    for (pos, &i) in top.iter().enumerate() {
        let (Op::WriteVar(_, x), Some((v, src, index))) = (&k.insts[i].op, k.written_load(i)) else { continue };
        // An operand tile, or a plain shared-memory tile read only element by element.
        let plain = k.vars[v].space == Space::Smem && roles.accumulator(v).is_none() && read_only_by_reads(k, v);
        if !(roles.is_tiled(v) || plain) || !fusion.is_fused(*x) || p.vars.contains(&v) {
            continue;
        }
        let Some(shape) = k.vars[v].ty.shape() else { continue };
        if !async_copyable(k, src, index, shape, k.vars[v].ty.elem()) {
            continue;
        }
        // Every access of v: in this body at top level, this write first and the only write.
        let mut ok = true;
        k.walk(|j| {
            let (r, w) = k.inst_vars(j);
            if !(r.contains(&v) || w.contains(&v)) {
                return;
            }
            let at = top.iter().position(|&t| t == j);
            ok &= match at {
                Some(q) => q == pos || (q > pos && !w.contains(&v)),
                None => false,
            };
        });
        let mut slice = vec![];
        for ix in index {
            let (Index::Point(s) | Index::Range { start: s, .. }) = ix;
            ok &= index_slice(k, for_inst, &inside, *s, &mut slice);
        }
        if ok {
            // The last top-level instruction evaluating a read of v.
            let mut last = i;
            for &j in &top[pos + 1..] {
                if k.inst_vars(j).0.contains(&v) {
                    let e = fusion.evaluated_at(j);
                    if top.iter().position(|&t| t == e) > top.iter().position(|&t| t == last) {
                        last = e;
                    }
                }
            }
            p.last_read.push(last);
            p.writes.push(i);
            p.vars.push(v);
            for s in slice {
                if !p.slice.contains(&s) {
                    p.slice.push(s);
                }
            }
        }
    }
    p.slice.sort_by_key(|s| top.iter().position(|t| t == s));
    let mmas: Vec<(Var, Var, Var)> = top.iter().filter_map(|&i| match k.insts[i].op {
        Op::Mma { dst, a, b, .. } if p.vars.contains(&a.var) || p.vars.contains(&b.var) => Some((dst, a.var, b.var)),
        _ => None,
    }).collect();
    // (No MMA reads a ring: nothing to leave in flight.)
    p.overlap_mma = !mmas.is_empty() && mmas.iter().all(|&(dst, a, b)| p.vars.contains(&a) && p.vars.contains(&b) && roles.accumulator(dst).is_some());
    (!p.writes.is_empty()).then_some(p)
}

/// Whether every read of `v` is a `ReadVar` (no MMA reads it from its buffer).
fn read_only_by_reads(k: &Kernel, v: Var) -> bool {
    let mut ok = true;
    k.walk(|j| {
        if k.inst_vars(j).0.contains(&v) && !matches!(k.insts[j].op, Op::ReadVar(_)) {
            ok = false;
        }
    });
    ok
}

/// Every instruction of `b` and its nested blocks.
fn collect(k: &Kernel, b: Block, out: &mut std::collections::HashSet<Inst>) {
    for &i in &k.blocks[b].insts {
        out.insert(i);
        if let Op::For { body, .. } = k.insts[i].op {
            collect(k, body, out);
        }
    }
}

/// Whether scalar `v` can be evaluated for another iteration of loop `for_inst`: defined
/// outside the loop, the induction variable, or pure scalar arithmetic of such values; the body
/// instructions it needs are added to `slice`. A worklist with a visited set: shared
/// subexpressions are looked at once, and a long chain of them cannot exhaust the stack.
fn index_slice(k: &Kernel, for_inst: Inst, inside: &std::collections::HashSet<Inst>, v: Value, slice: &mut Vec<Inst>) -> bool {
    let mut seen: std::collections::HashSet<Value> = std::collections::HashSet::new();
    let mut work = vec![v];
    while let Some(v) = work.pop() {
        if !seen.insert(v) {
            continue;
        }
        match k.values[v].def {
            ValueDef::LoopIndex(l) => {
                if l != for_inst && inside.contains(&l) {
                    return false;
                }
            }
            ValueDef::Result(d) if !inside.contains(&d) => {}
            ValueDef::Result(d) => {
                let pure = k.values[v].ty.shape().is_none()
                    && matches!(k.insts[d].op, Op::ConstInt(_) | Op::Size(_) | Op::ProgramId(_) | Op::ScalarParam(_) | Op::Binary(..) | Op::Unary(..) | Op::Cmp(..) | Op::Cast(..) | Op::Select(..));
                if !pure {
                    return false;
                }
                if !slice.contains(&d) {
                    slice.push(d);
                }
                work.extend(k.inst_args(d));
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::const_int;
    use crate::ir::{int_cdiv, BinOp, Op};

    #[test]
    fn the_folded_cdiv_is_the_kernels() {
        // The folder gives what the interpreter and the GPU compute (`ir::int_cdiv`, ⌈x / y⌉),
        // not the size expressions' (x + y − 1) / y, which differs for a negative dividend
        // (cdiv(−4, 2): −2, not −1); and nothing for a zero divisor.
        for (x, y, want) in [(-4, 2, Some(-2)), (-5, 2, Some(-2)), (5, -2, Some(-2)), (-5, -2, Some(3)), (100, 32, Some(4)), (3, 0, None)] {
            // Negative operands as `0 − n` (a constant difference the folder takes).
            let int = |v: i64| if v < 0 { format!("(0 - {})", -v) } else { v.to_string() };
            let src = format!("kernel t(o: out i32[1]) grid(1) threads(32) {{ store o[0..+1] = cdiv({}, {}); }}", int(x), int(y));
            let c = crate::frontend::check_source(&src, &crate::frontend::Options::default());
            assert!(c.ok(), "{src}: {:?}", c.diags);
            let k = &c.kernels().next().expect("a kernel").kernel;
            let (_, cd) = k.insts.iter().find(|(_, d)| matches!(d.op, Op::Binary(BinOp::Cdiv, ..))).expect("a cdiv");
            assert_eq!(const_int(k, cd.result.expect("a value")), want, "cdiv({x}, {y})");
            if let Some(w) = want {
                assert_eq!(int_cdiv(x, y), w);
            }
        }
    }
}
