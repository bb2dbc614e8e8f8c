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
//!
//! **wgmma waits, placed by dependence** (sm_90a, register accumulators): an MMA is issued and
//! committed as one `wgmma` group and left in flight ([`Barriers::deferred`]); until
//! `wgmma.wait_group` its accumulator's registers and the shared memory it reads (its operands'
//! buffers and staging scratch) belong to the tensor core. The wait goes before the first
//! instruction that touches those registers (an MMA chaining into the same accumulator does
//! not: the tensor core runs one warpgroup's wgmmas in order) or writes those bytes — then a
//! barrier too, since every warp's reads must be done — as `wait_group N` with `N` the groups
//! issued after the newest MMA it needs ([`Barriers::wait_before`]). An early refill of a
//! one-stage TMA ring counts as a write of the ring after its last reader; a deferred MMA
//! that reads a ring last refills it once awaited. A loop, a block's end, an MMA that cannot
//! be left in flight and tensor memory wait for all. So K#1 runs `dvn = k·dS` and
//! `dS += qᵀ·do` at once and waits for the first alone before `dvn`'s epilogue (PTX ISA,
//! "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": wgmma.commit_group,
//! wgmma.wait_group).

use cranelift_entity::SecondaryMap;
use std::collections::HashMap;

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::smem_plan::{Owner, SmemPlan};
use super::tma::TmaPlan;
use super::var_roles::VarRoles;
use crate::ir::{Block, Inst, Kernel, Op, Param, Space, ValueDef, Var};
use crate::target::TargetInfo;

/// Which instructions are preceded by a CTA barrier, and where wgmma groups are awaited.
#[derive(Clone, Debug, Default)]
pub struct Barriers {
    before: SecondaryMap<Inst, bool>,
    /// `wgmma.wait_group N` before the instruction (then its barrier, if it has one).
    wait: SecondaryMap<Inst, Option<u32>>,
    /// MMAs left in flight past their own code.
    deferred: SecondaryMap<Inst, bool>,
    /// Blocks that end with MMAs in flight: `wait_group 0` and a barrier close them.
    settle_end: SecondaryMap<Block, bool>,
    /// wgmmas whose operands were made visible to the async proxy by the MMA just before them.
    chained: SecondaryMap<Inst, bool>,
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

    /// `Some(N)`: `wgmma.wait_group N` precedes instruction `i` (before its barrier).
    pub fn wait_before(&self, i: Inst) -> Option<u32> {
        self.wait.get(i).copied().flatten()
    }

    /// Whether MMA `i` is committed and left in flight (no wait or barrier of its own).
    pub fn deferred(&self, i: Inst) -> bool {
        self.deferred.get(i).copied().unwrap_or(false)
    }

    /// Whether block `b` ends with `wgmma.wait_group 0` and a barrier (MMAs in flight there).
    pub fn settles_at_end(&self, b: Block) -> bool {
        self.settle_end.get(b).copied().unwrap_or(false)
    }

    /// Whether wgmma `i` needs no `fence.proxy.async` and barrier of its own: it stages no
    /// operand (both are tiles read in place), and the instruction before it in its block is a
    /// wgmma that fenced (or was itself chained) — no thread wrote shared memory since that
    /// fence and barrier, so what it made visible to the tensor core is all there is. The
    /// three products of a hi/lo split (`p += ah @ bl; p += al @ bh; p += ah @ bh`) had a
    /// barrier before each.
    pub fn chained(&self, i: Inst) -> bool {
        self.chained.get(i).copied().unwrap_or(false)
    }

    fn set_wait(&mut self, i: Inst, n: u32) {
        self.wait[i] = Some(self.wait[i].map_or(n, |m| m.min(n)));
    }
}

/// An MMA committed and not yet awaited: the registers of `dst` and the shared memory `reads`
/// belong to the tensor core.
#[derive(Clone, Debug)]
struct InFlight {
    dst: Var,
    reads: Vec<Resource>,
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
    /// Every variable it reads or writes, fused values' included (an accumulator's registers).
    vars: Vec<Var>,
    /// The instruction.
    inst: Option<Inst>,
    /// A shared-memory variable it updates element for element in place (`own_update`): each
    /// thread reads and writes the same elements, the same ones every time it runs.
    own: Option<Resource>,
}

/// Accesses since the last barrier on some path.
#[derive(Clone, Debug, Default, PartialEq)]
struct Pending {
    reads: Vec<Resource>,
    writes: Vec<Resource>,
    /// Variables read and written by an in-place elementwise update (`Access::own`), with the
    /// instruction: a conflict for every other instruction, none for that one's next run (a
    /// loop's back edge), whose threads touch the same elements they touched.
    owned: Vec<(Resource, Inst)>,
    /// Unnamed accesses (after an opaque instruction): anything conflicts.
    unknown: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        !self.unknown && self.reads.is_empty() && self.writes.is_empty() && self.owned.is_empty()
    }

    fn conflicts(&self, a: &Access) -> bool {
        let hit = |xs: &[Resource], ys: &[Resource]| xs.iter().any(|&x| ys.iter().any(|&y| x.overlaps(y)));
        if a.opaque && a.mma {
            // An MMA: unnamed shared-memory traffic, no global access.
            let smem = |r: &Resource| matches!(r, Resource::Smem(..));
            return self.unknown || self.reads.iter().chain(&self.writes).any(smem) || !self.owned.is_empty();
        }
        if a.opaque {
            // Tensor memory: its tcgen05 fences pair with the barrier before them.
            return !self.is_empty();
        }
        if self.unknown {
            return !a.reads.is_empty() || !a.writes.is_empty() || !a.issues.is_empty();
        }
        let mine = |r: Resource, j: Inst| a.inst == Some(j) && a.own == Some(r);
        let touches = |r: Resource| a.reads.iter().chain(&a.writes).chain(&a.issues).any(|x| x.overlaps(r));
        if self.owned.iter().any(|&(r, j)| !mine(r, j) && touches(r)) {
            return true;
        }
        let writes = || a.writes.iter().chain(&a.issues);
        hit(&a.reads, &self.writes) || writes().any(|&w| self.reads.iter().chain(&self.writes).any(|&x| w.overlaps(x)))
    }

    fn add(&mut self, a: &Access) {
        if a.opaque {
            self.unknown = true;
        }
        let own = a.own.zip(a.inst);
        if let Some(o) = own {
            if !self.owned.contains(&o) {
                self.owned.push(o);
            }
        }
        let other = |r: &Resource| own.is_none_or(|(o, _)| o != *r);
        for &r in a.reads.iter().filter(|r| other(r)) {
            if !self.reads.contains(&r) {
                self.reads.push(r);
            }
        }
        for &w in a.writes.iter().filter(|r| other(r)) {
            if !self.writes.contains(&w) {
                self.writes.push(w);
            }
        }
    }

    fn join(&mut self, other: &Pending) {
        self.unknown |= other.unknown;
        self.add(&Access { reads: other.reads.clone(), writes: other.writes.clone(), ..Access::default() });
        for &o in &other.owned {
            if !self.owned.contains(&o) {
                self.owned.push(o);
            }
        }
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
    /// Per instruction of a one-stage TMA loop's body: the rings refilled right after it.
    refills: HashMap<Inst, Vec<Resource>>,
}

/// Places the barriers of kernel `k` for `target` given its fusion decisions, shared-memory
/// plan and software pipelines.
pub fn run(k: &Kernel, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, smem: &SmemPlan, pipelines: &SecondaryMap<Inst, Option<Pipeline>>, tma: &TmaPlan) -> Barriers {
    let ranges: HashMap<Owner, (u32, u32)> = smem.placements.iter().map(|p| (p.owner, (p.offset, p.offset + p.bytes))).collect();
    let mut piped = HashMap::new();
    let mut refills: HashMap<Inst, Vec<Resource>> = HashMap::new();
    for (l, p) in pipelines.iter() {
        let Some(p) = p else { continue };
        for (n, &w) in p.writes.iter().enumerate() {
            piped.insert(w, if n == 0 { issue(k, &ranges, p) } else { Access::default() });
        }
        if tma.loop_barriers(l).is_some() && super::tma::early_refill(p) {
            for (&last, v) in p.last_read.iter().zip(&p.vars) {
                if let Some(&(s, e)) = ranges.get(&Owner::Var(*v)) {
                    refills.entry(last).or_default().push(Resource::Smem(s, e));
                }
            }
        }
    }
    let cx = Ctx { k, fusion, roles, target, pipelines, ranges, piped, refills };
    let mut out = Barriers::default();
    cx.block(k.body, Pending::default(), None, &mut out);
    out
}

/// Where a deferred MMA's wait can be at the latest, as the shared-memory plan sees it: the
/// program point before the first later instruction of its block that touches its
/// accumulator's registers (an MMA chaining into it does not) or enters a loop, else its
/// block's last point (the block ends with a wait). `None` for an MMA that completes its own group (no register
/// accumulator, or tensor memory). The plan keeps the MMA's operand buffers and scratch alive
/// until then, so that no buffer written meanwhile shares their bytes and the wait is not
/// pulled forward by a write to them ([`run`] places the actual waits).
pub fn flight_end(k: &Kernel, fusion: &Fusion, roles: &VarRoles, target: &TargetInfo, pp: &crate::ir::ProgramPoints, i: Inst) -> Option<u32> {
    let Op::Mma { dst, .. } = &k.insts[i].op else { return None };
    if target.tmem.is_some() || roles.accumulator(*dst).is_none() {
        return None;
    }
    let blk = k.blocks.values().find(|b| b.insts.contains(&i))?;
    let at = blk.insts.iter().position(|&x| x == i)?;
    let mut end = pp.point[i];
    for &j in &blk.insts[at + 1..] {
        if k.insts[j].result.is_some_and(|r| fusion.is_fused(r)) {
            continue;
        }
        let (r, w) = k.inst_vars(j);
        let chained = matches!(&k.insts[j].op, Op::Mma { dst: d, a, b, .. } if d == dst && a.var != *dst && b.var != *dst);
        let touches = r.iter().chain(&w).chain(&fusion.leaves(k, j).1).any(|v| v == dst) && !chained;
        if touches || matches!(k.insts[j].op, Op::For { .. }) {
            // The wait is before it: what it writes may take the operands' bytes.
            return Some(pp.point[j].saturating_sub(1).max(pp.point[i]));
        }
        end = pp.point[j];
    }
    Some(end)
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
    /// Places the barriers and wgmma waits of block `b` entered with `state` inside pipelined
    /// loop `pipe` (the innermost); returns the state at its end.
    fn block(&self, b: Block, mut state: Pending, pipe: Option<&Pipeline>, out: &mut Barriers) -> Pending {
        let mut flight: Vec<InFlight> = vec![];
        // The last instruction with code was a wgmma whose operands are visible to the async
        // proxy (it fenced, or was chained itself).
        let mut fenced = false;
        for &i in &self.k.blocks[b].insts {
            if self.k.insts[i].result.is_some_and(|r| self.fusion.is_fused(r)) {
                continue; // evaluated inside its consumer, which accounts for it
            }
            let after_fence = std::mem::replace(&mut fenced, false);
            if let Op::Mma { dst, a: x, b: y, .. } = &self.k.insts[i].op {
                if self.target.tmem.is_none() && self.roles.accumulator(*dst).is_some() {
                    // Operands of the innermost pipelined loop are fenced by their wait instead.
                    let piped = pipe.is_some_and(|p| p.vars.contains(&x.var) && p.vars.contains(&y.var));
                    out.chained[i] = !piped && after_fence && !self.ranges.contains_key(&Owner::Scratch(i));
                    fenced = !piped;
                }
            }
            if let Op::For { body, .. } = self.k.insts[i].op {
                // Nothing in flight enters a loop (its body may run zero times or many).
                if !flight.is_empty() {
                    flight.clear();
                    out.set_wait(i, 0);
                    out.before[i] = true;
                    state = Pending::default();
                }
                let inner = self.pipelines.get(i).and_then(Option::as_ref).or(pipe);
                // A pipelined loop's first iterations are issued before it, into its rings.
                if let Some(p) = self.pipelines.get(i).and_then(Option::as_ref) {
                    let a = issue(self.k, &self.ranges, p);
                    if state.conflicts(&a) {
                        out.before[i] = true;
                        state = Pending::default();
                    }
                    state.add(&a);
                }
                // Accesses pending from before the loop that its body would meet put a barrier
                // inside the body, run every iteration; one before the loop serves them once
                // (the distance loops read tiles written just before them: a barrier per step).
                // Hoisted when the body then needs fewer barriers — not for a pipelined loop,
                // whose first copies (issued above, in the loop's own code) a barrier before
                // the loop would not order.
                let piped = self.pipelines.get(i).is_some_and(Option::is_some);
                if !piped && !state.is_empty() && !out.before[i] {
                    // A barrier before the body's first instruction after a body that ends
                    // with one (its MMAs settled) is that same barrier after the first
                    // iteration (`drop_repeated_barriers` merges the two): it costs nothing.
                    let first = self.k.blocks[body].insts.iter().copied().find(|&j| !self.k.insts[j].result.is_some_and(|r| self.fusion.is_fused(r)));
                    let inside = |s: Pending| {
                        let mut trial = out.clone();
                        self.fixed_point(body, &s, inner, &mut trial);
                        let merged = trial.settles_at_end(body) && first.is_some_and(|j| trial.before(j));
                        trial.count() - usize::from(merged)
                    };
                    if inside(Pending::default()) < inside(state.clone()) {
                        out.before[i] = true;
                        state = Pending::default();
                    }
                }
                let entry = self.fixed_point(body, &state, inner, out);
                // After it: the body's end, or its start when it ran zero times — together the
                // fixed point's entry; an MMA left in flight is awaited after the loop, then a
                // barrier ([`crate::backend`]).
                let overlap = self.pipelines.get(i).is_some_and(|p| p.as_ref().is_some_and(|p| p.overlap_mma));
                state = if overlap { Pending::default() } else { entry };
                continue;
            }
            let a = self.access(i);
            let defer = a.settles && !pipe.is_some_and(|p| p.overlap_mma);
            if let Some((n, smem)) = self.must_wait(i, &a, defer, &flight) {
                flight.drain(..flight.len() - n as usize);
                out.set_wait(i, n);
                if smem {
                    out.before[i] = true;
                    state = Pending::default();
                }
            }
            if state.conflicts(&a) {
                out.before[i] = true;
                state = Pending::default();
            }
            if defer {
                // Committed and left in flight: the threads' accesses before it stay pending
                // (its own code has a barrier only when it staged operands), and its staging
                // scratch is written.
                out.deferred[i] = true;
                flight.extend(self.in_flight(i));
                state.add(&Access { writes: a.writes.clone(), ..Access::default() });
            } else if a.settles {
                state = Pending::default();
            } else if a.opaque {
                // Its own code ends with unnamed traffic: the next access waits.
                state = Pending { unknown: true, ..Pending::default() };
            } else {
                state.add(&a);
            }
        }
        if !flight.is_empty() {
            out.settle_end[b] = true;
            state = Pending::default();
        }
        state
    }

    /// Places the barriers of loop body `body` entered with `state` from before the loop: the
    /// body is iterated until the state at its start (`state` joined with the body's end, the
    /// back edge) is stable, which is returned.
    fn fixed_point(&self, body: Block, state: &Pending, inner: Option<&Pipeline>, out: &mut Barriers) -> Pending {
        let mut entry = state.clone();
        loop {
            let end = self.block(body, entry.clone(), inner, out);
            let mut next = state.clone();
            next.join(&end);
            if next == entry {
                return entry;
            }
            entry = next;
        }
    }

    /// The in-flight record of deferred MMA `i`: its accumulator, and the bytes the tensor core
    /// reads (both operands' buffers, its staging scratch).
    fn in_flight(&self, i: Inst) -> Option<InFlight> {
        let Op::Mma { dst, a, b, .. } = &self.k.insts[i].op else { return None };
        let owners = [Owner::Var(a.var), Owner::Var(b.var), Owner::Scratch(i)];
        let reads = owners.iter().filter_map(|o| self.ranges.get(o)).map(|&(s, e)| Resource::Smem(s, e)).collect();
        Some(InFlight { dst: *dst, reads })
    }

    /// Whether instruction `i` (accesses `a`; `defer`: an MMA that will be left in flight) must
    /// wait for MMAs in `flight`: `Some((N, barrier))` for `wait_group N` (the groups after the
    /// newest one it needs stay in flight) and whether a barrier must follow (it writes bytes
    /// one of them reads).
    fn must_wait(&self, i: Inst, a: &Access, defer: bool, flight: &[InFlight]) -> Option<(u32, bool)> {
        if flight.is_empty() {
            return None;
        }
        // An MMA that completes its own group (or an unlike MMA), tensor memory: all of them.
        if a.opaque && !defer {
            return Some((0, true));
        }
        let chain = match &self.k.insts[i].op {
            Op::Mma { dst, a: x, b: y, .. } if defer => Some((*dst, x.var, y.var)),
            _ => None,
        };
        // Its own refill waits with it; another instruction's overwrites the ring at once.
        let refills: &[Resource] = if defer { &[] } else { self.refills.get(&i).map_or(&[], Vec::as_slice) };
        let mut need: Option<(usize, bool)> = None;
        for (j, m) in flight.iter().enumerate() {
            let chained = chain.is_some_and(|(d, x, y)| d == m.dst && x != m.dst && y != m.dst);
            let regs = a.vars.contains(&m.dst) && !chained;
            let smem = a.writes.iter().chain(&a.issues).chain(refills).any(|w| m.reads.iter().any(|r| w.overlaps(*r)));
            if regs || smem {
                need = Some((j, smem || need.is_some_and(|n| n.1)));
            }
        }
        if let Some((j, smem)) = need {
            return Some(((flight.len() - 1 - j) as u32, smem));
        }
        // Registers of an accumulator whose MMAs are all complete, touched while others are in
        // flight: ptxas cannot always see across a loop's back edge that they are complete
        // (C7517: it injects `wait_group 0` there, which would wait for the ones in flight too),
        // so a `wait_group` for as many as are in flight — which returns at once — says so.
        let touches_acc = chain.is_none() && a.vars.iter().any(|&v| self.roles.accumulator(v).is_some());
        touches_acc.then_some((flight.len() as u32, false))
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
        a.inst = Some(i);
        a.own = self.own_update(i).and_then(|v| self.ranges.get(&Owner::Var(v))).map(|&(s, e)| Resource::Smem(s, e));
        a
    }

    /// The shared-memory variable `w` that `i`, `write w = f(read w, …)`, updates element for
    /// element in place ([`Fusion::own_update`]): each thread reads and writes the same elements,
    /// the same ones at every run of `i`. The distance loops' `dks += …` ran a barrier per step
    /// for its own previous step's write.
    fn own_update(&self, i: Inst) -> Option<Var> {
        match self.k.insts[i].op {
            Op::WriteVar(w, _) if self.fusion.own_update[i] => Some(w),
            _ => None,
        }
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
        a.vars.extend(reads.iter().chain(&writes).copied());
        // A broadcast scalar written into an accumulator fills its registers.
        let splat = matches!(self.k.insts[i].op, Op::WriteVar(_, x) if super::var_roles::is_splat(self.k, x));
        // An MMA into a register accumulator touches its registers, not its buffer.
        let mma_dst = match &self.k.insts[i].op {
            Op::Mma { dst, .. } if self.roles.accumulator(*dst).is_some() => Some(*dst),
            _ => None,
        };
        for (vars, write) in [(reads, false), (writes, true)] {
            for v in vars {
                if !((in_registers || splat || mma_dst == Some(v)) && self.roles.accumulator(v).is_some()) {
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
