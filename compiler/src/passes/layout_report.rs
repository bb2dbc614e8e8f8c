//! `--emit ir`, per target: where each variable lives and in which layout, the pipelined loops,
//! and the layout conversions the code generator inserts (as `;` comment lines after the IR,
//! which the IR reader skips). The facts are the per-target plan's ([`TargetPlan`]:
//! [`super::var_roles::VarRoles`], [`super::pipeline`], the shared-memory plan).

use std::fmt::Write;

use super::target_plan::TargetPlan;
use crate::ir::{Kernel, Op, Space};

/// Renders the layouts of kernel `k` on the target of `tp`.
pub fn render(k: &Kernel, tp: &TargetPlan) -> String {
    let info = tp.target.info();
    let mut s = String::new();
    let _ = writeln!(s, "; layouts of `{}` on {}:", k.name, info.name);
    for (v, d) in k.vars.iter() {
        let ring = tp.smem.rings.get(v).copied().flatten();
        let place = if let Some(dist) = tp.roles.accumulator(v) {
            let buffer = if tp.roles.is_register_only(v) { "no shared-memory buffer" } else { "written back to its shared-memory buffer where read" };
            format!(
                "wgmma registers: {} unit(s) of 64 x {} over {} warpgroup(s), {} floats per thread; {buffer}",
                dist.units, dist.piece_n, dist.warpgroups, dist.floats_per_thread()
            )
        } else if d.space == Space::Tmem && info.tmem.is_some() {
            "tensor memory (columns in the TMEM plan, `--emit tmem-plan`)".to_string()
        } else if tp.roles.is_tiled(v) {
            let r = ring.map(|(st, _)| format!("; a {st}-stage ring (software pipeline)")).unwrap_or_default();
            match tp.tma.swizzle_of(v) {
                Some(sw) => format!("shared memory, {}-swizzled panels of {} columns read by the tensor core in place{r}", sw.name(), sw.elems()),
                None => format!("shared memory, 8x8 core-matrix layout read by the tensor core in place{r}"),
            }
        } else if let Some(pitch) = tp.pitch_of(v) {
            format!("shared memory, row-major, rows {pitch} elements apart (padded: fragment-order reads spread over the banks)")
        } else {
            "shared memory, row-major".to_string()
        };
        let _ = writeln!(s, ";   {v} {}: {place}", d.name);
    }
    for (l, p) in tp.pipelines.iter() {
        if let Some(p) = p {
            let vars: Vec<String> = p.vars.iter().map(|v| format!("`{}`", k.vars[*v].name)).collect();
            let overlap = if p.overlap_mma { ", its MMA left in flight into the next iteration" } else { "" };
            let how = if tp.tma.loop_barriers(l).is_some() { "TMA copies" } else { "cp.async copies" };
            if let Some(ws) = tp.warp_spec.filter(|w| w.loop_inst == l) {
                let (pt, pr) = (crate::passes::warp_spec::PRODUCER_THREADS, crate::passes::warp_spec::PRODUCER_REGISTERS);
                let _ = writeln!(
                    s,
                    ";   {l}: warp-specialised pipelined loop: a producer warpgroup ({pt} threads, {pr} registers) issues {} by {how} into {} stages, each awaited on its full mbarrier; the {} consumer threads ({} registers) run the MMAs and hand each stage back on its empty mbarrier",
                    vars.join(", "),
                    p.stages,
                    ws.consumer_threads,
                    ws.consumer_registers
                );
            } else if p.stages == 1 {
                let _ = writeln!(s, ";   {l}: pipelined loop: {} issued at the iteration's first write into one buffer by {how}", vars.join(", "));
            } else {
                let _ = writeln!(s, ";   {l}: pipelined loop: {} issued {} iteration(s) ahead into {} stages by {how}{overlap}", vars.join(", "), p.distance(), p.stages);
            }
        }
    }
    for (j, m) in tp.tma.maps.iter().enumerate() {
        let dims: Vec<String> = m.box_dims.iter().map(u32::to_string).collect();
        let _ = writeln!(s, ";   tensor map {j}: `{}`, box [{}], swizzle {}, out of bounds reads zero", k.params[m.param].name, dims.join(", "), m.swizzle.map_or("none", |w| w.name()));
    }
    // Conversions: where a register accumulator meets shared memory, and the roots evaluated
    // where its fragments are (none).
    let root_of = |i: crate::ir::Inst| -> String {
        match &k.insts[i].op {
            Op::Store { dst, .. } => format!("stored to `{}`", k.params[*dst].name),
            Op::WriteVar(w, _) => format!("written to `{}`", k.vars[*w].name),
            Op::Reduce(..) => "row-reduced by its quads of threads".into(),
            _ => String::new(),
        }
    };
    // How a fragment-order store writes: 16-byte row segments after the quads trade their
    // pairs, or one 2-element store per pair (`layout::quad_transpose::row_segments_apply`).
    let writes = |i: crate::ir::Inst| -> &'static str {
        let Op::Store { dst, index, .. } = &k.insts[i].op else { return "" };
        let elem = k.params[*dst].kind.tensor_elem().map_or(0, |e| e.size_bytes());
        let d = tp.fusion.frag_root(i).and_then(|v| tp.roles.accumulator(v));
        match d {
            Some(d) if crate::layout::quad_transpose::row_segments_apply(d.piece_n, crate::ir::columns_are_last(index), elem, k.residency(tp.target).is_some()) => {
                "; written as 16-byte row segments, each quad trading its column pairs"
            }
            Some(_) => "; written a column pair per store",
            None => "",
        }
    };
    k.walk(|i| {
        let conv = match &k.insts[i].op {
            Op::ReadVar(v) if tp.roles.accumulator(*v).is_some() => {
                // The root a fused read is evaluated in, when that is in the fragments' order.
                let root = Some(tp.fusion.evaluated_at(i)).filter(|&r| r != i && tp.fusion.reads_fragments_of(r, *v));
                Some(match root {
                    // A row reduction over column pieces hands its partials on through a
                    // shared-memory scratch (backend/sm90/frag_reduce.rs); nothing else does.
                    Some(r) => {
                        let pieces = matches!(k.insts[r].op, Op::Reduce(..)) && tp.roles.accumulator(*v).is_some_and(|d| d.pieces > 1);
                        let smem = if pieces { "partials between column pieces through a shared-memory scratch" } else { "no shared memory" };
                        format!("`{}` read in its fragments, {} in fragment order by {r} ({smem}){}", k.vars[*v].name, root_of(r), writes(r))
                    }
                    _ => format!("`{}` fragments written back to shared memory, then read", k.vars[*v].name),
                })
            }
            Op::WriteVar(v, x) if tp.roles.accumulator(*v).is_some() => Some(if super::var_roles::is_splat(k, *x) {
                format!("`{}` fragments set from a scalar", k.vars[*v].name)
            } else if tp.fusion.frag_root(i).is_some_and(|f| tp.roles.accumulator(f) == tp.roles.accumulator(*v)) {
                format!("`{}` fragments updated in registers, element by element (no shared memory)", k.vars[*v].name)
            } else {
                format!("`{}` written to shared memory, fragments reloaded", k.vars[*v].name)
            }),
            _ => None,
        };
        if let Some(c) = conv {
            let _ = writeln!(s, ";   {i}: conversion: {c}");
        }
    });
    s.push_str(&render_values(k, tp));
    s
}

/// One line per tile value: where it lives — a shared-memory buffer (its offset in the plan), or
/// no buffer at all: evaluated element by element inside the instruction that consumes it, in
/// the fragments of a register accumulator when that consumer runs in fragment order
/// ([`super::fuse`]). Scalars (uniform across the CTA, in registers) are not listed.
fn render_values(k: &Kernel, tp: &TargetPlan) -> String {
    let mut s = String::new();
    let what = |i: crate::ir::Inst| -> String {
        match &k.insts[i].op {
            Op::Store { dst, .. } => format!("the store to `{}`", k.params[*dst].name),
            Op::Reduce(..) => "a reduction".into(),
            _ => "its consumer".into(),
        }
    };
    // The consumers of each value: a variable read taken only by views and gathers is read in
    // place, element by element, whatever root evaluates them.
    let mut users: std::collections::HashMap<crate::ir::Value, Vec<&Op>> = std::collections::HashMap::new();
    k.walk(|i| {
        for a in k.inst_args(i) {
            users.entry(a).or_default().push(&k.insts[i].op);
        }
    });
    let viewed_only = |v: crate::ir::Value| users.get(&v).is_some_and(|us| us.iter().all(|u| matches!(u, Op::Slice { src, .. } | Op::Gather { src, .. } if *src == v)));
    k.walk(|i| {
        if let Some(v) = k.insts[i].result {
            let crate::ir::Type::Tile { elem, rows, cols } = k.values[v].ty else { return };
            let read_in_place = match k.insts[i].op {
                Op::ReadVar(w) if tp.fusion.is_fused(v) && viewed_only(v) => Some(w),
                _ => None,
            };
            let place = if let Some(w) = read_in_place {
                format!("no buffer: `{}` read in place, element by element, by its views and gathers (evaluated by {})", k.vars[w].name, tp.fusion.evaluated_at(i))
            } else if tp.fusion.is_fused(v) {
                let root = tp.fusion.evaluated_at(i);
                let in_place = |w: crate::ir::Var, x| tp.fusion.in_place_insert(k, w, x).is_some();
                match (tp.fusion.frag_root(root), &k.insts[root].op) {
                    // Views of a variable read in place, and its block update written in place.
                    (_, Op::WriteVar(w, x)) if in_place(*w, *x) && matches!(k.insts[i].op, Op::ReadVar(_)) => {
                        format!("no buffer: `{}` read in place by its views (its block update {root} reads none of the rest)", k.vars[*w].name)
                    }
                    (_, Op::WriteVar(w, x)) if in_place(*w, *x) => format!("no buffer: only its block written into `{}`, in place, by {root}", k.vars[*w].name),
                    // A copy or a computation straight into a variable: the variable's layout (above).
                    (_, Op::WriteVar(w, _)) => format!("no buffer: computed straight into `{}` by {root} (in `{}`'s layout, above)", k.vars[*w].name, k.vars[*w].name),
                    (Some(acc), _) => format!("no buffer: in the registers of `{}`'s fragments (accumulator layout), evaluated by {root} ({})", k.vars[acc].name, what(root)),
                    (None, _) => format!("no buffer: evaluated element by element by {root} ({}), blocked over the CTA's threads", what(root)),
                }
            } else {
                match tp.smem.values.get(v).copied().flatten() {
                    Some(off) => format!("shared memory, row-major, at byte {off} of the plan"),
                    None => "no buffer (never read as a tile)".to_string(),
                }
            };
            let _ = writeln!(s, ";   {v} {elem}[{rows}, {cols}] (from {i}): {place}");
        }
    });
    if s.is_empty() {
        return s;
    }
    format!("; tile values of `{}` on {}:\n{s}", k.name, tp.target.info().name)
}
