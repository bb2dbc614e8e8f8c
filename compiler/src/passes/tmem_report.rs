//! Rendering of a [`TmemPlan`]: a text column map over program points
//! (`tilec check --emit tmem-plan`) and the metadata JSON form (`--emit tmem-plan-json`,
//! `tilec_abi::meta::TmemMeta`, documented in docs/metadata.md).

use std::fmt::Write;

use tilec_abi::meta::{Lifecycle, TmemBufferMeta, TmemMeta};

use super::tmem_plan::{TmemPlan, TMEM_COLUMNS};

/// Columns drawn per character of the column map.
const COLS_PER_CHAR: u32 = 16;

/// The metadata form of a plan.
pub fn to_meta(plan: &TmemPlan) -> TmemMeta {
    let n = u32::from(plan.alloc_columns > 0);
    TmemMeta {
        alloc_columns: plan.alloc_columns,
        peak_columns: plan.peak_columns,
        buffers: plan
            .buffers
            .iter()
            .map(|b| TmemBufferMeta { name: b.name.clone(), lanes: b.lanes, columns: b.columns, offset: b.offset, live: [b.live.start, b.live.end] })
            .collect(),
        lifecycle: Lifecycle { alloc: n, relinquish: n, dealloc: n },
    }
}

/// A letter per buffer (`a`..`z`, then `A`..`Z`, then `#`).
fn glyph(i: usize) -> char {
    const G: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    G.get(i).map(|&c| c as char).unwrap_or('#')
}

/// The text report: a buffer table and a column map with one row per program point at which
/// the set of live buffers changes.
pub fn render_text(plan: &TmemPlan) -> String {
    let mut s = String::new();
    if plan.buffers.is_empty() {
        let _ = writeln!(s, "kernel `{}`: no tensor memory used", plan.kernel);
        return s;
    }
    let _ = writeln!(
        s,
        "kernel `{}`: TMEM alloc {} columns (placement extent {}, peak co-live {} of {}); lifecycle 1 alloc / 1 relinquish / 1 dealloc",
        plan.kernel, plan.alloc_columns, plan.extent, plan.peak_columns, TMEM_COLUMNS
    );
    let _ = writeln!(s, "  {:<3} {:<16} {:>5} {:>7} {:>7}  live", "id", "buffer", "lanes", "columns", "offset");
    for (i, b) in plan.buffers.iter().enumerate() {
        let _ = writeln!(s, "  {:<3} {:<16} {:>5} {:>7} {:>7}  [{}, {}]", glyph(i), b.name, b.lanes, b.columns, b.offset, b.live.start, b.live.end);
    }
    let width = (plan.alloc_columns / COLS_PER_CHAR) as usize;
    let _ = writeln!(s, "  column map ({COLS_PER_CHAR} columns per character, '.' = free, rows = program points where liveness changes):");
    let mut header = String::new();
    for c in (0..width).step_by(8) {
        let _ = write!(header, "{:<8}", c as u32 * COLS_PER_CHAR);
    }
    let _ = writeln!(s, "  {:>6}  {}", "point", header.trim_end());
    let mut prev: Option<Vec<bool>> = None;
    for p in 0..plan.points {
        let live: Vec<bool> = plan.buffers.iter().map(|b| b.live.contains(p)).collect();
        if prev.as_ref() == Some(&live) {
            continue;
        }
        let mut row = vec!['.'; width];
        for (i, b) in plan.buffers.iter().enumerate() {
            if live[i] {
                let from = (b.offset / COLS_PER_CHAR) as usize;
                let to = (b.offset + b.columns).div_ceil(COLS_PER_CHAR) as usize;
                for c in row.iter_mut().take(to.min(width)).skip(from) {
                    *c = glyph(i);
                }
            }
        }
        let _ = writeln!(s, "  {:>6}  {}", p, row.into_iter().collect::<String>());
        prev = Some(live);
    }
    s
}
