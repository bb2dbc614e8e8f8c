//! tcgen05 synchronisation: tcgen05 fences and the MMA completion mbarrier (the proxy fence is
//! in [`super::super::barrier`], the mbarrier operations in [`super::super::mbarrier`])
//! (blackwell.md §1.5, §2.5, §5.2 for the intrinsic names).

use inkwell::values::PointerValue;

use super::super::emit::Codegen;
use super::super::BackendError;
use super::{require_tcgen05, MBAR_OFFSET};

impl<'ctx> Codegen<'ctx, '_> {

    /// `tcgen05.fence::before_thread_sync`.
    pub fn tc_fence_before(&self) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.fence")?;
        self.call("llvm.nvvm.tcgen05.fence.before.thread.sync", None, &[])?;
        Ok(())
    }

    /// `tcgen05.fence::after_thread_sync`.
    pub fn tc_fence_after(&self) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.fence")?;
        self.call("llvm.nvvm.tcgen05.fence.after.thread.sync", None, &[])?;
        Ok(())
    }

    /// The MMA completion mbarrier in the shared-memory header.
    pub fn mbar(&self) -> Result<PointerValue<'ctx>, BackendError> {
        self.smem_at(self.i32(MBAR_OFFSET as i32))
    }

    /// Thread 0 initialises the mbarrier with an arrival count of 1; the caller's barrier that
    /// follows publishes it. The phase slot starts at 0 in every thread.
    pub fn mbar_init(&mut self) -> Result<(), BackendError> {
        let slot = self.entry_alloca(self.ctx.i32_type().into(), "mma.phase")?;
        self.b.build_store(slot, self.i32(0))?;
        self.mma_phase = Some(slot);
        let bar = self.mbar()?;
        self.on_thread0(&mut |cg| cg.mbarrier_init(bar, 1))
    }

    /// Every thread waits for the mbarrier's current phase to complete (`try_wait.parity` in a
    /// loop), flips its phase bit, re-converges its warp and orders later tcgen05 ops after the
    /// wait.
    pub fn mbar_wait(&mut self) -> Result<(), BackendError> {
        let slot = self.mma_phase.ok_or_else(|| BackendError::Invalid("MMA completion barrier used before its initialisation".into()))?;
        let phase = self.b.build_load(self.ctx.i32_type(), slot, "phase")?.into_int_value();
        let bar = self.mbar()?;
        self.mbarrier_wait(bar, phase)?;
        let flipped = self.b.build_xor(phase, self.i32(1), "phase.next")?;
        self.b.build_store(slot, flipped)?;
        self.warp_sync()?;
        self.tc_fence_after()
    }
}
