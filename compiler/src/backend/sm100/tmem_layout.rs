//! Where each TMEM variable lives: the column offsets the back end uses for `base + offset`
//! addressing, and the single allocation's size.
//!
//! The TMEM planner (`passes::tmem_plan`) owns the real plan (liveness, reuse, the 512-column
//! diagnostic) and inserts the lifecycle instructions. [`TmemLayout`] is the narrow view of it the
//! back end needs. [`TmemLayout::prefix_sums`] is a stand-in planner for IR that did not go through
//! the pass (builder-made test kernels): offsets are prefix sums of [`tmem_columns`] in variable
//! order, no reuse, and the allocation is the next power of two (blackwell.md §4.3).

use cranelift_entity::SecondaryMap;

use crate::ir::{tmem_columns, Inst, InstData, Kernel, Op, Space, Var};

use super::super::BackendError;

/// Column offset of every TMEM variable and the allocation size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TmemLayout {
    /// Column offset of each TMEM variable relative to the allocation's base.
    pub offsets: SecondaryMap<Var, Option<u32>>,
    /// Columns of the single `tcgen05.alloc` (0 when the kernel uses no TMEM).
    pub alloc_columns: u32,
    /// Highest column used + 1 (the placement's extent; must fit in the allocation).
    pub peak_columns: u32,
}

impl TmemLayout {
    /// Offsets by prefix sums over the kernel's TMEM variables in declaration order.
    ///
    /// # Errors
    /// [`BackendError::Invalid`] when the sum exceeds 512 columns.
    pub fn prefix_sums(k: &Kernel) -> Result<TmemLayout, BackendError> {
        let mut out = TmemLayout::default();
        let mut next = 0u32;
        for (v, d) in k.vars.iter() {
            if d.space != Space::Tmem {
                continue;
            }
            let (_, cols) = d.ty.shape().ok_or_else(|| BackendError::Invalid(format!("TMEM variable {} is not a tile", d.name)))?;
            out.offsets[v] = Some(next);
            next += tmem_columns(d.ty.elem(), cols);
        }
        if next > 512 {
            return Err(BackendError::Invalid(format!("TMEM variables need {next} columns; the hardware has 512")));
        }
        out.peak_columns = next;
        out.alloc_columns = if next == 0 { 0 } else { next.next_power_of_two().max(32) };
        Ok(out)
    }

    /// The back end's view of the TMEM planner's result.
    pub fn from_plan(p: &crate::passes::tmem_plan::TmemPlan) -> TmemLayout {
        TmemLayout { offsets: p.offsets.clone(), alloc_columns: p.alloc_columns, peak_columns: p.extent }
    }

    /// The offset of `v`.
    ///
    /// # Errors
    /// [`BackendError::Invalid`] when the plan has no offset for it.
    pub fn offset(&self, v: Var, name: &str) -> Result<u32, BackendError> {
        self.offsets.get(v).copied().flatten().ok_or_else(|| BackendError::Invalid(format!("TMEM plan has no offset for variable {name}")))
    }
}

/// Inserts the TMEM lifecycle the planner would insert (alloc + relinquish first, dealloc last, at
/// the kernel's top level) into a kernel that has TMEM variables and no lifecycle yet, and returns
/// the prefix-sum layout. For builder-made kernels and until the planner pass runs in the driver.
///
/// # Errors
/// As [`TmemLayout::prefix_sums`].
pub fn insert_lifecycle(k: &mut Kernel) -> Result<TmemLayout, BackendError> {
    let layout = TmemLayout::prefix_sums(k)?;
    let mut has = false;
    k.walk(|i| has |= matches!(k.insts[i].op, Op::TmemAlloc { .. }));
    if layout.alloc_columns == 0 || has {
        return Ok(layout);
    }
    let cols = layout.alloc_columns;
    let mk = |k: &mut Kernel, op: Op| -> Inst { k.insts.push(InstData { op, result: None }) };
    let a = mk(k, Op::TmemAlloc { columns: cols });
    let r = mk(k, Op::TmemRelinquish);
    let d = mk(k, Op::TmemDealloc { columns: cols });
    let body = k.body;
    let insts = &mut k.blocks[body].insts;
    insts.insert(0, r);
    insts.insert(0, a);
    insts.push(d);
    Ok(layout)
}
