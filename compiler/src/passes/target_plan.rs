//! The per-target planning passes, run from the pipeline driver ([`crate::frontend`]) for every
//! kernel and every target of the build: fusion ([`super::fuse`]), the shared-memory plan with
//! its budget ([`super::smem_plan`], E0405) and barrier placement ([`super::barriers`]). The back
//! end takes their results ([`TargetPlan`]) as input and plans nothing itself, so `tilec check`
//! reports every budget error `tilec build` would hit.

use cranelift_entity::SecondaryMap;

use crate::diag::Diagnostic;
use crate::ir::validate::Validated;
use crate::ir::{Elem, Kernel, Op, Space, Var};
use crate::layout::wgmma::{Distribution, WARPGROUP};
use crate::target::{Target, TargetInfo};

use super::barriers::{self, Barriers};
use super::fuse::{self, Fusion};
use super::pipeline;
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
    /// The register-resident MMA accumulators and how their fragments are spread
    /// ([`register_accumulator`]).
    pub accumulators: SecondaryMap<Var, Option<Distribution>>,
    /// The shared-memory variables kept in the core-matrix layout ([`tiled_operand`]).
    pub tiled: SecondaryMap<Var, bool>,
    /// The software-pipelined loops, by `For` instruction ([`pipeline`]).
    pub pipelines: SecondaryMap<crate::ir::Inst, Option<pipeline::Pipeline>>,
}

impl TargetPlan {
    /// Dynamic shared memory per CTA in bytes: header plus planned region.
    pub fn smem_bytes(&self) -> u32 {
        self.header_bytes + self.smem.bytes
    }
}

/// Whether variable `v` lives in shared memory on `target`: every variable does, except `tmem`
/// ones on a target that has tensor memory and register accumulators that need no buffer
/// ([`register_only`]). The one statement of that rule for the passes.
pub fn in_shared_memory(k: &Kernel, v: Var, target: &TargetInfo) -> bool {
    (k.vars[v].space != Space::Tmem || target.tmem.is_none()) && !register_only(k, v, target)
}

/// Registers per thread one register-resident accumulator may take: 128 floats leave room for
/// addresses and operands under the 255-register limit (a 128 x 128 tile on one warpgroup).
pub const MAX_ACCUMULATOR_FLOATS: u32 = 128;

/// How `v` is held in registers when it is a register-resident MMA accumulator on `target`:
/// an f32 `tmem` variable that some `Mma` writes, on a target with `wgmma` and without tensor
/// memory, in a kernel of whole warpgroups, whose fragments ([`Distribution`]) take at most
/// [`MAX_ACCUMULATOR_FLOATS`] per thread. Its MMAs are `wgmma` with the old value as the first
/// step's input (the numerics of [`crate::interp`] follow this same rule); its shared-memory
/// buffer is where reads and writes meet it. `None` otherwise. The one statement of the rule.
pub fn register_accumulator(k: &Kernel, v: Var, target: &TargetInfo) -> Option<Distribution> {
    let d = &k.vars[v];
    if !target.mma.wgmma || target.tmem.is_some() || d.space != Space::Tmem || d.ty.elem() != Elem::F32 || k.threads % WARPGROUP != 0 {
        return None;
    }
    let mut written_by_mma = false;
    k.walk(|i| written_by_mma |= matches!(k.insts[i].op, Op::Mma { dst, .. } if dst == v));
    let (m, n) = d.ty.shape()?;
    let dist = Distribution::new(m, n, k.threads / WARPGROUP)?;
    (written_by_mma && dist.floats_per_thread() <= MAX_ACCUMULATOR_FLOATS).then_some(dist)
}

/// Whether register-resident accumulator `v` needs no shared-memory buffer at all: every write
/// of it is a broadcast scalar (`zeros`, `full`: set in registers) and every read is stored
/// straight to a global tensor (`store t[...] = v`, written from the fragments). The
/// accumulator of a GEMM main loop is this: its smem buffer would cost `M·N·4` bytes for nothing.
pub fn register_only(k: &Kernel, v: Var, target: &TargetInfo) -> bool {
    if register_accumulator(k, v, target).is_none() {
        return false;
    }
    let mut uses: std::collections::HashMap<crate::ir::Value, Vec<crate::ir::Inst>> = std::collections::HashMap::new();
    k.walk(|i| {
        for a in k.inst_args(i) {
            uses.entry(a).or_default().push(i);
        }
    });
    let mut ok = true;
    k.walk(|i| match &k.insts[i].op {
        Op::WriteVar(w, x) if *w == v => ok &= is_splat(k, *x),
        Op::ReadVar(r) if *r == v => {
            let res = k.insts[i].result;
            let u = res.and_then(|r| uses.get(&r)).map(Vec::as_slice).unwrap_or(&[]);
            ok &= matches!(u, [s] if matches!(k.insts[*s].op, Op::Store { value, .. } if Some(value) == res));
        }
        _ => {}
    });
    ok
}

/// Whether tile value `x` is a scalar broadcast (`Splat`), possibly converted.
pub fn is_splat(k: &Kernel, x: crate::ir::Value) -> bool {
    match k.values[x].def {
        crate::ir::ValueDef::Result(d) => match k.insts[d].op {
            Op::Splat(_) => true,
            Op::Cast(y, _) => is_splat(k, y),
            _ => false,
        },
        crate::ir::ValueDef::LoopIndex(_) => false,
    }
}

/// Whether shared-memory variable `v` is kept in the 8 x 8 core-matrix layout that wgmma reads
/// directly ([`crate::layout::staging::kmajor_offset`] with the variable's column count as the
/// K extent): a bf16/f16 `smem` tile of whole core matrices (rows and columns multiples of 8),
/// on a target with wgmma and without tensor memory, that is only ever read as an operand of
/// MMAs into register-resident accumulators and written whole (`WriteVar`). Its MMAs point
/// their descriptors into its buffer (K-major where its columns are the product's K, MN-major
/// otherwise) instead of staging a copy. The one statement of the rule.
pub fn tiled_operand(k: &Kernel, v: Var, target: &TargetInfo) -> bool {
    let d = &k.vars[v];
    let whole_cores = d.ty.shape().is_some_and(|(r, c)| r % 8 == 0 && c % 8 == 0);
    if !target.mma.wgmma || target.tmem.is_some() || d.space != Space::Smem || !matches!(d.ty.elem(), Elem::Bf16 | Elem::F16) || !whole_cores {
        return false;
    }
    let (mut ok, mut used) = (true, false);
    k.walk(|i| {
        let (reads, _) = k.inst_vars(i);
        if !reads.contains(&v) {
            return;
        }
        used = true;
        ok &= match k.insts[i].op {
            Op::Mma { dst, a, b, .. } => dst != v && (a.var == v || b.var == v) && register_accumulator(k, dst, target).is_some(),
            _ => false,
        };
    });
    ok && used
}

/// Whether kernel `k` on `target` keeps variables in tensor memory (then it needs the header).
pub fn uses_tensor_memory(k: &Kernel, target: &TargetInfo) -> bool {
    target.tmem.is_some() && k.vars.values().any(|d| d.space == Space::Tmem)
}

/// Runs the per-target passes on a validated kernel whose TMEM plan has been made.
///
/// # Errors
/// E0405 when the shared memory the kernel needs exceeds the target's per-CTA limit.
pub fn run(v: &Validated<'_>, target: Target) -> Result<TargetPlan, Diagnostic> {
    let k = v.kernel();
    let info = target.info();
    let fusion = fuse::analyze(k, info);
    let header_bytes = if uses_tensor_memory(k, info) { TCGEN05_HEADER_BYTES } else { 0 };
    // Software pipelines: the deepest ring whose plan fits the budget (4 stages down to 3 with
    // an MMA left in flight, then 3 down to 2 without); a kernel that does not fit even
    // without one gets the budget error of the plain plan.
    let mut pipelines = pipeline::candidates(k, info, &fusion);
    let mut chosen = None;
    if pipelines.values().any(Option::is_some) {
        for stages in (2..=pipeline::MAX_STAGES).rev() {
            for p in pipelines.values_mut().flatten() {
                // An MMA in flight needs one stage more; below its minimum a loop falls back
                // to completing every MMA.
                if stages < p.min_stages() {
                    p.overlap_mma = false;
                }
                p.stages = if p.overlap_mma { stages } else { stages.min(pipeline::MAX_STAGES - 1) };
            }
            let smem = smem_plan::plan(v, info, &fusion, &pipelines);
            if smem_plan::check_budget(k, &smem, header_bytes, info).is_ok() {
                chosen = Some(smem);
                break;
            }
        }
    }
    let smem = match chosen {
        Some(smem) => smem,
        None => {
            pipelines = SecondaryMap::new();
            smem_plan::plan(v, info, &fusion, &pipelines)
        }
    };
    smem_plan::check_budget(k, &smem, header_bytes, info)?;
    let barriers = barriers::run(k, &fusion);
    let (mut accumulators, mut tiled) = (SecondaryMap::new(), SecondaryMap::new());
    for v in k.vars.keys() {
        accumulators[v] = register_accumulator(k, v, info);
        tiled[v] = tiled_operand(k, v, info);
    }
    Ok(TargetPlan { target, fusion, smem, barriers, header_bytes, accumulators, tiled, pipelines })
}
