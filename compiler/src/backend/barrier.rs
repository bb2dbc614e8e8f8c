//! Synchronisation every target has: CTA barriers, warp re-convergence and the proxy fence before
//! the tensor core reads shared memory. The tcgen05 fences and the MMA completion mbarrier are in
//! [`super::sm100::sync`].

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// `bar.sync 0` over the whole CTA.
    pub fn bar_sync(&self) -> Result<(), BackendError> {
        self.call("llvm.nvvm.barrier.cta.sync.aligned.all", None, &[self.i32(0).into()])?;
        Ok(())
    }

    /// `bar.warp.sync 0xffffffff`: re-converge the warp before `.sync.aligned` tcgen05 ops.
    pub fn warp_sync(&self) -> Result<(), BackendError> {
        self.call("llvm.nvvm.bar.warp.sync", None, &[self.i32(-1).into()])?;
        Ok(())
    }

    /// `fence.proxy.async.shared::cta`: generic-proxy shared-memory writes become visible to
    /// the async proxy (tcgen05 or wgmma reading operands through descriptors).
    pub fn fence_proxy_async(&self) -> Result<(), BackendError> {
        self.call("llvm.nvvm.fence.proxy.async.shared_cta", None, &[])?;
        Ok(())
    }
}
