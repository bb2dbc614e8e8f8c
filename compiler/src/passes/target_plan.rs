//! The per-target planning passes, run from the pipeline driver ([`crate::frontend`]) for every
//! kernel and every target of the build: fusion ([`super::fuse`]), the shared-memory plan with
//! its budget ([`super::smem_plan`], E0405), a declared residency's checks
//! ([`super::residency`]) and barrier placement ([`super::barriers`]). The back
//! end takes their results ([`TargetPlan`]) as input and plans nothing itself, so `tilec check`
//! reports every budget error `tilec build` would hit.

use cranelift_entity::SecondaryMap;

use crate::diag::Diagnostic;
use crate::ir::validate::Validated;
use crate::ir::{Kernel, Space};
use crate::layout::swizzle::PERIOD_ALIGN;
use crate::target::{Target, TargetInfo};

use super::bank_pad;
use super::barriers::{self, Barriers};
use super::fuse::{self, Fusion};
use super::pipeline;
use super::residency;
use super::tma::{self, TmaPlan};
use super::var_roles::VarRoles;
use super::warp_spec::{self, WarpSpecialization};
use super::smem_plan::{self, SmemPlan};

/// Bytes reserved at the start of dynamic shared memory on kernels that use tensor memory: the
/// MMA completion mbarrier (8 B at offset 0) and the TMEM base-address slot (4 B at offset 8),
/// padded to the buffer alignment so the planned region stays aligned.
pub const TCGEN05_HEADER_BYTES: u32 = smem_plan::ALIGN;

/// Everything the back end needs to know about one kernel on one target, besides the IR and the
/// TMEM plan.
#[derive(Clone, Debug)]
pub struct TargetPlan {
    /// The target.
    pub target: Target,
    /// Values computed inside their consumer.
    pub fusion: Fusion,
    /// Byte offsets of every shared-memory buffer, relative to the planned region.
    pub smem: SmemPlan,
    /// Where CTA barriers go.
    pub barriers: Barriers,
    /// Bytes reserved before the planned region ([`TCGEN05_HEADER_BYTES`] or 0).
    pub header_bytes: u32,
    /// Register accumulators, buffer-less ones and core-matrix operand tiles.
    pub roles: VarRoles,
    /// The software-pipelined loops, by `For` instruction ([`pipeline`]).
    pub pipelines: SecondaryMap<crate::ir::Inst, Option<pipeline::Pipeline>>,
    /// Which pipelined loads are TMA copies, and the kernel's tensor maps ([`tma`]).
    pub tma: TmaPlan,
    /// When a declared residency left the loops without a copy ring that the kernel would have
    /// had without it: that plan's CTAs per SM and ring stages (the W0505 lint).
    pub ring_given_up: Option<(u32, u32)>,
    /// A producer warpgroup issuing a TMA loop's copies ([`warp_spec`]), if any.
    pub warp_spec: Option<WarpSpecialization>,
    /// Row pitches of the variables with padded rows ([`bank_pad`]).
    pub pitches: bank_pad::Pitches,
}

impl TargetPlan {
    /// The row pitch in elements of variable `v` if its rows are padded ([`bank_pad`]).
    pub fn pitch_of(&self, v: crate::ir::Var) -> Option<u32> {
        self.pitches[v]
    }

    /// Dynamic shared memory per CTA in bytes: header plus planned region.
    pub fn smem_bytes(&self) -> u32 {
        self.header_bytes + self.smem.bytes
    }

    /// CTAs of `threads` threads that fit on one SM side by side by shared memory and threads:
    /// the SM's shared memory over this plan's bytes plus the driver's per-CTA reservation
    /// (CUDA C++ Programming Guide, "Shared Memory": 1 KiB per CTA on 9.0/10.0), the resident
    /// thread limit and the resident CTA limit of the target. Registers and tensor memory are
    /// not counted ([`super::residency`] checks a declared residency against them).
    pub fn resident_ctas(&self, threads: u32) -> u32 {
        let info = self.target.info();
        let by_smem = info.smem_per_sm / (self.smem_bytes() + info.smem_reserved_per_cta);
        by_smem.min(info.most_resident_ctas(threads))
    }
}

/// Whether kernel `k` on `target` keeps variables in tensor memory (then it needs the header).
pub fn uses_tensor_memory(k: &Kernel, target: &TargetInfo) -> bool {
    target.tmem.is_some() && k.vars.values().any(|d| d.space == Space::Tmem)
}

/// Bytes reserved before the planned region: the tcgen05 MMA mbarrier and TMEM slot where the
/// kernel uses tensor memory, the TMA loops' mbarriers from [`tma::BARRIER_OFFSET`] (room for
/// the most a loop may take: a stage each, or a write each), and, when any tile is swizzled, a
/// whole number of swizzle periods (the pattern is a function of the absolute address).
fn header(k: &Kernel, info: &TargetInfo, tma: &TmaPlan, pipelines: &SecondaryMap<crate::ir::Inst, Option<pipeline::Pipeline>>) -> u32 {
    let mut bytes = if uses_tensor_memory(k, info) { TCGEN05_HEADER_BYTES } else { 0 };
    if !tma.is_empty() {
        let per_loop: u32 = pipelines.iter().filter(|(l, _)| tma.loop_barriers(*l).is_some()).filter_map(|(_, p)| p.as_ref()).map(|p| pipeline::MAX_STAGES.max(p.writes.len() as u32)).sum();
        bytes = bytes.max(tma::BARRIER_OFFSET + 8 * per_loop);
    }
    if tma.any_swizzled() || !tma.is_empty() {
        bytes = bytes.next_multiple_of(PERIOD_ALIGN);
    }
    bytes
}

/// CTAs per SM a software pipeline's ring may bring residency down to in a kernel whose MMA
/// accumulators are registers (wgmma on sm_90a; see [`run`]).
const RESIDENT_ENOUGH: u32 = 2;

/// Runs the per-target passes on a validated kernel whose TMEM plan has been made.
///
/// # Errors
/// E0405 when the shared memory the kernel needs exceeds the target's per-CTA limit.
pub fn run(v: &Validated<'_>, target: Target) -> Result<TargetPlan, Diagnostic> {
    let padded = run_with(v, target, true);
    let Ok(p) = &padded else { return run_with(v, target, false) };
    if p.pitches.values().all(Option::is_none) {
        return padded;
    }
    // Padding is worth a few wavefronts per read, not a resident CTA or a ring stage.
    let plain = run_with(v, target, false)?;
    let threads = v.kernel().threads;
    let stages = |t: &TargetPlan| t.pipelines.values().flatten().map(|p| p.stages).sum::<u32>();
    if p.resident_ctas(threads) < plain.resident_ctas(threads) || stages(p) < stages(&plain) {
        return Ok(plain);
    }
    padded
}

/// [`run`], with rows padded where fragment-order reads conflict ([`bank_pad`]) or not.
fn run_with(v: &Validated<'_>, target: Target, pad: bool) -> Result<TargetPlan, Diagnostic> {
    let k = v.kernel();
    let info = target.info();
    let roles = VarRoles::compute(k, info);
    let fusion = fuse::analyze(k, info, &roles);
    // Software pipelines: the deepest ring whose plan fits the budget (4 stages down to 3 with
    // an MMA left in flight, then 3 down to 1 without); a kernel that does not fit even
    // without one gets the budget error of the plain plan. A loop whose MMAs cannot stay in
    // flight gains only the copies' latency from a deeper ring, so there the ring may not cost
    // a resident CTA per SM: measured on K#1 (H200, B=8 T=2048 H=16), a 3-stage ring at one
    // CTA per SM took 1.97 ms against 1.28 ms with one stage at two.
    let mut pipelines = pipeline::candidates(k, &roles, &fusion);
    let mut tma = tma::plan(k, info, &roles, &fusion, &pipelines);
    let mut header_bytes = header(k, info, &tma, &pipelines);
    let pitches = if pad { bank_pad::plan(k, info, &roles, &fusion, &tma, &pipelines) } else { bank_pad::Pitches::new() };
    let pitch = |v| pitches[v];
    let swizzled = |v| tma.swizzle_of(v);
    let mut chosen = None;
    let mut ring_given_up = None;
    if pipelines.values().any(Option::is_some) {
        let resident = |smem: &SmemPlan| info.smem_per_sm / (header_bytes + smem.bytes + info.smem_reserved_per_cta).max(1);
        let mut fitting = vec![];
        for stages in (1..=pipeline::MAX_STAGES).rev() {
            for p in pipelines.values_mut().flatten() {
                // An MMA in flight needs one stage more; below its minimum a loop falls back
                // to completing every MMA.
                if stages < p.min_stages() {
                    p.overlap_mma = false;
                }
                p.stages = if p.overlap_mma { stages } else { stages.min(pipeline::MAX_STAGES - 1) }.min(p.useful_stages());
            }
            let smem = smem_plan::plan(v, info, &roles, &fusion, &pipelines, &swizzled, &pitch);
            if smem_plan::fits(&smem, header_bytes, info) {
                let overlap = pipelines.values().flatten().any(|p| p.overlap_mma);
                fitting.push((resident(&smem), overlap, smem, pipelines.clone()));
            }
        }
        // A kernel with register MMA accumulators (wgmma on sm_90a) is capped by its registers
        // at two or three CTAs per SM whatever its shared memory allows (state_fwd: 168-193
        // registers, two CTAs), so residency beyond RESIDENT_ENOUGH is not worth a shallower
        // ring there: with one stage, state_fwd issued and awaited its copies in each chunk.
        // Elsewhere — tcgen05 accumulators live in tensor memory, and a kernel without MMAs
        // keeps few registers — shared memory decides, and the ring may not cost a CTA.
        let base = fitting.last().map_or(0, |f| f.0);
        let register_accumulators = k.vars.keys().any(|v| roles.accumulator(v).is_some());
        let base = if register_accumulators { base.min(RESIDENT_ENOUGH) } else { base };
        // A declared `ctas_per_sm(N)` restricts the choice to rings that keep N resident: the
        // same rule among them, else the deepest of them (MMA in flight or not) — the author
        // chose residency over ring depth. N = 1 therefore changes nothing.
        let usual = |f: &(u32, bool, SmemPlan, _)| f.1 || f.0 >= base;
        let pick = match k.residency(target) {
            Some((n, _)) => fitting.iter().position(|f| f.0 >= n && usual(f)).or_else(|| fitting.iter().position(|f| f.0 >= n)),
            None => fitting.iter().position(usual),
        };
        if pick.is_none() && k.residency(target).is_some() {
            ring_given_up = fitting.iter().find(|f| usual(f)).map(|f| (f.0, f.3.values().flatten().map(|p| p.stages).max().unwrap_or(0)));
        }
        if let Some(i) = pick {
            let (_, _, smem, p) = fitting.swap_remove(i);
            pipelines = p;
            chosen = Some(smem);
        }
    }
    let smem = match chosen {
        Some(smem) => smem,
        None => {
            // Without pipelines, no TMA; operand tiles keep their swizzle.
            pipelines = SecondaryMap::new();
            tma = tma::plan(k, info, &roles, &fusion, &pipelines);
            header_bytes = header(k, info, &tma, &pipelines);
            let swz = |v| tma.swizzle_of(v);
            smem_plan::plan(v, info, &roles, &fusion, &pipelines, &swz, &pitch)
        }
    };
    tma.place_barriers(&pipelines);
    smem_plan::check_budget(k, &smem, header_bytes, info, &roles)?;
    residency::check(k, header_bytes + smem.bytes, info, &roles)?;
    let barriers = barriers::run(k, info, &roles, &fusion, &smem, &pipelines, &tma);
    let warp_spec = warp_spec::plan(k, info, &roles, &fusion, &pipelines, &tma, header_bytes);
    Ok(TargetPlan { target, fusion, smem, barriers, header_bytes, roles, pipelines, tma, ring_given_up, warp_spec, pitches })
}
