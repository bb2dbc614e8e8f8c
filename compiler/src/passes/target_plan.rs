//! The per-target planning passes, run from the pipeline driver ([`crate::frontend`]) for every
//! kernel and every target of the build: fusion ([`super::fuse`]), the shared-memory plan with
//! its budget ([`super::smem_plan`], E0405) and barrier placement ([`super::barriers`]). The back
//! end takes their results ([`TargetPlan`]) as input and plans nothing itself, so `tilec check`
//! reports every budget error `tilec build` would hit.

use crate::diag::Diagnostic;
use crate::ir::validate::Validated;
use crate::ir::{Kernel, Space, Var};
use crate::target::{Target, TargetInfo};

use super::barriers::{self, Barriers};
use super::fuse::{self, Fusion};
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
}

impl TargetPlan {
    /// Dynamic shared memory per CTA in bytes: header plus planned region.
    pub fn smem_bytes(&self) -> u32 {
        self.header_bytes + self.smem.bytes
    }
}

/// Whether variable `v` lives in shared memory on `target`: every variable does, except `tmem`
/// ones on a target that has tensor memory. The one statement of that rule for the passes.
pub fn in_shared_memory(k: &Kernel, v: Var, target: &TargetInfo) -> bool {
    k.vars[v].space != Space::Tmem || target.tmem.is_none()
}

/// Whether kernel `k` on `target` keeps variables in tensor memory (then it needs the header).
pub fn uses_tensor_memory(k: &Kernel, target: &TargetInfo) -> bool {
    k.vars.keys().any(|v| !in_shared_memory(k, v, target))
}

/// Runs the per-target passes on a validated kernel whose TMEM plan has been made.
///
/// # Errors
/// E0405 when the shared memory the kernel needs exceeds the target's per-CTA limit.
pub fn run(v: &Validated<'_>, target: Target) -> Result<TargetPlan, Diagnostic> {
    let k = v.kernel();
    let info = target.info();
    let fusion = fuse::analyze(k, info);
    let smem = smem_plan::plan(v, info, &fusion);
    let header_bytes = if uses_tensor_memory(k, info) { TCGEN05_HEADER_BYTES } else { 0 };
    smem_plan::check_budget(k, &smem, header_bytes, info)?;
    let barriers = barriers::run(k, &fusion);
    Ok(TargetPlan { target, fusion, smem, barriers, header_bytes })
}
