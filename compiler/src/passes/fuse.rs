//! Elementwise fusion: which tile values are computed on the fly inside their single consumer's
//! element loop instead of being materialised in a shared-memory buffer.
//!
//! A value is fused when
//! * it is produced by a pure per-element operation (unary, binary, comparison, select, cast,
//!   splat, iota, mask, transpose), a global `Load`, or a `ReadVar` of a shared-memory variable;
//! * it has exactly one use, in the same block, by a consumer that reads tiles element by element
//!   (the operations above, `Store`, `WriteVar`, `Reduce`), and the consumer does not broadcast it
//!   (a broadcast operand would be recomputed for every column or row), and is not a column sum
//!   that would compute costly terms on at most half the CTA's threads ([`starves_threads`]) —
//!   or, for a `ReadVar` of a shared-memory variable, a view of it (`Slice`: it reads the few
//!   elements it takes in place);
//! * for a `Load`: no `Store` to the same tensor, and for a `ReadVar`: no write of the variable,
//!   happens between the definition and the point where the fused expression is evaluated (the
//!   final non-fused consumer) — that consumer included, unless it writes the variable itself
//!   from an expression elementwise at the tile's shape (an update in place: every element is
//!   read and written back by one thread at one address).
//!
//! Fusion only moves where pure element computations happen, so results are bit-identical; it
//! shrinks the shared-memory plan and removes a barrier per fused value.

use cranelift_entity::SecondaryMap;

use crate::ir::{Axis, Block, Inst, Kernel, Op, Value, ValueDef};

use crate::target::TargetInfo;

/// Most fragment registers per thread of an accumulator evaluated in fragment order by a root
/// that writes element for element: the evaluation is straight-line code per register, and at
/// 64 (K#2's 64 x 128 accumulators on one warpgroup) ptxas ran out of registers (255 and
/// 124 B of spills, against 170 without).
pub const MAX_FRAGMENT_ROOT_FLOATS: u32 = 32;

/// The same for a row reduction, which keeps only its partials (8 per row) live, and for an
/// update of an accumulator in place (each element written back as it is computed): K#2's row
/// sums over and updates of its 64 x 128 accumulators fit, with their write-backs gone.
pub const MAX_FRAGMENT_REDUCE_FLOATS: u32 = 64;

/// Fusion decisions: `fused[v]` is true when `v` has no buffer and is evaluated in its consumer.
#[derive(Clone, Debug, Default)]
pub struct Fusion {
    /// Per value.
    pub fused: SecondaryMap<Value, bool>,
    /// Roots evaluated in the fragment order of a register accumulator: a `Store`, a `WriteVar`
    /// or a row `Reduce` whose fused expression reads the accumulator (`ReadVar` fused at full
    /// shape, no transpose on the way), so each thread evaluates exactly the elements whose
    /// accumulator values it holds, in registers (issue 9, item 1); and any other whole-tile
    /// `WriteVar` (not a scalar fill) into a register accumulator, in that accumulator's order.
    pub frag_root: SecondaryMap<Inst, Option<crate::ir::Var>>,
    /// Other accumulators a fragment-order root reads in the same registers: those with the
    /// root's accumulator's distribution, which hold each element in the same thread at the
    /// same register index (`store dq = dqi + dqa`).
    pub frag_also: SecondaryMap<Inst, Vec<crate::ir::Var>>,
    /// For an instruction whose result is fused: the instruction of its block that evaluates it
    /// (its consumer, or that consumer's own evaluator, transitively).
    pub eval_at: SecondaryMap<Inst, Option<Inst>>,
    /// `WriteVar(w, x)` roots that update shared-memory variable `w` element for element in
    /// place: a read of `w` is fused into `x` through pointwise operations at `w`'s shape, so
    /// each thread reads and writes the same elements, the same ones at every run of the root.
    /// (Any other read of `w` under such a root would be clobbered by it, so it is not fused.)
    pub own_update: SecondaryMap<Inst, bool>,
}

impl Fusion {
    /// Nothing fused.
    pub fn none() -> Fusion {
        Fusion::default()
    }

    /// Whether `v` is fused.
    pub fn is_fused(&self, v: Value) -> bool {
        self.fused.get(v).copied().unwrap_or(false)
    }

    /// The instruction that evaluates instruction `i`: `i` itself unless its result is fused.
    pub fn evaluated_at(&self, i: Inst) -> Inst {
        self.eval_at.get(i).copied().flatten().unwrap_or(i)
    }

    /// The accumulator whose fragment order root instruction `i` is evaluated in, if any.
    pub fn frag_root(&self, i: Inst) -> Option<crate::ir::Var> {
        self.frag_root.get(i).copied().flatten()
    }

    /// Whether root `i` reads accumulator `v` in its registers (the root's own accumulator or
    /// one of the same distribution).
    pub fn reads_fragments_of(&self, i: Inst, v: crate::ir::Var) -> bool {
        self.frag_root(i) == Some(v) || self.frag_also.get(i).is_some_and(|vs| vs.contains(&v))
    }

    /// For a `WriteVar(var, x)`: the `Insert` that `x` is when it is the block update of `var`
    /// written in place — fused, its base a fused read of `var` itself ([`views_in_place`]).
    /// Only the block's elements are written; the rest of `var` keeps its bytes.
    pub fn in_place_insert(&self, k: &Kernel, var: crate::ir::Var, x: Value) -> Option<Inst> {
        let ValueDef::Result(d) = k.values[x].def else { return None };
        let Op::Insert { base, .. } = k.insts[d].op else { return None };
        let ValueDef::Result(r) = k.values[base].def else { return None };
        (self.is_fused(x) && self.is_fused(base) && matches!(k.insts[r].op, Op::ReadVar(w) if w == var)).then_some(d)
    }

    /// The tile values (buffers) and variables an instruction actually reads once fused
    /// operands are expanded into their own operands.
    pub fn leaves(&self, k: &Kernel, i: Inst) -> (Vec<Value>, Vec<crate::ir::Var>) {
        let mut vals = vec![];
        let mut vars = vec![];
        self.visit_fused(k, i, &mut |_, v| {
            if !self.is_fused(v) {
                vals.push(v);
                return false;
            }
            if let ValueDef::Result(d) = k.values[v].def {
                if let Op::ReadVar(var) = k.insts[d].op {
                    vars.push(var);
                }
            }
            true
        });
        (vals, vars)
    }

    /// Walks the expression instruction `i` evaluates: `f(consumer, operand)` for each operand
    /// of `i` and, where `f` returns true for a fused operand, for each operand of the
    /// instruction that computes it, and so on down (last operand first).
    pub fn visit_fused(&self, k: &Kernel, i: Inst, f: &mut dyn FnMut(Inst, Value) -> bool) {
        let mut stack: Vec<(Inst, Value)> = k.inst_args(i).into_iter().map(|a| (i, a)).collect();
        while let Some((c, v)) = stack.pop() {
            if !f(c, v) || !self.is_fused(v) {
                continue;
            }
            if let ValueDef::Result(d) = k.values[v].def {
                stack.extend(k.inst_args(d).into_iter().map(|a| (d, a)));
            }
        }
    }
}


/// Decides fusion for kernel `k` on `target` (see the module docs). Deterministic.
pub fn analyze(k: &Kernel, target: &TargetInfo, roles: &super::var_roles::VarRoles) -> Fusion {
    // TMEM variables live in shared memory where the target has no tensor memory.
    // A register-resident accumulator is read through its lowering (the fragments are written
    // back first), never in place from its buffer.
    let in_smem = |var| roles.in_shared_memory(k, var, target) && roles.accumulator(var).is_none();
    // ... or in fragment order, fused into a root that writes element for element (below).
    let acc = |var| roles.accumulator(var).is_some();
    let mut uses: SecondaryMap<Value, Vec<Inst>> = SecondaryMap::new();
    let mut block_of: SecondaryMap<Inst, Option<(Block, usize)>> = SecondaryMap::new();
    for (b, data) in k.blocks.iter() {
        for (pos, &i) in data.insts.iter().enumerate() {
            block_of[i] = Some((b, pos));
        }
    }
    k.walk(|i| {
        for a in k.inst_args(i) {
            uses[a].push(i);
        }
    });
    let mut out = Fusion::default();
    // Point where the value computed by instruction `i` is evaluated: its own position, or that
    // of the consumer it is fused into (decided before, because we go backwards).
    let mut eval_pos: SecondaryMap<Inst, Option<usize>> = SecondaryMap::new();
    // Instructions fused where they are evaluated per element of a larger (broadcast) shape.
    let mut broadcast_eval: SecondaryMap<Inst, bool> = SecondaryMap::new();
    for (b, data) in k.blocks.iter() {
        for (pos, &i) in data.insts.iter().enumerate().rev() {
            eval_pos[i] = Some(pos);
            let Some(v) = k.insts[i].result else { continue };
            let Some(vshape) = k.values[v].ty.shape() else { continue };
            let op = &k.insts[i].op;
            // A read of a shared-memory variable taken only by views and a block update of the
            // same variable: no copy of the whole tile (below). Otherwise the one-use rules.
            if let Op::ReadVar(var) = op {
                if in_smem(*var) {
                    if let Some(end) = views_in_place(k, &out, &uses, &eval_pos, (b, pos), v, *var, &block_of) {
                        out.fused[v] = true;
                        eval_pos[i] = Some(end);
                        out.eval_at[i] = data.insts.get(end).copied();
                        continue;
                    }
                }
            }
            let producer_ok = op.is_elementwise()
                || matches!(op, Op::Load { .. })
                || matches!(op, Op::ReadVar(var) if in_smem(*var) || acc(*var));
            if !producer_ok || uses[v].len() != 1 {
                continue;
            }
            // A tile `cp.async` can copy is not evaluated element by element inside arithmetic:
            // every element there waits for its own global load (~600 cycles each, in series);
            // with a buffer all of the tile's copies are in flight at once and the arithmetic
            // reads shared memory. Copies into a variable or out to a tensor still fuse.
            if let Op::Load { src, index } = op {
                let copy = matches!(k.insts[uses[v][0]].op, Op::WriteVar(..) | Op::Store { .. });
                if !copy && super::pipeline::async_copyable(k, *src, index, vshape, k.values[v].ty.elem()) {
                    continue;
                }
            }
            let u = uses[v][0];
            let Some((ub, upos)) = block_of[u] else { continue };
            if ub != b || upos <= pos {
                continue;
            }
            let uop = &k.insts[u].op;
            // Evaluated per element of a larger iteration space (fused into a broadcasting
            // consumer, or into one that is itself so evaluated): only cheap work repeats.
            let ushape = k.insts[u].result.and_then(|r| k.values[r].ty.shape());
            // A gather's indices are evaluated at its own elements, as a pointwise operand is.
            let gather_index = matches!(uop, Op::Gather { src, .. } if *src != v);
            let pointwise = gather_index || matches!(uop, Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..));
            let bcast = broadcast_eval[u] || (pointwise && ushape.is_some_and(|us| us != vshape && broadcasts(vshape, us)));
            if bcast && (!cheap(k, op) || matches!(op, Op::ReadVar(var) if !in_smem(*var))) {
                continue;
            }
            let consumer_ok = match uop {
                // A column sum folds each column in one thread: costly terms go through a
                // buffer instead when that would leave half the CTA's threads idle.
                Op::Reduce(_, Axis::Col, _) => !starves_threads(k, &uses, v, vshape),
                Op::Transpose(_) | Op::WriteVar(..) | Op::Reduce(..) | Op::Scan { .. } => true,
                // A view (a block, a row, an element) of a shared-memory variable reads the
                // variable in place: no copy of the whole tile for the few elements it takes.
                Op::Slice { .. } => matches!(op, Op::ReadVar(var) if in_smem(*var)),
                // A gather reads its source in place too, at the elements its indices name.
                Op::Gather { src, .. } if *src == v => matches!(op, Op::ReadVar(var) if in_smem(*var)),
                Op::Gather { .. } => ushape == Some(vshape) || bcast,
                // The stored value has the store's shape; a `where` mask may broadcast along it.
                Op::Store { value, .. } => k.values[*value].ty.shape() == Some(vshape),
                // A [R, 1] mask or row factor (or a [1, C] one) of cheap operations is evaluated
                // per element where its consumer uses it: an integer compare or a multiply per
                // element instead of a buffer written by a few threads between two barriers (the
                // distance loops' masks: four of their six barriers per step).
                op if op.is_elementwise() => ushape == Some(vshape) || (bcast && pointwise),
                _ => false,
            };
            if !consumer_ok {
                continue;
            }
            // A register accumulator's read: only into a root evaluated in its fragment order.
            let mut end_excl = false;
            let mut own = None;
            let mut frag = None;
            if let Op::ReadVar(var) = op {
                if acc(*var) {
                    // (An accumulator only ever stored is stored from its fragments however
                    // large; any other read of a large one is written out to its result tile.)
                    let dist = roles.accumulator(*var);
                    let floats = dist.map_or(0, |d| d.floats_per_thread());
                    let whole_rows = dist.is_some_and(|d| d.row_reducible()) && floats <= MAX_FRAGMENT_REDUCE_FLOATS;
                    let same = |w: crate::ir::Var| w != *var && roles.accumulator(w) == dist;
                    let Some(root) = fragment_root(k, &out, &uses, u, vshape, *var, whole_rows, &|w| in_smem(w) || same(w)) else { continue };
                    // A row reduction keeps only its partials live, and an update of an
                    // accumulator in place writes each element back as it goes.
                    let light = match k.insts[root].op {
                        Op::Reduce(..) => true,
                        Op::WriteVar(w, _) => roles.accumulator(w) == dist,
                        _ => false,
                    };
                    if !light && !roles.is_stored_only(*var) && floats > MAX_FRAGMENT_ROOT_FLOATS {
                        continue;
                    }
                    // A root already in another accumulator's order reads this one there too
                    // if the two are distributed alike.
                    if out.frag_root[root].is_some_and(|w| w != *var && !same(w)) {
                        continue;
                    }
                    // The root may write the accumulator itself: each element is read and
                    // written by the thread holding it, at the same place.
                    end_excl = matches!(k.insts[root].op, Op::WriteVar(w, _) if w == *var);
                    frag = Some((root, *var));
                } else if in_smem(*var) {
                    // An elementwise update of a shared-memory variable (`acc += f(...)` at the
                    // whole tile, no view or transpose of it on the way): each thread reads
                    // element e and writes element e back at the same address, so the root's
                    // own write is no clobber and the tile needs no copy (the distance loops of
                    // the per-channel stages copied their [C, K] accumulator out and back, with
                    // a barrier, fifteen times each).
                    own = fragment_root(k, &out, &uses, u, vshape, *var, false, &|_| false)
                        .filter(|&root| matches!(k.insts[root].op, Op::WriteVar(w, _) if w == *var));
                    end_excl = own.is_some();
                }
            }
            let end = eval_pos[u].unwrap_or(upos);
            // The evaluating instruction itself counts: `store x = f(load x)` with another
            // element mapping would race.
            let last = end.min(data.insts.len() - 1);
            let between = if end_excl { &data.insts[pos + 1..last] } else { &data.insts[pos + 1..=last] };
            let clobbered = match op {
                Op::Load { src, .. } => between.iter().any(|&j| writes_param(k, j, *src)),
                Op::ReadVar(var) => between.iter().any(|&j| writes_var(k, j, *var)),
                _ => false,
            };
            if clobbered {
                continue;
            }
            out.fused[v] = true;
            broadcast_eval[i] = bcast;
            eval_pos[i] = Some(end);
            out.eval_at[i] = data.insts.get(end).copied();
            if let Some(root) = own {
                out.own_update[root] = true;
            }
            if let Some((root, var)) = frag {
                match out.frag_root[root] {
                    Some(w) if w != var => out.frag_also[root].push(var),
                    _ => out.frag_root[root] = Some(var),
                }
            }
        }
    }
    // A write of a whole-tile expression into a register accumulator that no fragment order
    // claimed above (its expression reads no accumulator) is evaluated in the accumulator's own
    // order too: each thread computes its elements straight into its registers, where the tile
    // went through a shared-memory staging copy, a barrier and a reload of the fragments (a
    // per-step decay `let ea: tmem f32[C, K] = exp2(..)` of the per-channel backwards).
    // (A scalar fill has its own lowering.)
    k.walk(|i| {
        if let Op::WriteVar(w, x) = k.insts[i].op {
            if out.frag_root[i].is_none() && roles.accumulator(w).is_some() && !super::var_roles::is_splat(k, x) && k.values[x].ty.shape() == k.vars[w].ty.shape() {
                out.frag_root[i] = Some(w);
            }
        }
    });
    out
}

/// Whether a tile of shape `from` broadcasts to `to` (each dimension equal or 1).
fn broadcasts(from: (u32, u32), to: (u32, u32)) -> bool {
    (from.0 == to.0 || from.0 == 1) && (from.1 == to.1 || from.1 == 1)
}

/// Whether `op` costs a few instructions per element, so that repeating it for every element of
/// a broadcast costs less than a buffer and its barriers: arithmetic, comparisons, selects,
/// casts, generators, views and reads of shared-memory variables — not `exp2`/`log2`/`sqrt`,
/// float division or remainder, or an integer division by a run-time value (tens of
/// instructions each), global loads (a global access per element) or transposes.
fn cheap(k: &Kernel, op: &Op) -> bool {
    use crate::ir::{BinOp, Elem, UnOp};
    match op {
        Op::Unary(UnOp::Neg | UnOp::Abs | UnOp::Not, _) => true,
        Op::Unary(..) => false,
        Op::Binary(BinOp::Div | BinOp::Rem | BinOp::Cdiv, a, b) => k.values[*a].ty.elem() == Elem::I32 && super::pipeline::const_int(k, *b).is_some(),
        Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) | Op::Splat(_) | Op::Iota(_) | Op::Mask(_) | Op::Slice { .. } | Op::Gather { .. } | Op::ReadVar(_) => true,
        _ => false,
    }
}

/// Whether the read `v` of shared-memory variable `var` (at `pos` of block `b`) can be fused
/// although it has several uses: every use is in the block, after it, and is either a view
/// (`Slice`: it reads the elements it takes in place) or the base of at most one `Insert` of
/// a smaller, non-fused block whose fused result is written straight back to `var` — the block
/// update `var[r0..+R, c0..+C] = x`, which the code generator writes in place (only the block's
/// elements: `Fusion::in_place_insert`), so the base is never read. Every view is evaluated
/// before that write-back and no other write of `var` comes between the read and the last
/// evaluation. Returns the position evaluating the last use (the write-back, if any).
///
/// Why: `dqs[i, :] += x` is `write dqs = insert(read dqs, i, read dqs[i, :] + x)`; with the
/// read materialised every such update copied the whole tile out and back (KDA's per-row
/// loops: 8,192 shared-memory accesses per iteration for a 64-element row).
#[allow(clippy::too_many_arguments)] // the walk's context: kernel, fusion so far, uses, positions, the read
fn views_in_place(
    k: &Kernel,
    f: &Fusion,
    uses: &SecondaryMap<Value, Vec<Inst>>,
    eval_pos: &SecondaryMap<Inst, Option<usize>>,
    (b, pos): (Block, usize),
    v: Value,
    var: crate::ir::Var,
    block_of: &SecondaryMap<Inst, Option<(Block, usize)>>,
) -> Option<usize> {
    let insts = &k.blocks[b].insts;
    let full = k.vars[var].ty.shape()?;
    let mut write_back = None;
    let mut last_view = pos;
    for &u in &uses[v] {
        let (ub, upos) = block_of[u]?;
        if ub != b || upos <= pos {
            return None;
        }
        match k.insts[u].op {
            Op::Slice { src, .. } | Op::Gather { src, .. } if src == v => last_view = last_view.max(eval_pos[u].unwrap_or(upos)),
            Op::Insert { base, value, rows, cols, .. } if base == v && value != v && (rows, cols) != full && write_back.is_none() => {
                let r = k.insts[u].result?;
                if !f.is_fused(r) || f.is_fused(value) {
                    return None;
                }
                let at = eval_pos[u]?;
                if !matches!(k.insts[insts[at]].op, Op::WriteVar(w, x) if w == var && x == r) {
                    return None;
                }
                write_back = Some(at);
            }
            _ => return None,
        }
    }
    let end = match write_back {
        Some(w) if last_view >= w => return None,
        Some(w) => w,
        None => last_view,
    };
    // The write-back itself is the one write of `var` allowed, at the end.
    let between = if write_back.is_some() { &insts[pos + 1..end] } else { &insts[pos + 1..=end] };
    if between.iter().any(|&j| writes_var(k, j, var)) {
        return None;
    }
    Some(end)
}

/// The root a read of `var` (a `vshape` tile) fused into consumer `u` would be evaluated in:
/// for a register accumulator, one evaluated in its fragment order; for a shared-memory
/// variable, a write of the variable itself is an update in place (`analyze`). The chain of
/// fused results from `u` up is elementwise at `vshape` (no transpose: every element is read
/// where it is written) and ends in a `Store` of a `vshape` tile, a `WriteVar` of the
/// accumulator itself or of a variable `writable` accepts (shared memory, an accumulator of
/// the same distribution) of that shape, or a row reduction (`whole_rows`: see below).
#[allow(clippy::too_many_arguments)] // the walk's context: kernel, fusion so far, uses, start, shape, accumulator
fn fragment_root(k: &Kernel, f: &Fusion, uses: &SecondaryMap<Value, Vec<Inst>>, u: Inst, vshape: (u32, u32), var: crate::ir::Var, whole_rows: bool, writable: &dyn Fn(crate::ir::Var) -> bool) -> Option<Inst> {
    let mut x = u;
    loop {
        let op = &k.insts[x].op;
        match op {
            Op::Store { value, .. } => return (k.values[*value].ty.shape() == Some(vshape)).then_some(x),
            Op::WriteVar(w, _) => return ((*w == var || writable(*w)) && k.vars[*w].ty.shape() == Some(vshape)).then_some(x),
            // A row reduction folds each row where its quad of threads holds it, when every
            // unit spans whole rows or column pieces that each hold every partial class of the
            // order (`whole_rows`: `Distribution::row_reducible`; backend/sm90/frag_reduce.rs); a
            // column's elements are spread over 8 lanes and 4 warps, and its order is sequential
            // from row 0.
            Op::Reduce(_, Axis::Row, a) => return (k.values[*a].ty.shape() == Some(vshape) && whole_rows).then_some(x),
            // Index remaps: the element read is not the element written.
            Op::Transpose(_) | Op::Slice { .. } | Op::Gather { .. } | Op::Insert { .. } => return None,
            op if op.is_elementwise() => {}
            _ => return None,
        }
        let r = k.insts[x].result?;
        if k.values[r].ty.shape() != Some(vshape) || !f.is_fused(r) {
            return None;
        }
        x = *uses[r].first()?;
    }
}

/// Whether the terms `v` (`[rows, cols]`) of a column sum should get a buffer rather than be
/// evaluated in the sum's loop: the loop folds each column in one thread, from row 0 (the
/// interpreter's order), so fused terms are computed by `cols` threads; when that is at most
/// half the CTA and the terms are costly — their single-use elementwise expression holds an
/// `exp2`, `exp`, `log2` or `sqrt` — every thread computes its share into the buffer first and
/// the fold only adds. Bitwise the same result. Measured: dqkwg_channel's diagonal rows
/// ([16, 64] terms with an exp2 each, 128 threads) 11.76 → 10.66 ms on an H100
/// (docs/results.md, 2026-12-06); cheap terms stay fused (a buffer costs a barrier and a
/// shared-memory round trip).
fn starves_threads(k: &Kernel, uses: &SecondaryMap<Value, Vec<Inst>>, v: Value, (rows, cols): (u32, u32)) -> bool {
    if rows < 2 || 2 * cols > k.threads {
        return false;
    }
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        let ValueDef::Result(d) = k.values[x].def else { continue };
        let op = &k.insts[d].op;
        if matches!(op, Op::Unary(crate::ir::UnOp::Exp2 | crate::ir::UnOp::Exp | crate::ir::UnOp::Log2 | crate::ir::UnOp::Sqrt, _)) {
            return true;
        }
        if op.is_elementwise() {
            stack.extend(k.inst_args(d).into_iter().filter(|a| uses[*a].len() == 1));
        }
    }
    false
}

/// Whether instruction `i` (or anything nested in it) stores to tensor `p`.
fn writes_param(k: &Kernel, i: Inst, p: crate::ir::Param) -> bool {
    match &k.insts[i].op {
        Op::Store { dst, .. } => *dst == p,
        Op::For { body, .. } => k.blocks[*body].insts.iter().any(|&j| writes_param(k, j, p)),
        _ => false,
    }
}

/// Whether instruction `i` (or anything nested in it) writes variable `v`.
fn writes_var(k: &Kernel, i: Inst, v: crate::ir::Var) -> bool {
    if let Op::For { body, .. } = &k.insts[i].op {
        return k.blocks[*body].insts.iter().any(|&j| writes_var(k, j, v));
    }
    k.inst_vars(i).1.contains(&v)
}
