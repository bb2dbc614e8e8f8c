//! The TMEM column planner (design.md, "The TMEM planner contract").
//!
//! What it does: gives every tensor-memory variable a fixed column offset such that co-live
//! buffers never overlap (buffers with disjoint live ranges may share columns), sizes one
//! allocation as the smallest legal column count covering the placement (a power of two in
//! 32..=512, [`legal_alloc_columns`]), and inserts exactly one `tcgen05.alloc`, one
//! `tcgen05.relinquish_alloc_permit` and one `tcgen05.dealloc` at the kernel's top level:
//! alloc and relinquish first, dealloc last.
//!
//! What it does not do: it does not place buffers in lane halves (a 64-row buffer is charged
//! all 128 lanes, which is conservative), and it does not reorder code to shorten live ranges.
//!
//! Errors: if the buffers live at some program point need more than 512 columns together, the
//! kernel is rejected with E0402 naming every buffer live at that point, its span and column
//! count, the sum and the limit. This is the compile-time form of the load-time failure of
//! state-spaces/mamba#904 ("Required: 544, Hardware limit: 512").
//!
//! Preconditions: the kernel is valid IR without lifecycle instructions. Afterwards the
//! validator's lifecycle check holds.

use cranelift_entity::SecondaryMap;

use super::interval_plan::{plan, Request};
use super::liveness::{liveness, Interval};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{tmem_columns, InstData, Kernel, Op, Space, Var};

/// Columns of tensor memory per SM (128 lanes x 512 columns of 32-bit cells; blackwell.md §1.1).
/// Equal to sm_100a's [`crate::target::TmemInfo::columns`] (tested): the planner runs once per
/// kernel, for the one target that has tensor memory.
pub const TMEM_COLUMNS: u32 = 512;

/// Column offsets are aligned to this many columns (MMA accumulators start on 16-column
/// boundaries, keeping every N-split piece of an MMA aligned).
pub const TMEM_ALIGN: u32 = 16;

/// The smallest legal `tcgen05.alloc` column count covering `cols`: a power of two in 32..=512
/// (PTX ISA, tcgen05.alloc: "nCols must be a power of 2 in the range [32, 512]"; blackwell.md
/// §1.2). `None` when `cols` exceeds 512.
pub fn legal_alloc_columns(cols: u32) -> Option<u32> {
    if cols > TMEM_COLUMNS {
        return None;
    }
    Some(cols.max(32).next_power_of_two())
}

/// One placed TMEM buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedBuffer {
    /// The variable.
    pub var: Var,
    /// Its name.
    pub name: String,
    /// Lanes (rows) used.
    pub lanes: u32,
    /// Columns used.
    pub columns: u32,
    /// First column relative to the allocation base.
    pub offset: u32,
    /// Live range in program points.
    pub live: Interval,
    /// Declaration span.
    pub span: Span,
}

/// The plan of one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmemPlan {
    /// Kernel name.
    pub kernel: String,
    /// Columns allocated (0 when the kernel uses no TMEM).
    pub alloc_columns: u32,
    /// Highest column used + 1.
    pub extent: u32,
    /// Largest sum of co-live columns.
    pub peak_columns: u32,
    /// Buffers in declaration order.
    pub buffers: Vec<PlacedBuffer>,
    /// Column offset per variable (TMEM variables only).
    pub offsets: SecondaryMap<Var, Option<u32>>,
    /// Number of program points (for drawing).
    pub points: u32,
}

/// Plans TMEM for `k` and inserts the lifecycle instructions.
///
/// # Errors
/// E0402 when co-live buffers exceed 512 columns (or cannot be placed within 512 columns).
pub fn run(k: &mut Kernel) -> Result<TmemPlan, Diagnostic> {
    let plan = compute(k)?;
    if plan.alloc_columns > 0 {
        insert_lifecycle(k, plan.alloc_columns);
    }
    Ok(plan)
}

/// Computes the plan without changing the kernel.
///
/// # Errors
/// As [`run`].
pub fn compute(k: &Kernel) -> Result<TmemPlan, Diagnostic> {
    let live = liveness(k);
    let mut vars = vec![];
    let mut reqs = vec![];
    for (v, d) in k.vars.iter() {
        if d.space != Space::Tmem {
            continue;
        }
        let Some(iv) = live.vars[v] else { continue };
        let (rows, cols) = d.ty.shape().unwrap_or((0, 0));
        let columns = tmem_columns(d.ty.elem(), cols);
        vars.push((v, rows, columns, iv));
        reqs.push(Request { size: columns, align: TMEM_ALIGN, live: iv });
    }
    let placement = plan(&reqs);
    let mut offsets = SecondaryMap::new();
    let buffers: Vec<PlacedBuffer> = vars
        .iter()
        .zip(&placement.offsets)
        .map(|(&(var, lanes, columns, live), &offset)| {
            offsets[var] = Some(offset);
            PlacedBuffer { var, name: k.vars[var].name.clone(), lanes, columns, offset, live, span: k.vars[var].span }
        })
        .collect();
    if placement.peak_demand > TMEM_COLUMNS || placement.extent > TMEM_COLUMNS {
        return Err(over_budget(k, &buffers, placement.peak_demand, placement.peak_point, placement.extent));
    }
    let alloc_columns = if buffers.is_empty() { 0 } else { legal_alloc_columns(placement.extent).unwrap_or(TMEM_COLUMNS) };
    Ok(TmemPlan {
        kernel: k.name.clone(),
        alloc_columns,
        extent: placement.extent,
        peak_columns: placement.peak_demand,
        buffers,
        offsets,
        points: live.points.len,
    })
}

fn over_budget(k: &Kernel, buffers: &[PlacedBuffer], peak: u32, at: u32, extent: u32) -> Diagnostic {
    let live: Vec<&PlacedBuffer> = buffers.iter().filter(|b| b.live.contains(at)).collect();
    let (msg, primary) = if peak > TMEM_COLUMNS {
        let parts: Vec<String> = live.iter().map(|b| b.columns.to_string()).collect();
        (
            format!("tensor memory over budget in kernel `{}`: co-live buffers need {peak} columns, the hardware has {TMEM_COLUMNS}", k.name),
            format!("{} = {peak} > {TMEM_COLUMNS} columns live here", parts.join(" + ")),
        )
    } else {
        (
            format!("tensor memory over budget in kernel `{}`: buffers fit in {peak} columns but could not be placed within {TMEM_COLUMNS} (fragmentation: {extent})", k.name),
            format!("placement needs {extent} > {TMEM_COLUMNS} columns"),
        )
    };
    let first = live.first().map(|b| b.span).unwrap_or(k.span);
    let mut d = Diagnostic::error(Code::TmemOverBudget, msg, first, primary);
    d.labels[0].message = format!(
        "{}: {} lanes x {} columns (fp32 cells){}",
        live.first().map(|b| b.name.as_str()).unwrap_or("?"),
        live.first().map(|b| b.lanes).unwrap_or(0),
        live.first().map(|b| b.columns).unwrap_or(0),
        if peak > TMEM_COLUMNS { format!(" — together {peak} > {TMEM_COLUMNS}") } else { String::new() }
    );
    for b in live.iter().skip(1) {
        d = d.with_label(b.span, format!("{}: {} lanes x {} columns, live at the same time", b.name, b.lanes, b.columns));
    }
    let listing: Vec<String> = live.iter().map(|b| format!("`{}` {} columns", b.name, b.columns)).collect();
    d.with_note(format!("co-live at program point {at}: {} = {peak} columns; limit {TMEM_COLUMNS} (128 lanes x 512 columns per SM)", listing.join(" + ")))
        .with_note("this is the load-time failure of state-spaces/mamba#904 (\"Required: 544, Hardware limit: 512\"), caught at compile time")
        .with_note("help: shrink a tile, end a buffer's live range before the other starts (columns are reused), or keep one operand in shared memory")
}

/// Inserts alloc + relinquish at the start of the body and dealloc at its end.
fn insert_lifecycle(k: &mut Kernel, columns: u32) {
    let mut mk = |op: Op, span: Span| {
        let i = k.insts.push(InstData { op, result: None });
        k.inst_spans[i] = span;
        i
    };
    let sp = k.span;
    let alloc = mk(Op::TmemAlloc { columns }, sp);
    let relinquish = mk(Op::TmemRelinquish, sp);
    let dealloc = mk(Op::TmemDealloc { columns }, sp);
    let body = &mut k.blocks[k.body].insts;
    body.insert(0, relinquish);
    body.insert(0, alloc);
    body.push(dealloc);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    #[test]
    fn the_budget_is_the_targets_tensor_memory() {
        assert_eq!(Target::Sm100a.info().tmem.map(|t| t.columns), Some(TMEM_COLUMNS));
    }
}
