//! The per-target half of code generation: what differs between `sm_90a` ([`super::sm90`]) and
//! `sm_100a` ([`super::sm100`]) is one [`Lowering`] implementation each, chosen once per kernel
//! (`backend::compile_kernel`); the core ([`super::emit`] and the op-family files) calls it at the few places
//! where the targets differ — matrix products, tensor-memory variables and the TMEM lifecycle.

use crate::ir::{Inst, MmaOperand, Value, Var};

use super::emit::Codegen;
use super::BackendError;

/// Target-specific lowering of the operations whose code depends on the architecture.
pub(crate) trait Lowering: Sync {
    /// Entry code after parameters are bound (e.g. barrier initialisation).
    fn prologue(&self, cg: &mut Codegen<'_, '_>) -> Result<(), BackendError>;
    /// `Mma`: `dst (+|-)= a @ b` or `dst = (-)a @ b`.
    fn mma(&self, cg: &mut Codegen<'_, '_>, i: Inst, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), BackendError>;
    /// `ReadVar` of a `tmem` variable into the result tile of `i`.
    fn read_tmem_var(&self, cg: &mut Codegen<'_, '_>, i: Inst, v: Var) -> Result<(), BackendError>;
    /// `WriteVar` of a tile into a `tmem` variable.
    fn write_tmem_var(&self, cg: &mut Codegen<'_, '_>, v: Var, x: Value) -> Result<(), BackendError>;
    /// `TmemAlloc`.
    fn tmem_alloc(&self, cg: &mut Codegen<'_, '_>, columns: u32) -> Result<(), BackendError>;
    /// `TmemRelinquish`.
    fn tmem_relinquish(&self, cg: &mut Codegen<'_, '_>) -> Result<(), BackendError>;
    /// `TmemDealloc`.
    fn tmem_dealloc(&self, cg: &mut Codegen<'_, '_>, columns: u32) -> Result<(), BackendError>;
}
