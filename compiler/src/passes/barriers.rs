//! CTA barrier placement (a pass; per target, after fusion, the shared-memory plan and the
//! software pipelines): a `bar.sync` goes before an instruction exactly when, since the last
//! barrier on some path to it, another thread may have touched what it touches in a way that
//! conflicts — it reads what was written, or writes what was read or written.
//!
//! Why conflicts are tracked per buffer and not per element: each tile instruction is a CTA-wide
//! loop whose element-to-thread mapping differs between instructions (a blocked layout, a wgmma
//! fragment, a reduction's lanes), so any two accesses of one buffer by two instructions may be
//! two threads'. What is tracked ([`Resource`]): byte ranges of the shared-memory plan — the
//! planner shares bytes between buffers with disjoint live ranges, so a new buffer's first write
//! conflicts with the reads of the dead one it overlays — and global tensors, since a barrier
//! also orders a CTA's global stores before its later loads of the same tensor.
//!
//! What each instruction touches is its own result and operands, plus those of the values fused
//! into it ([`super::fuse`]: evaluated inside their consumer, which therefore reads what they
//! read). A register accumulator's shared-memory buffer counts as read *and* written by every
//! access (the code generator writes the fragments back to it before a read). Instructions
//! whose code has shared-memory traffic of its own ([`Access::opaque`]: MMAs and their operand
//! staging, reductions and scans outside fragments, tensor memory) are fenced on both sides, as
//! every instruction used to be. A pipelined tile's write ([`super::pipeline`]) is visible to
//! every thread once its wait returns (an mbarrier phase, or a barrier after the threads' own
//! copies), so it leaves nothing pending; the write that issues a later iteration's copies
//! overwrites a stage the previous iteration read, so no access of its rings may be pending,
//! and reads the tensors it copies from, so no store to them may be (a reviewer's find: a
//! global store before a `cp.async`-pipelined loop, or in the previous iteration, that the
//! copies read back).
//! Loops: the state at a body's start joins the state before the loop and at the body's end
//! (the back edge), iterated to a fixed point.

use cranelift_entity::SecondaryMap;
use std::collections::HashMap;

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::smem_plan::{Owner, SmemPlan};
use super::var_roles::VarRoles;
use crate::ir::{Block, Inst, Kernel, Op, Param, Space, ValueDef, Var};
use crate::target::TargetInfo;

/// Which instructions are preceded by a CTA barrier.
#[derive(Clone, Debug, Default)]
pub struct Barriers {
    before: SecondaryMap<Inst, bool>,
}

impl Barriers {
    /// Whether `bar.sync` precedes instruction `i`.
    pub fn before(&self, i: Inst) -> bool {
        self.before.get(i).copied().unwrap_or(false)
    }

    /// How many instructions are preceded by a barrier.
    pub fn count(&self) -> usize {
        self.before.values().filter(|&&b| b).count()
    }
}

/// Something threads of a CTA share.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Resource {
    /// Bytes `[start, end)` of the planned shared memory.
    Smem(u32, u32),
    /// A global tensor.
    Global(Param),
}

impl Resource {
    fn overlaps(self, other: Resource) -> bool {
        match (self, other) {
            (Resource::Smem(a, b), Resource::Smem(c, d)) => a < d && c < b,
            (Resource::Global(p), Resource::Global(q)) => p == q,
            _ => false,
        }
    }
}

/// What one instruction touches.
#[derive(Clone, Debug, Default)]
struct Access {
    reads: Vec<Resource>,
    writes: Vec<Resource>,
    /// Shared-memory traffic the plan does not name: barriers on both sides (an MMA, tensor
    /// memory).
    opaque: bool,
    /// Ring stages it issues copies into (a later iteration's tiles, visible when that
    /// iteration waits for them): they must not be pending, and are not pending after.
    issues: Vec<Resource>,
    /// Its code ends with a barrier of its own (a wgmma's, after `wait_group`).
    settles: bool,
    /// An MMA (opaque, touching no global memory).
    mma: bool,
}

/// Accesses since the last barrier on some path.
#[derive(Clone, Debug, Default, PartialEq)]
struct Pending {
    reads: Vec<Resource>,
    writes: Vec<Resource>,
    /// Unnamed accesses (after an opaque instruction): anything conflicts.
    unknown: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        !self.unknown && self.reads.is_empty() && self.writes.is_empty()
    }

    fn conflicts(&self, a: &Access) -> bool {
        let hit = |xs: &[Resource], ys: &[Resource]| xs.iter().any(|&x| ys.iter().any(|&y| x.overlaps(y)));
        if a.opaque && a.mma {
            // An MMA: unnamed shared-memory traffic, no global access.
            let smem = |r: &Resource| matches!(r, Resource::Smem(..));
            return self.unknown || self.reads.iter().chain(&self.writes).any(smem);
        }
        if a.opaque {
            // Tensor memory: its tcgen05 fences pair with the barrier before them.
            return !self.is_empty();
        }
        if self.unknown {
            return !a.reads.is_empty() || !a.writes.is_empty() || !a.issues.is_empty();
        }
        let writes = || a.writes.iter().chain(&a.issues);
        hit(&a.reads, &self.writes) || writes().any(|&w| self.reads.iter().chain(&self.writes).any(|&x| w.overlaps(x)))
    }

    fn add(&mut self, a: &Access) {
        if a.opaque {
            self.unknown = true;
        }
        for &r in &a.reads {
            if !self.reads.contains(&r) {
                self.reads.push(r);
            }
        }
        for &w in &a.writes {
            if !self.writes.contains(&w) {
                self.writes.push(w);
            }
        }
    }

    fn join(&mut self, other: &Pending) {
        self.unknown |= other.unknown;
        self.add(&Access { reads: other.reads.clone(), writes: other.writes.clone(), ..Access::default() });
    }
}

struct Ctx<'a> {
    k: &'a Kernel,
    fusion: &'a Fusion,
    roles: &'a VarRoles,
    target: &'a TargetInfo,
    pipelines: &'a SecondaryMap<Inst, Option<Pipeline>>,
    /// Byte range of each planned buffer.
    ranges: HashMap<Owner, (u32, u32)>,
    /// The pipelined writes, and what each issues: the copies of its loop's later tiles, into
    /// every ring, from their tensors (the loop's first write issues them all; the others
    /// issue nothing).
    piped: HashMap<Inst, Access>,
}

/// Places the barriers of kernel `k` for `target` given its fusion decisions, shared-memory
/// plan and software pipelines.
pub fn run(k: &Kernel, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, smem: &SmemPlan, pipelines: &SecondaryMap<Inst, Option<Pipeline>>) -> Barriers {
    let ranges: HashMap<Owner, (u32, u32)> = smem.placements.iter().map(|p| (p.owner, (p.offset, p.offset + p.bytes))).collect();
    let mut piped = HashMap::new();
    for p in pipelines.values().flatten() {
        for (n, &w) in p.writes.iter().enumerate() {
            piped.insert(w, if n == 0 { issue(k, &ranges, p) } else { Access::default() });
        }
    }
    let cx = Ctx { k, fusion, roles, target, pipelines, ranges, piped };
    let mut out = Barriers::default();
    cx.block(k.body, Pending::default(), &mut out);
    out
}

/// What issuing pipeline `p`'s copies touches: its rings (every stage of each variable) and the
/// tensors the copies read — a CTA's earlier store to one of them must be ordered before the
/// copy that reads it back (the copies are the threads' `cp.async` where TMA does not apply).
fn issue(k: &Kernel, ranges: &HashMap<Owner, (u32, u32)>, p: &Pipeline) -> Access {
    let issues = p.vars.iter().filter_map(|&v| ranges.get(&Owner::Var(v))).map(|&(s, e)| Resource::Smem(s, e)).collect();
    let reads = p.writes.iter().filter_map(|&w| k.written_load(w)).map(|(_, src, _)| Resource::Global(src)).collect();
    Access { reads, issues, ..Access::default() }
}

impl Ctx<'_> {
    /// Places the barriers of block `b` entered with `state`; returns the state at its end.
    fn block(&self, b: Block, mut state: Pending, out: &mut Barriers) -> Pending {
        for &i in &self.k.blocks[b].insts {
            if self.k.insts[i].result.is_some_and(|r| self.fusion.is_fused(r)) {
                continue; // evaluated inside its consumer, which accounts for it
            }
            if let Op::For { body, .. } = self.k.insts[i].op {
                // A pipelined loop's first iterations are issued before it, into its rings.
                if let Some(p) = self.pipelines.get(i).and_then(Option::as_ref) {
                    let a = issue(self.k, &self.ranges, p);
                    if state.conflicts(&a) {
                        out.before[i] = true;
                        state = Pending::default();
                    }
                    state.add(&a);
                }
                // The back edge: iterate the body until the state at its start is stable.
                let mut entry = state.clone();
                loop {
                    let end = self.block(body, entry.clone(), out);
                    let mut next = state.clone();
                    next.join(&end);
                    if next == entry {
                        break;
                    }
                    entry = next;
                }
                // After it: the body's end, or its start when it ran zero times — together the
                // fixed point's entry; an MMA left in flight is awaited after the loop, then a
                // barrier ([`crate::backend`]).
                let overlap = self.pipelines.get(i).is_some_and(|p| p.as_ref().is_some_and(|p| p.overlap_mma));
                state = if overlap { Pending::default() } else { entry };
                continue;
            }
            let a = self.access(i);
            if state.conflicts(&a) {
                out.before[i] = true;
                state = Pending::default();
            }
            if a.settles {
                state = Pending::default();
            } else if a.opaque {
                // Its own code ends with unnamed traffic: the next access waits.
                state = Pending { unknown: true, ..Pending::default() };
            } else {
                state.add(&a);
            }
        }
        state
    }

    /// What non-fused instruction `i` touches, fused values included.
    fn access(&self, i: Inst) -> Access {
        let mut a = Access::default();
        if let Some(issue) = self.piped.get(&i) {
            return issue.clone();
        }
        match &self.k.insts[i].op {
            Op::Mma { dst, .. } => {
                // Operand staging, reads through the async proxy, a fence and barriers of
                // its own; a wgmma ([`crate::backend`]'s sm90) ends with a barrier.
                a.opaque = true;
                a.mma = true;
                a.settles = self.target.tmem.is_none() && self.roles.accumulator(*dst).is_some();
            }
            // (No code where there is no tensor memory.)
            Op::TmemAlloc { .. } | Op::TmemRelinquish | Op::TmemDealloc { .. } => a.opaque = self.target.tmem.is_some(),
            _ => {}
        }
        if let Some(r) = self.k.insts[i].result {
            if let Some(&(s, e)) = self.ranges.get(&Owner::Value(r)) {
                a.writes.push(Resource::Smem(s, e));
            }
        }
        if let Some(&(s, e)) = self.ranges.get(&Owner::Scratch(i)) {
            a.writes.push(Resource::Smem(s, e));
        }
        let in_registers = self.fusion.frag_root(i).is_some();
        self.operands(i, in_registers, &mut a);
        a
    }

    /// Adds what instruction `i` reads and writes besides its result: its operands' buffers,
    /// its variables, its global tensors, and recursively those of the values fused into it.
    /// `in_registers`: `i` is evaluated in a register accumulator's fragment order, where every
    /// accumulator it reads or writes is its registers ([`super::fuse`]'s fragment roots).
    fn operands(&self, i: Inst, in_registers: bool, a: &mut Access) {
        for v in self.k.inst_args(i) {
            if self.fusion.is_fused(v) {
                if let ValueDef::Result(d) = self.k.values[v].def {
                    self.operands(d, in_registers, a);
                }
            } else if let Some(&(s, e)) = self.ranges.get(&Owner::Value(v)) {
                a.reads.push(Resource::Smem(s, e));
            }
        }
        let (reads, writes) = self.k.inst_vars(i);
        // A broadcast scalar written into an accumulator fills its registers.
        let splat = matches!(self.k.insts[i].op, Op::WriteVar(_, x) if super::var_roles::is_splat(self.k, x));
        for (vars, write) in [(reads, false), (writes, true)] {
            for v in vars {
                if !((in_registers || splat) && self.roles.accumulator(v).is_some()) {
                    self.var(v, write, a);
                }
            }
        }
        match &self.k.insts[i].op {
            Op::Load { src, .. } => a.reads.push(Resource::Global(*src)),
            Op::Store { dst, .. } => a.writes.push(Resource::Global(*dst)),
            _ => {}
        }
    }

    fn var(&self, v: Var, write: bool, a: &mut Access) {
        if self.k.vars[v].space == Space::Tmem && self.target.tmem.is_some() {
            a.opaque = true; // tensor memory: tcgen05 loads and stores with their own fences
            return;
        }
        let Some(&(s, e)) = self.ranges.get(&Owner::Var(v)) else { return };
        let r = Resource::Smem(s, e);
        // A register accumulator's buffer is written (its fragments) by a read too.
        if write || self.roles.accumulator(v).is_some() {
            a.writes.push(r);
        }
        a.reads.push(r);
    }
}
