//! mbarriers in shared memory (PTX ISA 9.7.13.15 "mbarrier"): initialisation by one thread, the
//! transaction-count arrival a TMA copy completes against, and the phase-parity wait. Used by the
//! tcgen05 MMA completion barrier ([`super::sm100::sync`]) and the TMA rings of pipelined loops
//! ([`super::tma`]).

use inkwell::values::{IntValue, PointerValue};

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// `mbarrier.init.shared.b64 [bar], count` and the fence that publishes it to the async
    /// proxy; the caller guards it to one thread and follows it with a CTA barrier.
    pub fn mbarrier_init(&self, bar: PointerValue<'ctx>, count: u32) -> Result<(), BackendError> {
        self.call("llvm.nvvm.mbarrier.init.shared", None, &[bar.into(), self.i32(count as i32).into()])?;
        self.call("llvm.nvvm.fence.mbarrier_init.release.cluster", None, &[])?;
        Ok(())
    }

    /// `mbarrier.arrive.expect_tx`: one arrival that also expects `bytes` of asynchronous
    /// transactions (the TMA copies issued next complete them).
    pub fn mbarrier_arrive_expect_tx(&self, bar: PointerValue<'ctx>, bytes: u32) -> Result<(), BackendError> {
        self.call("llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta", Some(self.ctx.i64_type().into()), &[bar.into(), self.i32(bytes as i32).into()])?;
        Ok(())
    }

    /// Spins on `mbarrier.try_wait.parity` until the phase of parity `parity` (i32, 0 or 1) of
    /// `bar` has completed.
    pub fn mbarrier_wait(&mut self, bar: PointerValue<'ctx>, parity: IntValue<'ctx>) -> Result<(), BackendError> {
        let wait = self.ctx.append_basic_block(self.func, "mbar.wait");
        let done = self.ctx.append_basic_block(self.func, "mbar.done");
        self.b.build_unconditional_branch(wait)?;
        self.b.position_at_end(wait);
        let ok = self.call("llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", Some(self.ctx.bool_type().into()), &[bar.into(), parity.into()])?;
        self.b.build_conditional_branch(ok.into_int_value(), done, wait)?;
        self.b.position_at_end(done);
        Ok(())
    }
}
