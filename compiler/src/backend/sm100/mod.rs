//! The `sm_100a` lowering (Blackwell): `tcgen05.mma` into tensor-memory accumulators
//! ([`mma`], operands staged through [`crate::layout::staging`] and read by [`descriptors`]),
//! `tcgen05.ld/st` for `tmem` variables ([`tmem_access`], addressed by
//! [`crate::layout::tmem`]), the allocation lifecycle ([`tmem`]) and the fences and completion
//! mbarrier they need ([`sync`]). Accumulators outside tensor memory use `mma.sync`, which
//! sm_100a also has.

pub(crate) mod descriptors;
pub(crate) mod mma;
pub(crate) mod sync;
pub(crate) mod tmem;
pub(crate) mod tmem_access;
pub mod tmem_layout;

use crate::ir::{Inst, MmaOperand, Space, Value, Var};
use crate::target::Target;

use super::emit::Codegen;
use super::lowering::Lowering;
use super::BackendError;

/// Offset of the MMA completion mbarrier in the reserved header
/// ([`crate::passes::target_plan::TCGEN05_HEADER_BYTES`]).
pub const MBAR_OFFSET: u32 = 0;
/// Offset of the TMEM base-address slot in the header.
pub const TMEM_SLOT_OFFSET: u32 = 8;

/// Fails unless `target` has tcgen05; called by every emitter of a tcgen05 instruction (with
/// `-mcpu=sm_100` and no `a`, llc *aborts* on tcgen05 intrinsics: blackwell.md §0).
///
/// # Errors
/// [`BackendError::Tcgen05Target`] naming the target.
pub fn require_tcgen05(target: Target, what: &str) -> Result<(), BackendError> {
    if target.info().mma.tcgen05 {
        Ok(())
    } else {
        Err(BackendError::Tcgen05Target { target: target.name().to_string(), what: what.to_string() })
    }
}

/// The `sm_100a` lowering.
pub(crate) struct Sm100;

impl Lowering for Sm100 {
    fn prologue(&self, cg: &mut Codegen<'_, '_>) -> Result<(), BackendError> {
        if cg.header > 0 {
            cg.tcgen05_prologue()?;
        }
        Ok(())
    }
    fn mma(&self, cg: &mut Codegen<'_, '_>, i: Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError> {
        if cg.k.vars[dst].space != Space::Tmem {
            return cg.mma_sync(dst, a, b, accumulate, negate);
        }
        cg.mma_tcgen05(i, dst, a, b, accumulate, negate)
    }
    fn read_tmem_var(&self, cg: &mut Codegen<'_, '_>, i: Inst, v: Var) -> Result<(), BackendError> {
        cg.read_tmem(i, v)
    }
    fn write_tmem_var(&self, cg: &mut Codegen<'_, '_>, v: Var, x: Value) -> Result<(), BackendError> {
        cg.write_tmem(v, x)
    }
    fn tmem_alloc(&self, cg: &mut Codegen<'_, '_>, columns: u32) -> Result<(), BackendError> {
        cg.tmem_alloc(columns)
    }
    fn tmem_relinquish(&self, cg: &mut Codegen<'_, '_>) -> Result<(), BackendError> {
        cg.tmem_relinquish()
    }
    fn tmem_dealloc(&self, cg: &mut Codegen<'_, '_>, columns: u32) -> Result<(), BackendError> {
        cg.tmem_dealloc(columns)
    }
}
