//! The shared-memory planner (a pass; run per target from [`super::target_plan`]): every register tile value,
//! every register/shared variable (and, on targets without tensor memory, every TMEM variable)
//! and every per-instruction scratch buffer (MMA operand staging) gets a byte range of the
//! kernel's dynamic shared memory.
//!
//! Live intervals are over program points ([`ProgramPoints`]):
//! * a value lives from its definition to its last use; a use inside a loop that does not contain
//!   the definition extends the interval to the end of the outermost such loop (the value is
//!   read again on every iteration);
//! * a variable lives from its first access (its declaration) to its last, and an access inside a
//!   loop that does not contain the declaration extends the interval over that (outermost) loop,
//!   because the contents are carried between iterations; one declared inside a loop body is
//!   written before it is read on every iteration, so it is dead between them;
//! * scratch lives at its instruction only;
//! * an MMA left in flight (sm_90a, register accumulator) keeps its operands and scratch alive
//!   until its latest wait ([`super::barriers::flight_end`]).
//!
//! Placement is [`interval_plan::plan`] (first fit over live intervals), shared with the TMEM
//! planner; buffers whose intervals are disjoint may share bytes. Barriers are not this pass's
//! business: [`super::barriers`] puts `bar.sync` after every instruction that touches shared
//! memory, which also orders reuse of a buffer by a later value.
//!
//! Budget: [`check_budget`] rejects a plan whose reserved header plus planned region exceeds the
//! target's shared memory per CTA with E0405, naming every buffer live at the peak.

use cranelift_entity::SecondaryMap;

use crate::ir::validate::Validated;
use crate::ir::{Inst, Kernel, Op, Space, Type, Value, Var};

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::var_roles::VarRoles;
use crate::diag::{Code, Diagnostic, Span};
use crate::layout::staging;
use crate::layout::swizzle::{Swizzle, PERIOD_ALIGN};
use crate::passes::interval_plan::{self, Request};
use crate::passes::liveness::Interval;
use crate::target::TargetInfo;

/// Alignment of every buffer in bytes (vector accesses, and 16 B for MMA descriptors).
pub const ALIGN: u32 = 128;

/// What a planned buffer holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A tile value.
    Value(Value),
    /// A variable.
    Var(Var),
    /// Scratch of an instruction.
    Scratch(Inst),
}

/// One planned buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// What it holds.
    pub owner: Owner,
    /// Byte offset from the start of the planned region.
    pub offset: u32,
    /// Size in bytes.
    pub bytes: u32,
    /// Live interval `[first, last]` in program points (inclusive).
    pub live: (u32, u32),
    /// Ring stages of a software-pipelined variable (1 otherwise); `bytes` covers all of them.
    pub stages: u32,
    /// The swizzle of a variable in a swizzled layout ([`crate::passes::tma::TmaPlan::swizzle`]).
    pub swizzle: Option<Swizzle>,
    /// The row pitch in elements of a variable with padded rows ([`super::bank_pad`]).
    pub pitch: Option<u32>,
}

/// The shared-memory plan of one kernel for one target.
#[derive(Clone, Debug, Default)]
pub struct SmemPlan {
    /// Offset of each tile value's buffer.
    pub values: SecondaryMap<Value, Option<u32>>,
    /// Offset of each variable's buffer (not for TMEM variables on tcgen05 targets).
    pub vars: SecondaryMap<Var, Option<u32>>,
    /// Offset of each instruction's scratch buffer.
    pub scratch: SecondaryMap<Inst, Option<u32>>,
    /// Ring of a software-pipelined variable ([`super::pipeline`]): `(stages, bytes per stage)`;
    /// stage `s` is at the variable's offset plus `s` strides.
    pub rings: SecondaryMap<Var, Option<(u32, u32)>>,
    /// All placements, in placement order.
    pub placements: Vec<Placement>,
    /// Bytes of the planned region (the extent of the placement, rounded up to 16).
    pub bytes: u32,
    /// Largest sum of co-live buffer bytes and the program point where it occurs.
    pub peak: (u32, u32),
}

/// Bytes of a tile type's row-major buffer (the element type's storage size; bool = 1 byte).
pub fn tile_bytes(ty: Type) -> u32 {
    match ty {
        Type::Scalar(_) => 0,
        Type::Tile { elem, rows, cols } => rows * cols * elem.size_bytes(),
    }
}

/// Bytes of a variable's buffer: [`tile_bytes`], with rows `pitch` elements apart when padded.
pub fn var_bytes(ty: Type, pitch: Option<u32>) -> u32 {
    match (ty, pitch) {
        (Type::Tile { elem, rows, .. }, Some(p)) => rows * p * elem.size_bytes(),
        _ => tile_bytes(ty),
    }
}

/// Scratch bytes instruction `i` needs on `target`: the operand staging of an MMA that the
/// target runs from shared-memory descriptors — tcgen05 (accumulator in tensor memory) or wgmma
/// (a register-resident accumulator, [`super::var_roles::VarRoles::accumulators`]) —
/// [`staging::staging`]; a row reduction evaluated in the fragments of a register tile whose
/// units hold column pieces, the partials it passes from piece to piece
/// ([`crate::layout::wgmma::Distribution::row_reduce_scratch_bytes`]); 0 otherwise.
pub fn scratch_bytes(k: &Kernel, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, i: Inst) -> u32 {
    if let Op::Reduce(..) = k.insts[i].op {
        return fusion.frag_root(i).and_then(|v| roles.accumulator(v)).map_or(0, |d| d.row_reduce_scratch_bytes());
    }
    let Op::Mma { dst, a, .. } = &k.insts[i].op else { return 0 };
    let tcgen05 = target.mma.tcgen05 && k.vars[*dst].space == Space::Tmem;
    if !tcgen05 && roles.accumulator(*dst).is_none() {
        return 0;
    }
    let (Some((m, n)), Some((ar, ac))) = (k.vars[*dst].ty.shape(), k.vars[a.var].ty.shape()) else { return 0 };
    let kdim = if a.transposed { ar } else { ac };
    if !tcgen05 {
        // wgmma: an operand in the core-matrix layout is read where it is; the others are staged.
        let Op::Mma { b, .. } = &k.insts[i].op else { return 0 };
        let tiled = |v| roles.is_tiled(v);
        let a_bytes = if tiled(a.var) { 0 } else { (m * kdim * 2).next_multiple_of(ALIGN) };
        let b_bytes = if tiled(b.var) { 0 } else { (n * kdim * 2).next_multiple_of(ALIGN) };
        return a_bytes + b_bytes;
    }
    // tcgen05 reads operand tiles in place too; with both so, nothing is staged.
    if let Op::Mma { b, .. } = &k.insts[i].op {
        if roles.is_tiled(a.var) && roles.is_tiled(b.var) {
            return 0;
        }
    }
    // Only tensor memory needs the A operand copied out first; elsewhere a `tmem` tile is in
    // shared memory already.
    let tmem_a = (k.vars[a.var].space == Space::Tmem && target.tmem.is_some()).then_some((ar, ac));
    staging::staging(m, n, kdim, tmem_a, ALIGN).bytes
}

/// Plans the kernel's shared memory for `target`, with a ring of `stages` buffers for every
/// variable of a pipelined loop in `loops` (live from the loop's start, where the first
/// iterations are issued). Deterministic.
///
/// A variable `pitch` gives a row pitch ([`super::bank_pad`]) takes that many elements per row.
/// A variable `swizzled` gives a swizzle mode gets a buffer, and ring stages, aligned to
/// [`PERIOD_ALIGN`] (the swizzle pattern is a function of the absolute address).
#[allow(clippy::too_many_arguments)] // the kernel, its target, and each earlier pass's decision
pub fn plan(v: &Validated<'_>, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, loops: &SecondaryMap<Inst, Option<Pipeline>>, swizzled: &dyn Fn(Var) -> Option<Swizzle>, pitch: &dyn Fn(Var) -> Option<u32>) -> SmemPlan {
    let (k, pp) = (v.kernel(), v.points());
    // Loop extension of live ranges is shared with the TMEM planner's liveness.
    let extend = |use_inst: Inst, def_point: Option<u32>| pp.live_end(use_inst, def_point);
    let start_of = |i: Inst, def_point: Option<u32>| pp.live_start(i, def_point);
    let mut value_iv: SecondaryMap<Value, Option<(u32, u32)>> = SecondaryMap::new();
    let mut var_iv: SecondaryMap<Var, Option<(u32, u32)>> = SecondaryMap::new();
    let mut scratch_iv: Vec<(Inst, u32)> = vec![];
    let mut flight: Vec<(Inst, u32)> = vec![];
    let var_in_smem = |v| roles.in_shared_memory(k, v, target);
    // A variable's first access in program order is its declaration (`let` scoping: it is
    // written there before any read, on every iteration of a loop that encloses it), so only
    // loops entered after it carry its contents — as for values (and the TMEM planner's
    // liveness). A variable declared inside a loop body is dead between iterations.
    let mut declared: SecondaryMap<Var, Option<u32>> = SecondaryMap::new();
    k.walk(|i| {
        let (r, w) = k.inst_vars(i);
        for v in r.into_iter().chain(w).chain(fusion.leaves(k, i).1) {
            declared[v] = Some(declared[v].map_or(pp.point[i], |d: u32| d.min(pp.point[i])));
        }
    });
    k.walk(|i| {
        let p = pp.point[i];
        if let Some(r) = k.insts[i].result {
            if fusion.is_fused(r) {
                return; // no buffer; its operands are charged to the consumer below
            }
            if !matches!(k.insts[i].op, Op::For { .. }) && k.values[r].ty.shape().is_some() {
                value_iv[r] = Some((p, p));
            }
        }
        let (leaf_vals, leaf_vars) = fusion.leaves(k, i);
        for a in leaf_vals {
            if k.values[a].ty.shape().is_none() {
                continue;
            }
            let def_point = match k.values[a].def {
                crate::ir::ValueDef::Result(d) | crate::ir::ValueDef::LoopIndex(d) => pp.point[d],
            };
            let end = extend(i, Some(def_point));
            if let Some((s, e)) = value_iv[a] {
                value_iv[a] = Some((s, e.max(end)));
            }
        }
        // A register accumulator's buffer is touched only where the fragments meet shared
        // memory: not by its MMAs, a broadcast write, or a root evaluated in its fragments.
        let touches = |v: Var| {
            roles.accumulator(v).is_none()
                || !(fusion.reads_fragments_of(i, v)
                    || matches!(k.insts[i].op, Op::WriteVar(w, _) if w == v && fusion.frag_root(i).is_some_and(|f| roles.accumulator(f) == roles.accumulator(v)))
                    || matches!(k.insts[i].op, Op::Mma { dst, .. } if dst == v)
                    || matches!(k.insts[i].op, Op::WriteVar(w, x) if w == v && super::var_roles::is_splat(k, x)))
        };
        let (r, w) = k.inst_vars(i);
        for v in r.into_iter().chain(w).chain(leaf_vars) {
            if !var_in_smem(v) || !touches(v) {
                continue;
            }
            let (s, e) = (start_of(i, declared[v]), extend(i, declared[v]));
            var_iv[v] = Some(match var_iv[v] {
                None => (s, e),
                Some((s0, e0)) => (s0.min(s), e0.max(e)),
            });
        }
        let sb = scratch_bytes(k, target, roles, fusion, i);
        if sb > 0 {
            scratch_iv.push((i, sb));
        }
        // An MMA left in flight reads its operands and scratch until its wait.
        if let (Some(end), Op::Mma { a, b, .. }) = (super::barriers::flight_end(k, fusion, roles, target, pp, i), &k.insts[i].op) {
            for v in [a.var, b.var] {
                if let Some((s, e)) = var_iv[v] {
                    var_iv[v] = Some((s, e.max(end)));
                }
            }
            flight.push((i, end));
        }
    });
    let mut reqs: Vec<(Owner, u32, (u32, u32))> = vec![];
    for (v, iv) in value_iv.iter() {
        if let Some(iv) = iv {
            reqs.push((Owner::Value(v), tile_bytes(k.values[v].ty), *iv));
        }
    }
    // A pipelined variable lives over its whole loop: later iterations' copies land in it (its
    // ring of `stages` buffers, or one buffer refilled early) while this iteration runs.
    let mut rings: SecondaryMap<Var, Option<(u32, u32)>> = SecondaryMap::new();
    let mut pipelined: SecondaryMap<Var, Option<(u32, u32)>> = SecondaryMap::new();
    for (l, p) in loops.iter() {
        if let Some(p) = p.as_ref() {
            for &v in &p.vars {
                pipelined[v] = Some((pp.point[l], pp.loop_end[l]));
                if p.stages > 1 {
                    let align = if swizzled(v).is_some() { PERIOD_ALIGN } else { ALIGN };
                    rings[v] = Some((p.stages, tile_bytes(k.vars[v].ty).next_multiple_of(align))); // never padded (bank_pad)
                }
            }
        }
    }
    for (v, iv) in var_iv.iter() {
        if let Some(&(s, e)) = iv.as_ref() {
            let live = pipelined[v].map_or((s, e), |(ls, le)| (s.min(ls), e.max(le)));
            let bytes = rings[v].map_or(var_bytes(k.vars[v].ty, pitch(v)), |(stages, stride)| stages * stride);
            reqs.push((Owner::Var(v), bytes, live));
        }
    }
    for (i, b) in scratch_iv {
        let p = pp.point[i];
        let end = flight.iter().find(|f| f.0 == i).map_or(p, |f| f.1.max(p));
        reqs.push((Owner::Scratch(i), b, (p, end)));
    }
    // Placement: the shared first-fit interval planner (same algorithm as the TMEM planner).
    let preqs: Vec<Request> = reqs
        .iter()
        .map(|&(owner, bytes, (s, e))| {
            let align = if matches!(owner, Owner::Var(v) if swizzled(v).is_some()) { PERIOD_ALIGN } else { ALIGN };
            Request { size: bytes.max(1), align, live: Interval { start: s, end: e } }
        })
        .collect();
    let placed = interval_plan::plan(&preqs);
    let mut out = SmemPlan::default();
    for ((owner, bytes, live), off) in reqs.into_iter().zip(placed.offsets) {
        let (mut stages, mut swizzle, mut padded) = (1, None, None);
        match owner {
            Owner::Value(v) => out.values[v] = Some(off),
            Owner::Var(v) => {
                out.vars[v] = Some(off);
                swizzle = swizzled(v);
                padded = pitch(v);
                if let Some((s, stride)) = rings[v] {
                    out.rings[v] = Some((s, stride));
                    stages = s;
                }
            }
            Owner::Scratch(i) => out.scratch[i] = Some(off),
        }
        out.placements.push(Placement { owner, offset: off, bytes, live, stages, swizzle, pitch: padded });
    }
    out.bytes = placed.extent.next_multiple_of(16);
    out.peak = (placed.peak_demand, placed.peak_point);
    out
}

/// What a buffer is called in diagnostics and reports on `target`, and the source it comes from.
/// Tile values are named by what computes them (their IR number is kept for `--emit ir`); a
/// `tmem` variable on a target without tensor memory says where it really lives.
pub fn describe(k: &Kernel, owner: Owner, target: &TargetInfo, roles: &VarRoles) -> (String, Span) {
    match owner {
        Owner::Value(v) => {
            let (span, what) = match k.values[v].def {
                crate::ir::ValueDef::Result(i) | crate::ir::ValueDef::LoopIndex(i) => (k.inst_spans[i], op_name(k, &k.insts[i].op)),
            };
            (format!("{what} ({v}): {}", k.values[v].ty), span)
        }
        Owner::Var(v) => {
            let d = &k.vars[v];
            let (p_tiled, p_accumulator) = (roles.is_tiled(v), roles.accumulator(v).is_some());
            let place = if p_tiled {
                format!("{} (8x8 core-matrix layout, read by the tensor core in place)", d.space)
            } else if d.space == Space::Tmem && target.tmem.is_none() {
                if p_accumulator {
                    format!("{} (wgmma registers on {}; this buffer is where reads and writes meet them)", d.space, target.name)
                } else {
                    format!("{} (shared memory on {}: no tensor memory)", d.space, target.name)
                }
            } else {
                d.space.to_string()
            };
            (format!("`{}`: {} in {place}", d.name, d.ty), d.span)
        }
        Owner::Scratch(i) if matches!(k.insts[i].op, Op::Reduce(..)) => ("partials of this row reduction, handed from one column piece of the register tile to the next".to_string(), k.inst_spans[i]),
        Owner::Scratch(i) => ("operand staging of this MMA (A and B, K-major)".to_string(), k.inst_spans[i]),
    }
}

/// [`describe`] of a placement, naming the ring of a pipelined variable.
pub fn label(k: &Kernel, p: &Placement, target: &TargetInfo, roles: &VarRoles) -> (String, Span) {
    let (mut what, span) = describe(k, p.owner, target, roles);
    if let Some(sw) = p.swizzle {
        what = what.replace("8x8 core-matrix layout", &format!("{}-swizzled panels", sw.name()));
    }
    if let (Some(pitch), Owner::Var(v)) = (p.pitch, p.owner) {
        let pad = (pitch - k.vars[v].ty.shape().map_or(0, |s| s.1)) * k.vars[v].ty.elem().size_bytes();
        what = format!("{what}, rows padded by {pad} bytes (fragment-order reads spread over the banks)");
    }
    if p.stages > 1 {
        (format!("{what}, a {}-stage ring (software pipeline)", p.stages), span)
    } else {
        (what, span)
    }
}

/// A short name of what an instruction computes, for reports.
fn op_name(k: &Kernel, op: &Op) -> String {
    match op {
        Op::Load { src, .. } => format!("tile loaded from `{}`", k.params[*src].name),
        Op::ReadVar(v) => format!("value of `{}` read", k.vars[*v].name),
        Op::Reduce(..) => "reduction result".into(),
        Op::Transpose(_) => "transpose".into(),
        Op::Splat(_) => "broadcast scalar".into(),
        Op::Cast(..) => "conversion result".into(),
        Op::Slice { .. } => "view".into(),
        Op::Gather { .. } => "gather".into(),
        _ if op.is_elementwise() => "elementwise result".into(),
        _ => "value".into(),
    }
}

/// Whether `header + plan.bytes` fits the target's shared memory per CTA (what
/// [`check_budget`] tests, without building its diagnostic).
pub fn fits(plan: &SmemPlan, header: u32, target: &TargetInfo) -> bool {
    header + plan.bytes <= target.smem_per_cta
}

/// Checks `header + plan.bytes` against the target's shared memory per CTA.
///
/// # Errors
/// E0405 naming every buffer live at the peak (its bytes and source), the reserved header, the
/// sum and the limit; when the co-live sum fits but first-fit placement does not, the note says
/// so (fragmentation).
pub fn check_budget(k: &Kernel, plan: &SmemPlan, header: u32, target: &TargetInfo, roles: &VarRoles) -> Result<(), Diagnostic> {
    if fits(plan, header, target) {
        return Ok(());
    }
    let limit = target.smem_per_cta;
    let need = header + plan.bytes;
    let (peak, at) = plan.peak;
    let mut live: Vec<&Placement> = plan.placements.iter().filter(|p| p.live.0 <= at && at <= p.live.1).collect();
    live.sort_by_key(|p| (std::cmp::Reverse(p.bytes), p.offset));
    let first = live.first().map(|p| label(k, p, target, roles).1).unwrap_or(k.span);
    let mut d = Diagnostic::error(
        Code::SmemOverBudget,
        format!("shared memory over budget in kernel `{}` on {}: {need} bytes per CTA, the limit is {limit}", k.name, target.name),
        first,
        format!("{} bytes", live.first().map_or(0, |p| p.bytes)),
    );
    if let Some(p) = live.first() {
        d.labels[0].message = format!("{}: {} bytes", label(k, p, target, roles).0, p.bytes);
    }
    for p in live.iter().skip(1) {
        let (what, span) = label(k, p, target, roles);
        d = d.with_label(span, format!("{what}: {} bytes, live at the same time", p.bytes));
    }
    let mut parts: Vec<String> = live.iter().map(|p| format!("{} ({})", p.bytes, label(k, p, target, roles).0)).collect();
    if header > 0 {
        parts.push(format!("{header} (reserved: MMA mbarrier and TMEM address slot)"));
    }
    d = d.with_note(format!("live at program point {at}: {} = {} bytes; limit {limit} bytes per CTA on {}", parts.join(" + "), peak + header, target.name));
    if peak + header <= limit {
        d = d.with_note(format!("the co-live buffers fit, but first-fit placement needs {} bytes (fragmentation)", plan.bytes));
    }
    let help = if target.tmem.is_none() {
        "help: use smaller tiles (BN, BK) or end a tile's live range earlier so its bytes are reused; this target has no tensor memory, so `tmem` accumulators take shared memory here"
    } else {
        "help: use smaller tiles (BN, BK) or end a tile's live range earlier so its bytes are reused; every tcgen05 MMA also stages its A and B operands in shared memory"
    };
    Err(d.with_note(help))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::builder::Builder;
    use crate::ir::{BinOp, Elem};

    #[test]
    fn disjoint_values_share_and_loop_uses_extend() {
        let mut k = Kernel::new("t", Span::default());
        let t = Type::tile(Elem::F32, 16, 16);
        let mut b = Builder::new(&mut k);
        let x = b.value(Op::Iota(crate::ir::Axis::Row), Type::tile(Elem::I32, 16, 16));
        let y = b.value(Op::Cast(x, Elem::F32), t); // x dies here
        let z = b.value(Op::Binary(BinOp::Add, y, y), t); // y dies here, may reuse x's bytes
        let lo = b.iconst(0);
        let hi = b.iconst(4);
        let (_, _, body) = b.for_loop(lo, hi, false);
        let top = b.block();
        b.switch_to(body);
        let w = b.value(Op::Binary(BinOp::Mul, z, z), t); // z is used in the loop
        let _ = b.value(Op::Binary(BinOp::Add, w, w), t);
        b.switch_to(top);
        let v = crate::ir::validate::validate(&k).expect("valid test kernel");
        let p = plan(&v, crate::target::Target::Sm90a.info(), &VarRoles::default(), &Fusion::none(), &SecondaryMap::new(), &|_| None, &|_| None);
        let off = |v: Value| p.values[v].unwrap();
        assert_eq!(off(x), 0);
        assert_ne!(off(y), off(x)); // co-live at the cast
        assert_eq!(off(z), off(x)); // x is dead when z is defined
        assert_ne!(off(w), off(z)); // z stays live over the whole loop
        assert!(p.bytes <= 3 * 1024);
    }

    /// In a loop body: `a` written and read, then `b` written and read. `a` is declared in the
    /// body, so it is dead between iterations and `b` may take its bytes — unless `a` is a ring
    /// of a pipelined loop, whose later iterations' copies land in it while `b` is in use.
    #[test]
    fn loop_body_variables_die_between_iterations_rings_span_the_loop() {
        let mut k = Kernel::new("t", Span::default());
        let t = Type::tile(Elem::F32, 16, 16);
        let mut b = Builder::new(&mut k);
        let va = b.var("a", Space::Smem, t, Span::default());
        let vb = b.var("b", Space::Smem, t, Span::default());
        let lo = b.iconst(0);
        let hi = b.iconst(4);
        let (l, _, body) = b.for_loop(lo, hi, false);
        let top = b.block();
        b.switch_to(body);
        let one = b.fconst(1.0);
        let x = b.value(Op::Splat(one), t);
        let wa = b.effect(Op::WriteVar(va, x));
        let ra = b.value(Op::ReadVar(va), t);
        b.effect(Op::WriteVar(vb, ra));
        let _ = b.value(Op::ReadVar(vb), t);
        b.switch_to(top);
        let v = crate::ir::validate::validate(&k).expect("valid test kernel");
        let sm90 = crate::target::Target::Sm90a.info();
        let p = plan(&v, sm90, &VarRoles::default(), &Fusion::none(), &SecondaryMap::new(), &|_| None, &|_| None);
        assert_eq!(p.vars[va], p.vars[vb], "a is dead once b is written: one buffer");

        let mut loops: SecondaryMap<Inst, Option<Pipeline>> = SecondaryMap::new();
        // Two stages (a ring), and one stage refilled early (after a's last read).
        for stages in [2, 1] {
            loops[l] = Some(Pipeline { writes: vec![wa], vars: vec![va], slice: vec![], stages, overlap_mma: false, reverse: false, last_read: vec![], trips: None });
            let p = plan(&v, sm90, &VarRoles::default(), &Fusion::none(), &loops, &|_| None, &|_| None);
            let (a0, b0) = (p.vars[va].unwrap(), p.vars[vb].unwrap());
            let ring = stages * tile_bytes(t).next_multiple_of(ALIGN);
            assert!(b0 >= a0 + ring || b0 + tile_bytes(t) <= a0, "{stages} stages: b ({b0}) overlaps a's buffer [{a0}, {})", a0 + ring);
        }
    }
}
