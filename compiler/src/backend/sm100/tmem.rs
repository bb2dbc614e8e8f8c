//! Tensor memory on `sm_100a`: the allocation lifecycle (one alloc + relinquish by warp 0 at the
//! planner's `TmemAlloc`, one dealloc by warp 0 at `TmemDealloc`; blackwell.md §4.3).
//! `ReadVar` / `WriteVar` of TMEM variables (`tcgen05.ld/st`) are in [`super::tmem_access`].
//!
//! On targets without tensor memory the lifecycle instructions emit nothing and TMEM variables
//! are shared-memory tiles (`super::super::sm90`).

use inkwell::values::{IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use crate::ir::{Elem, Value};

use super::super::emit::Codegen;
use super::super::BackendError;
use super::descriptors::check_alloc_columns;
use super::{require_tcgen05, TMEM_SLOT_OFFSET};

impl<'ctx> Codegen<'ctx, '_> {
    /// Entry code of a kernel that uses tensor memory: initialise the MMA mbarrier (when the
    /// kernel has MMAs) and publish it with a CTA barrier.
    pub fn tcgen05_prologue(&mut self) -> Result<(), BackendError> {
        let mut has_mma = false;
        self.k.walk(|i| has_mma |= matches!(self.k.insts[i].op, crate::ir::Op::Mma { .. }));
        if has_mma {
            self.mbar_init()?;
            self.bar_sync()?;
        }
        Ok(())
    }

    pub(crate) fn warp0(&self) -> Result<IntValue<'ctx>, BackendError> {
        Ok(self.b.build_int_compare(IntPredicate::EQ, self.warp, self.i32(0), "w0")?)
    }

    /// A TMEM pointer (address space 6) for a 32-bit TMEM address.
    pub fn tmem_ptr(&self, addr: IntValue<'ctx>) -> Result<PointerValue<'ctx>, BackendError> {
        Ok(self.b.build_int_to_ptr(addr, self.ctx.ptr_type(AddressSpace::from(6u16)), "t")?)
    }

    /// The TMEM base address (after the allocation).
    pub fn tmem_base(&self) -> Result<IntValue<'ctx>, BackendError> {
        self.tmem_base.ok_or_else(|| BackendError::Invalid("TMEM accessed before the TmemAlloc instruction".into()))
    }

    /// Warp 0 allocates `columns`; everyone reads the base address after fence/barrier/fence.
    pub fn tmem_alloc(&mut self, columns: u32) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.alloc")?;
        check_alloc_columns(columns)?;
        if columns < self.tmem.peak_columns {
            return Err(BackendError::Invalid(format!("TmemAlloc of {columns} columns is below the plan's peak of {}", self.tmem.peak_columns)));
        }
        let slot = self.smem_at(self.i32(TMEM_SLOT_OFFSET as i32))?;
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.call("llvm.nvvm.tcgen05.alloc.shared.cg1", None, &[slot.into(), cg.i32(columns as i32).into()])?;
            Ok(())
        })?;
        self.tc_fence_before()?;
        self.bar_sync()?;
        self.tc_fence_after()?;
        let base = self.b.build_load(self.ctx.i32_type(), slot, "tmem.base")?.into_int_value();
        self.tmem_base = Some(base);
        Ok(())
    }

    /// Warp 0 gives up the allocation permit (no further allocs by this CTA).
    pub fn tmem_relinquish(&mut self) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.relinquish_alloc_permit")?;
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.call("llvm.nvvm.tcgen05.relinq.alloc.permit.cg1", None, &[])?;
            Ok(())
        })
    }

    /// All TMEM users done (fence + barrier), then warp 0 frees exactly what it allocated.
    pub fn tmem_dealloc(&mut self, columns: u32) -> Result<(), BackendError> {
        require_tcgen05(self.target, "tcgen05.dealloc")?;
        check_alloc_columns(columns)?;
        let base = self.tmem_base()?;
        self.tc_fence_before()?;
        self.bar_sync()?;
        let w0 = self.warp0()?;
        self.if_then(w0, &mut |cg| {
            cg.tc_fence_after()?;
            let p = cg.tmem_ptr(base)?;
            cg.call("llvm.nvvm.tcgen05.dealloc.cg1", None, &[p.into(), cg.i32(columns as i32).into()])?;
            Ok(())
        })
    }

    /// Element type of a value.
    pub fn res_elem(&self, v: Value) -> Elem {
        self.k.values[v].ty.elem()
    }
}
