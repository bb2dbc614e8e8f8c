//! Synchronisation every target has: CTA barriers, warp re-convergence and the proxy fence before
//! the tensor core reads shared memory. The tcgen05 fences and the MMA completion mbarrier are in
//! [`super::sm100::sync`].

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// `bar.sync 0` over the whole CTA — unless the instruction just emitted in this block is
    /// one: two barriers with nothing between them order nothing more than one (an MMA's
    /// closing barrier, the barrier pass's and a refill's often meet).
    pub fn bar_sync(&self) -> Result<(), BackendError> {
        const NAME: &str = "llvm.nvvm.barrier.cta.sync.aligned.all";
        let last = self.b.get_insert_block().and_then(|bb| bb.get_last_instruction());
        let repeated = last.is_some_and(|i| {
            i.get_opcode() == inkwell::values::InstructionOpcode::Call
                && i.get_operand(i.get_num_operands().saturating_sub(1)).and_then(|o| o.value()).is_some_and(|f| f.is_pointer_value() && f.into_pointer_value().get_name().to_str() == Ok(NAME))
        });
        if !repeated {
            self.call(NAME, None, &[self.i32(0).into()])?;
        }
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
