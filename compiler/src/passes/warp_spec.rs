//! Warp specialisation of a TMA-pipelined loop on sm_90a (issue 9, item 5): one extra warpgroup,
//! the producer, issues the loop's TMA copies into the ring; the kernel's own warpgroups, the
//! consumers, only wait for each stage, run the MMAs and hand the stage back.
//!
//! Protocol (CUTLASS's "TMA warp-specialized" main loop; PTX ISA 9.7.13.15, mbarrier):
//! - Per ring stage `s` two mbarriers: `full[s]` (arrival count 1: the producer's
//!   `arrive.expect_tx` with the stage's bytes, completed by the copies) and `empty[s]` (one
//!   arrival per consumer warp).
//! - The producer's elected thread, for execution positions `p = 0, 1, …`: stage `p mod S`; from
//!   `p ≥ S` on it first waits for `empty[s]`'s phase `(p / S − 1) mod 2`; then it issues
//!   iteration `p`'s tiles against `full[s]`. It runs ahead as far as the ring allows (`S`
//!   iterations, against `S − 2` in the single-role pipeline).
//! - A consumer waits for `full[s]`'s phase `(p / S) mod 2`, runs the iteration, and at its
//!   end, after `wgmma.wait_group 1` (every MMA group but this iteration's complete), each warp
//!   arrives once on `empty` of the previous iteration's stage.
//! - Registers: the kernel is capped at entry (`.maxnreg`, the register file over all threads);
//!   the producer warpgroup gives registers back (`setmaxnreg.dec`, [`PRODUCER_REGISTERS`]) and
//!   the consumers take exactly what it gave ([`register_split`]).
//! - The producer leaves after its last copy; the consumers' CTA barriers from the split on are
//!   `bar.sync 1, consumer threads` (named barrier 1), which the producer never joins.
//!
//! When the runtime could not encode the tensor maps (a misaligned base or stride: the
//! kernel's run-time `tma.ok` test), the producer does nothing and the consumers copy each
//! iteration's tiles themselves, as the single-role pipeline's fallback does.
//!
//! Which kernels: `TILEC_WARP_SPECIALIZE` set in the compiler's environment (an experiment: the
//! decision is measured, docs/results.md) and a kernel whose only pipelined loop is a TMA loop
//! at the top level of its body, with an MMA left in flight across iterations, no thread
//! copies and more than one stage; before the loop only scalars and register-only accumulators
//! set from a scalar (the producer runs that code too, and must not share CTA-wide work); the
//! consumers' registers covering their accumulators' floats and [`CONSUMER_HEADROOM`]; no
//! declared residency (`ctas_per_sm` caps the registers itself); and room for the extra
//! warpgroup (at most 1,024 threads) and for the empty mbarriers in the header.

use cranelift_entity::SecondaryMap;

use crate::ir::{Inst, Kernel, Op, Type};
use crate::target::TargetInfo;

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::tma::TmaPlan;
use super::var_roles::VarRoles;

/// Threads of the producer warpgroup (`setmaxnreg` acts on whole warpgroups).
pub const PRODUCER_THREADS: u32 = crate::layout::wgmma::WARPGROUP;
/// Registers per thread the producer keeps (`setmaxnreg.dec`; it holds a few indices).
pub const PRODUCER_REGISTERS: u32 = 40;
/// Registers per consumer thread needed beyond its register accumulators' floats: addresses,
/// descriptors, loop state (ptxas asked for 154 for gemm's 128 floats of an m64n256 wgmma, C7602).
pub const CONSUMER_HEADROOM: u32 = 40;

/// A warp-specialised loop's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpSpecialization {
    /// The pipelined `For` whose copies the producer issues.
    pub loop_inst: Inst,
    /// The kernel's declared threads: the consumer warpgroups.
    pub consumer_threads: u32,
    /// Registers per thread at entry (`.maxnreg`): the register file over all threads, rounded
    /// down to a multiple of 8.
    pub entry_registers: u32,
    /// Registers per consumer thread after `setmaxnreg.inc`: what the CTA holds at entry less
    /// the producer's, over the consumer threads, rounded down to a multiple of 8 (`setmaxnreg`
    /// takes multiples of 8; at most 248, under the 255 a thread may address) — see
    /// [`register_split`].
    pub consumer_registers: u32,
    /// Byte offset in the header of `empty[0]` (`empty[s]` at `+ 8 s`).
    pub empty_barriers: u32,
}

impl WarpSpecialization {
    /// Threads per CTA at launch: consumers plus the producer warpgroup.
    pub fn launch_threads(&self) -> u32 {
        self.consumer_threads + PRODUCER_THREADS
    }
}

/// Whether the experiment is switched on (`TILEC_WARP_SPECIALIZE=1`).
fn enabled() -> bool {
    std::env::var_os("TILEC_WARP_SPECIALIZE").is_some_and(|v| v == "1")
}

/// Registers per thread `(at entry, per consumer after setmaxnreg.inc)` for `threads` consumer
/// threads and the producer warpgroup on `info`. The entry cap splits the register file over
/// all threads (multiples of 8); the CTA then holds `entry · (threads + 128)` registers, and
/// `setmaxnreg.inc` waits until the pool has what it asks for, so the consumers may take only
/// what the producer gives back: `128 · PRODUCER_REGISTERS + threads · consumer ≤ entry ·
/// (threads + 128)` (PTX ISA, `setmaxnreg`). At 256 consumers: 168 and 232 (CUTLASS's split).
pub fn register_split(info: &TargetInfo, threads: u32) -> (u32, u32) {
    let most = info.max_registers_per_thread;
    let entry = (info.registers_per_sm / (threads + PRODUCER_THREADS)).min(most) / 8 * 8;
    let pool = entry * (threads + PRODUCER_THREADS);
    let consumer = (pool.saturating_sub(PRODUCER_THREADS * PRODUCER_REGISTERS) / threads.max(1)).min(most) / 8 * 8;
    (entry, consumer)
}

/// Decides whether kernel `k` on `info` is warp-specialised (see the module docs for when).
/// `header_bytes` is the reserved region the TMA loop's barriers live in.
pub fn plan(k: &Kernel, info: &TargetInfo, roles: &VarRoles, fusion: &Fusion, pipelines: &SecondaryMap<Inst, Option<Pipeline>>, tma: &TmaPlan, header_bytes: u32) -> Option<WarpSpecialization> {
    if !enabled() || !(info.mma.wgmma && info.tmem.is_none() && info.tma) || !k.ctas_per_sm.is_empty() {
        return None;
    }
    let threads = k.threads;
    if threads == 0 || !threads.is_multiple_of(PRODUCER_THREADS) || threads + PRODUCER_THREADS > info.max_threads_per_cta {
        return None;
    }
    let mut loops = pipelines.iter().filter_map(|(l, p)| p.as_ref().map(|p| (l, p)));
    let (l, p) = loops.next()?;
    // (An MMA in flight implies a ring of at least 3 stages: `Pipeline::min_stages`.)
    if loops.next().is_some() || !p.overlap_mma || super::tma::early_refill(p) {
        return None;
    }
    let full = tma.loop_barriers(l)?;
    if p.writes.iter().any(|&w| tma.thread_copy(l, w)) {
        return None;
    }
    // The loop at the top level, and before it nothing the producer must not run.
    let top = &k.blocks[k.body].insts;
    let at = top.iter().position(|&i| i == l)?;
    // A scalar, or a tile value computed inside its consumer.
    let scalar_or_fused = |i: Inst| k.insts[i].result.is_some_and(|r| matches!(k.values[r].ty, Type::Scalar(_)) || fusion.is_fused(r));
    let harmless = |i: Inst| {
        let inst = &k.insts[i];
        match &inst.op {
            Op::TmemAlloc { .. } | Op::TmemRelinquish => true,
            // A register-only accumulator set from a scalar: registers of the producer's own
            // (never read); anything else would read or write memory the consumers share.
            Op::WriteVar(v, x) => roles.is_register_only(*v) && super::var_roles::is_splat(k, *x),
            // A scalar load (a chunk table's entry) reads; a tile load or store is CTA-wide work.
            Op::Load { .. } => matches!(inst.result.map(|r| k.values[r].ty), Some(Type::Scalar(_))),
            Op::Store { .. } | Op::ReadVar(_) | Op::Mma { .. } | Op::For { .. } | Op::TmemDealloc { .. } => false,
            _ => scalar_or_fused(i),
        }
    };
    if !top[..at].iter().all(|&i| harmless(i)) {
        return None;
    }
    // The body: the main loop of a matrix product — scalars, the pipelined writes and MMAs of
    // ring stages into register accumulators. Nothing else writes shared memory, so the stages'
    // hand-back is the only ordering the consumers need (no CTA barrier per iteration).
    let Op::For { body, .. } = k.insts[l].op else { return None };
    let ring = |v| p.vars.contains(&v);
    let main_loop = k.blocks[body].insts.iter().all(|&i| match &k.insts[i].op {
        Op::WriteVar(..) => p.writes.contains(&i),
        Op::Mma { dst, a, b, .. } => roles.accumulator(*dst).is_some() && ring(a.var) && ring(b.var),
        Op::Store { .. } | Op::ReadVar(_) | Op::For { .. } => false,
        // A tile load is a pipelined write's source (fused into it, issued by the producer).
        _ => scalar_or_fused(i),
    });
    if !main_loop {
        return None;
    }
    // Room for `empty[0 .. S]` after the loop's `full` barriers, inside the header.
    let empty = full + 8 * p.stages;
    if empty + 8 * p.stages > header_bytes {
        return None;
    }
    // The consumers' registers must hold their accumulators (all of them, as if live at once)
    // and the rest; otherwise ptxas would fail (or spill) where the single-role kernel builds.
    let (entry, consumer) = register_split(info, threads);
    let floats: u32 = k.vars.keys().filter_map(|v| roles.accumulator(v)).map(|d| d.floats_per_thread()).sum();
    if floats + CONSUMER_HEADROOM > consumer {
        return None;
    }
    Some(WarpSpecialization { loop_inst: l, consumer_threads: threads, entry_registers: entry, consumer_registers: consumer, empty_barriers: empty })
}
