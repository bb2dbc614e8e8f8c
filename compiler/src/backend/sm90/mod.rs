//! The `sm_90a` lowering (Hopper; runs on the H200). There is no tensor memory: a `tmem`
//! accumulator that fits the register budget lives in registers as wgmma fragments and its
//! matrix products are `wgmma.mma_async` ([`wgmma`]; the rule is
//! `passes::var_roles::VarRoles::accumulators`); every other `tmem` variable is a shared-memory
//! tile handled like any other variable, with matrix products through `mma.sync`
//! ([`mma_sync`]). The TMEM lifecycle instructions emit nothing.

pub(crate) mod frag_eval;
pub(crate) mod frag_reduce;
pub(crate) mod frag_store;
pub(crate) mod mma_sync;
pub(crate) mod wgmma;

use crate::ir::{Inst, MmaOperand, Value, Var};

use super::emit::Codegen;
use super::lowering::Lowering;
use super::BackendError;

/// The `sm_90a` lowering.
pub(crate) struct Sm90;

impl Lowering for Sm90 {
    fn prologue(&self, cg: &mut Codegen<'_, '_>) -> Result<(), BackendError> {
        cg.alloc_fragments()
    }
    fn mma(&self, cg: &mut Codegen<'_, '_>, i: Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        if cg.accumulator(dst).is_some() {
            return cg.mma_wgmma(i, dst, a, b, accumulate, negate);
        }
        cg.mma_sync(dst, a, b, accumulate, negate)
    }
    fn read_tmem_var(&self, cg: &mut Codegen<'_, '_>, i: Inst, v: Var) -> Result<(), BackendError> {
        if cg.tp.roles.is_register_only(v) {
            let res = cg.k.insts[i].result.ok_or_else(|| BackendError::Invalid("ReadVar without a result".into()))?;
            if cg.res_elem(res) != crate::ir::Elem::F32 {
                return Err(BackendError::Invalid("a register accumulator read into a non-f32 tile".into()));
            }
            let buf = cg.value_buf(res)?;
            return cg.fragments_to_tile(v, buf);
        }
        if cg.accumulator(v).is_some() {
            cg.fragments_to_smem(v)?;
        }
        cg.read_smem_var(i, v)
    }
    fn write_tmem_var(&self, cg: &mut Codegen<'_, '_>, v: Var, x: Value) -> Result<(), BackendError> {
        if cg.accumulator(v).is_some() && crate::passes::var_roles::is_splat(cg.k, x) {
            return cg.fragments_fill(v, x);
        }
        cg.write_smem_var(v, x)?;
        if cg.accumulator(v).is_some() {
            cg.fragments_from_smem(v)?;
        }
        Ok(())
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
