//! `tilec check --emit smem-plan`: the shared-memory plan of one kernel on one target as text —
//! the reserved header, then every buffer with its byte range, size and live range (program
//! points), then the peak of co-live bytes and the total against the target's limit.

use std::fmt::Write;

use super::smem_plan::{label, Placement};
use super::target_plan::TargetPlan;
use crate::ir::{Inst, Kernel};

/// Renders the plan (deterministic; one line per buffer, sorted by offset). With the source
/// text, each buffer also names the line that creates it.
pub fn render_text(k: &Kernel, tp: &TargetPlan, src: Option<&str>) -> String {
    let info = tp.target.info();
    let mut s = String::new();
    let r = tp.resident_ctas(k.threads);
    let _ = write!(s, "kernel {} on {}: {} of {} bytes of shared memory per CTA; {r} CTA{} per SM by shared memory and threads", k.name, info.name, tp.smem_bytes(), info.smem_per_cta, if r == 1 { "" } else { "s" });
    match k.residency(tp.target) {
        Some((n, _)) => {
            let regs = super::residency::register_budget(info, n, k.threads);
            let _ = writeln!(s, ", ctas_per_sm({n}): at most {regs} registers per thread");
        }
        None => s.push('\n'),
    }
    if tp.header_bytes > 0 {
        let mut parts = vec![];
        if super::target_plan::uses_tensor_memory(k, info) {
            parts.push("MMA mbarrier and TMEM address slot");
        }
        if !tp.tma.is_empty() {
            parts.push("TMA ring mbarriers (from byte 16)");
        }
        if tp.tma.any_swizzled() {
            parts.push("aligned for swizzled tiles");
        }
        let what = parts.join(", ");
        let _ = writeln!(s, "  {:>7}..{:<7} {:>7} B  reserved: {what}", 0, tp.header_bytes, tp.header_bytes);
    }
    let mut ps: Vec<&Placement> = tp.smem.placements.iter().collect();
    ps.sort_by_key(|p| (p.offset, p.live.0));
    for p in ps {
        let start = tp.header_bytes + p.offset;
        let (what, span) = label(k, p, info, &tp.roles);
        let what = match src {
            Some(text) if span != crate::diag::Span::default() => format!("{what}, line {}", crate::diag::line_col(text, span.start as usize).0),
            _ => what,
        };
        let _ = writeln!(s, "  {:>7}..{:<7} {:>7} B  live {:>4}..={:<4} {what}", start, start + p.bytes, p.bytes, p.live.0, p.live.1);
    }
    let (peak, at) = tp.smem.peak;
    let _ = writeln!(s, "  peak of co-live buffers: {peak} B at program point {at}; placed extent {} B; {} CTA barriers (bar.sync)", tp.smem.bytes, tp.barriers.count());
    let before = insts_where(k, |i| tp.barriers.before(i));
    if !before.is_empty() {
        let _ = writeln!(s, "  CTA barriers before: {}", before.join(", "));
    }
    // MMAs left in flight, and where each wait is (wait_group N: N newer groups stay in flight).
    let (mut deferred, mut waits) = (vec![], vec![]);
    k.walk(|i| {
        if tp.barriers.deferred(i) {
            deferred.push(i.to_string());
        }
        if let Some(n) = tp.barriers.wait_before(i) {
            waits.push(format!("{i} ({n} left in flight)"));
        }
    });
    if !deferred.is_empty() {
        let _ = writeln!(s, "  wgmma groups left in flight: {}; waits before: {}", deferred.join(", "), if waits.is_empty() { "none (each block's end)".to_string() } else { waits.join(", ") });
    }
    // wgmmas whose operands the wgmma before them made visible (no fence or barrier of their own).
    let chained = insts_where(k, |i| tp.barriers.chained(i));
    if !chained.is_empty() {
        let _ = writeln!(s, "  wgmmas fenced by the one before: {}", chained.join(", "));
    }
    s
}

/// The names of kernel `k`'s instructions for which `pred` holds, in program order.
fn insts_where(k: &Kernel, pred: impl Fn(Inst) -> bool) -> Vec<String> {
    let mut out = vec![];
    k.walk(|i| {
        if pred(i) {
            out.push(i.to_string());
        }
    });
    out
}
