//! The `sm_90a` lowering (Hopper; runs on the H200): matrix products with `mma.sync`
//! ([`mma_sync`]); there is no tensor memory, so `tmem` variables are shared-memory f32 tiles
//! handled like any other variable and the TMEM lifecycle instructions emit nothing.

pub(crate) mod mma_sync;

use crate::ir::{Inst, MmaOperand, Value, Var};

use super::emit::Codegen;
use super::lowering::Lowering;
use super::BackendError;

/// The `sm_90a` lowering.
pub(crate) struct Sm90;

impl Lowering for Sm90 {
    fn prologue(&self, _cg: &mut Codegen<'_, '_>) -> Result<(), BackendError> {
        Ok(())
    }
    fn mma(&self, cg: &mut Codegen<'_, '_>, _i: Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        cg.mma_sync(dst, a, b, accumulate, negate)
    }
    fn read_tmem_var(&self, cg: &mut Codegen<'_, '_>, i: Inst, v: Var) -> Result<(), BackendError> {
        cg.read_smem_var(i, v)
    }
    fn write_tmem_var(&self, cg: &mut Codegen<'_, '_>, v: Var, x: Value) -> Result<(), BackendError> {
        cg.write_smem_var(v, x)
    }
    fn tmem_alloc(&self, _cg: &mut Codegen<'_, '_>, _columns: u32) -> Result<(), BackendError> {
        Ok(())
    }
    fn tmem_relinquish(&self, _cg: &mut Codegen<'_, '_>) -> Result<(), BackendError> {
        Ok(())
    }
    fn tmem_dealloc(&self, _cg: &mut Codegen<'_, '_>, _columns: u32) -> Result<(), BackendError> {
        Ok(())
    }
}
