//! Which software-pipelined tile loads go through TMA (issue 9, item 3), and the tensor maps
//! they need: `cp.async.bulk.tensor` copies a box of a global tensor into shared memory in one
//! instruction issued by one thread, completes on an mbarrier with a byte count
//! (`complete_tx`), zero-fills whatever lies outside the tensor, and writes the swizzled layout
//! wgmma reads without bank conflicts ([`crate::layout::swizzle`]; PTX ISA "cp.async.bulk.tensor",
//! CUDA driver API `cuTensorMapEncodeTiled`).
//!
//! A pipelined loop ([`super::pipeline`]) uses TMA when the target has TMA and wgmma or tcgen05, for
//! each of its pipelined writes that qualifies (at least one; the others stay `cp.async` copies by
//! the threads, [`TmaPlan::thread_copy`]): from a tensor of rank ≤ 5 (a tensor map's limit)
//! indexed by points and two ranges, the columns on the last dimension, at most 256 rows (a box
//! extent), and either
//! * an operand tile of 16-bit elements, rows a multiple of 8, columns a whole number of
//!   16-element panels (the widest swizzle that divides them is used: [`Swizzle::for_cols`]),
//!   every MMA that reads it as an MN-major B operand splitting N in pieces of whole panels or
//!   in pieces that divide a panel (each then starts and ends inside one, `panels_fit`): its
//!   variable lives in the swizzled layout, its box is one panel wide (`P/2` elements on the last
//!   dimension), and one copy per panel fills it; or
//! * a plain tile read element by element (2- or 4-byte elements, a row of whole 16-byte
//!   chunks, at most 256 columns): one copy of the whole tile, row-major — or, read in a wgmma
//!   fragment's order with 16-bit elements and rows a multiple of 8, in the widest swizzle
//!   dividing a row, one copy per panel (no bank conflicts there).
//!
//! Boxes are the tile's rows tall on the row dimension and 1 on every point dimension.
//!
//! One tensor map per distinct (tensor, box, swizzle); the kernel receives them after its size
//! arguments, and the runtime encodes them from the tensor's pointer and shape
//! (`docs/metadata.md`, `tensor_maps`). Alignment is a run-time property, so the kernel tests it
//! (base 16-byte aligned, every stride but the last a multiple of 16 bytes below 2⁴⁰, every
//! extent in 1..=2³² — the conditions under which the runtime encodes a map) and otherwise
//! fills the same layout element by element.
//!
//! The plan also gives every other operand tile a swizzled layout where its MMAs can read one
//! ([`TmaPlan::swizzle`]), whoever fills it (the threads, or `cp.async`).

use cranelift_entity::SecondaryMap;

use crate::ir::{Index, Inst, Kernel, Op, Param, ParamKind, Var};
use crate::layout::swizzle::Swizzle;
use crate::target::TargetInfo;

use super::fuse::Fusion;
use super::pipeline::Pipeline;
use super::var_roles::VarRoles;

/// Byte offset of the first TMA mbarrier in the shared-memory header: after the tcgen05 MMA
/// mbarrier and TMEM slot ([`super::target_plan::TCGEN05_HEADER_BYTES`] holds those at 0 and 8).
pub const BARRIER_OFFSET: u32 = 16;

/// Widest N of one `tcgen05.mma` (cta_group::1): the pieces an sm_100a MMA splits N into.
pub const TCGEN05_MAX_N: u32 = 256;

pub use tilec_abi::meta::{TENSOR_MAP_MAX_BOX as MAX_BOX, TENSOR_MAP_MAX_RANK as MAX_RANK};

/// One tensor map the kernel takes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapPlan {
    /// The tensor.
    pub param: Param,
    /// Box extent per tensor dimension, outermost first (the last is one panel, or the whole
    /// row without swizzle).
    pub box_dims: Vec<u32>,
    /// Swizzle mode; `None` for a plain row-major tile (read element by element, not by wgmma).
    pub swizzle: Option<Swizzle>,
}

/// One pipelined write done by TMA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmaLoad {
    /// Index into [`TmaPlan::maps`].
    pub map: usize,
    /// Copies (panels) per tile.
    pub panels: u32,
    /// Bytes the copies deliver (the mbarrier's transaction count share).
    pub bytes: u32,
}

/// The TMA decisions of one kernel on one target.
#[derive(Clone, Debug, Default)]
pub struct TmaPlan {
    /// Tensor maps, in kernel-argument order.
    pub maps: Vec<TensorMapPlan>,
    /// TMA writes, by their `WriteVar` instruction.
    pub loads: SecondaryMap<Inst, Option<TmaLoad>>,
    /// Variables kept in a swizzled layout: those TMA fills, and the other operand tiles an MMA
    /// can read swizzled (their writers store 16-byte chunks without bank conflicts).
    pub swizzle: SecondaryMap<Var, Option<Swizzle>>,
    /// Pipelined loops with TMA writes (any others are thread copies), with the byte offset of
    /// their first full mbarrier in the shared-memory header (one 8-byte mbarrier per ring stage,
    /// or per write with one stage).
    pub loops: SecondaryMap<Inst, Option<u32>>,
}

impl TmaPlan {
    /// The swizzle of `v`, if it has one.
    pub fn swizzle_of(&self, v: Var) -> Option<Swizzle> {
        self.swizzle.get(v).copied().flatten()
    }

    /// The TMA load of write `i`, if it is one.
    pub fn load(&self, i: Inst) -> Option<&TmaLoad> {
        self.loads.get(i).and_then(Option::as_ref)
    }

    /// Whether pipelined write `w` of TMA loop `l` is copied by the threads (`cp.async`, a
    /// shape TMA cannot take) rather than by TMA.
    pub fn thread_copy(&self, l: Inst, w: Inst) -> bool {
        self.loop_barriers(l).is_some() && self.load(w).is_none()
    }

    /// The header offset of loop `l`'s mbarriers, if it is a TMA loop.
    pub fn loop_barriers(&self, l: Inst) -> Option<u32> {
        self.loops.get(l).copied().flatten()
    }

    /// Whether any loop uses TMA.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Whether any variable is in a swizzled layout (then the planned region must start on a
    /// [`crate::layout::swizzle::PERIOD_ALIGN`] boundary).
    pub fn any_swizzled(&self) -> bool {
        self.swizzle.values().any(Option::is_some)
    }

    /// Assigns each TMA loop its mbarriers' offset (after the pipelines' stages are chosen).
    pub fn place_barriers(&mut self, pipelines: &SecondaryMap<Inst, Option<Pipeline>>) {
        let mut at = BARRIER_OFFSET;
        let ls: Vec<Inst> = self.loops.iter().filter(|(_, o)| o.is_some()).map(|(l, _)| l).collect();
        for l in ls {
            self.loops[l] = Some(at);
            at += 8 * pipelines.get(l).and_then(Option::as_ref).map_or(0, barriers_of);
        }
    }
}

/// The mbarriers a TMA loop uses: one per ring stage, or with one stage one per write (each
/// variable is refilled on its own, [`early_refill`]).
pub fn barriers_of(p: &Pipeline) -> u32 {
    if early_refill(p) {
        p.writes.len() as u32
    } else {
        p.stages
    }
}

/// Whether a TMA loop refills each variable right after its last read in the iteration (one
/// stage: the next iteration's copy then overlaps the rest of this one) instead of at the
/// first write of the iteration that needs it.
pub fn early_refill(p: &Pipeline) -> bool {
    p.stages == 1
}

/// Decides the TMA loads of kernel `k`'s pipelined loops on `target`.
pub fn plan(k: &Kernel, target: &TargetInfo, roles: &VarRoles, fusion: &Fusion, pipelines: &SecondaryMap<Inst, Option<Pipeline>>) -> TmaPlan {
    let mut out = TmaPlan::default();
    let wgmma = target.mma.wgmma && target.tmem.is_none();
    let tcgen05 = target.mma.tcgen05 && target.tmem.is_some();
    if !(target.tma && (wgmma || tcgen05)) {
        return out;
    }
    // Kernel parameters: 8 bytes per tensor pointer, 4 per scalar and size, then the maps, 128
    // bytes each on a 64-byte boundary; past the target's parameter space a loop keeps cp.async.
    let base: u32 = k.params.values().map(|p| if matches!(p.kind, ParamKind::Tensor { .. }) { 8 } else { 4 }).sum::<u32>() + 4 * k.sizes.len() as u32;
    let param_bytes = |maps: usize| base.next_multiple_of(64) + 128 * maps as u32;
    let frag_read = fragment_order_reads(k, fusion);
    for (l, p) in pipelines.iter() {
        let Some(p) = p else { continue };
        // A write TMA cannot take (a per-row vector of gates: 4 bytes per row, no 16-byte box)
        // stays a thread copy (`cp.async`) in the same loop.
        let loads: Vec<(Inst, (Var, TensorMapPlan, u32))> = p.writes.iter().filter_map(|&w| qualify(k, roles, &frag_read, w, tcgen05).map(|q| (w, q))).collect();
        if loads.is_empty() {
            continue;
        }
        let new_maps = loads.iter().filter(|(_, (_, m, _))| !out.maps.contains(m)).map(|(_, (_, m, _))| m).collect::<std::collections::HashSet<_>>().len();
        if param_bytes(out.maps.len() + new_maps) > target.max_param_bytes {
            continue;
        }
        for (w, (v, map, rows)) in loads {
            let idx = match out.maps.iter().position(|m| *m == map) {
                Some(i) => i,
                None => {
                    out.maps.push(map.clone());
                    out.maps.len() - 1
                }
            };
            let cols = k.vars[v].ty.shape().map_or(0, |s| s.1);
            let size = k.vars[v].ty.elem().size_bytes();
            out.loads[w] = Some(TmaLoad { map: idx, panels: map.swizzle.map_or(1, |sw| cols / sw.elems()), bytes: rows * cols * size });
            out.swizzle[v] = map.swizzle;
        }
        out.loops[l] = Some(0);
    }
    // Operand tiles the threads write (or cp.async fills) take the swizzled layout too where an
    // MMA can read it: a row of 8 consecutive 16-byte chunks then lands in 8 different bank
    // groups, where the core-matrix layout puts them 128 bytes apart, all in one (an 8-way
    // conflict on every 16-byte store of a row).
    for (v, d) in k.vars.iter() {
        if out.swizzle[v].is_some() || !roles.is_tiled(v) || d.ty.elem().size_bytes() != 2 {
            continue;
        }
        let Some((rows, cols)) = d.ty.shape() else { continue };
        if let Some(sw) = Swizzle::for_cols(cols).filter(|&sw| rows % 8 == 0 && panels_fit(k, roles, v, sw, tcgen05)) {
            out.swizzle[v] = Some(sw);
        }
    }
    out
}

/// The shared-memory variables some root evaluated in a register accumulator's fragment order
/// reads ([`Fusion::frag_root`]).
fn fragment_order_reads(k: &Kernel, fusion: &Fusion) -> std::collections::HashSet<Var> {
    let mut out = std::collections::HashSet::new();
    k.walk(|i| {
        if fusion.frag_root(i).is_some() {
            out.extend(fusion.leaves(k, i).1);
        }
    });
    out
}

/// Whether every MMA reading `v` as an MN-major B operand reads each of its N pieces from one
/// panel or from whole panels: wgmma in its accumulator's pieces (a piece narrower than the
/// panel and dividing it starts inside the panel, [`crate::layout::swizzle::OperandSteps::origin`]
/// — so a [C, 32] tile read in pieces of 16 keeps the 64B swizzle, whose 16-byte row stores do
/// not conflict, where the core-matrix layout put a row's four chunks in one bank group),
/// tcgen05 in pieces of 256 columns. (An A operand's units start at multiples of 64 rows, a
/// whole number of panels in every mode.)
fn panels_fit(k: &Kernel, roles: &VarRoles, v: Var, sw: Swizzle, tcgen05: bool) -> bool {
    let mut ok = true;
    k.walk(|i| {
        if let Op::Mma { dst, b, .. } = k.insts[i].op {
            if b.var == v && !b.transposed {
                let fits = |n: u32| n % sw.elems() == 0 || (n % 8 == 0 && sw.elems() % n == 0);
                ok &= if tcgen05 { TCGEN05_MAX_N % sw.elems() == 0 } else { roles.accumulator(dst).is_some_and(|dist| fits(dist.piece_n)) };
            }
        }
    });
    ok
}

/// The variable, tensor map and row count of pipelined write `w` if TMA can do it.
fn qualify(k: &Kernel, roles: &VarRoles, frag_read: &std::collections::HashSet<Var>, w: Inst, tcgen05: bool) -> Option<(Var, TensorMapPlan, u32)> {
    let (v, src, index) = k.written_load(w)?;
    let ParamKind::Tensor { elem, .. } = &k.params[src].kind else { return None };
    let (rows, cols) = k.vars[v].ty.shape()?;
    let size = elem.size_bytes() as u32;
    if rows > MAX_BOX || index.len() > MAX_RANK || index.len() < 2 {
        return None;
    }
    // Operand tiles: 16-bit panels in the widest swizzle dividing a row. Plain tiles (read
    // element by element): one row of whole 16-byte chunks, swizzled panels where 16-bit.
    let sw = if roles.is_tiled(v) {
        if size != 2 || rows % 8 != 0 {
            return None;
        }
        Some(Swizzle::for_cols(cols)?)
    } else {
        if !matches!(size, 2 | 4) || (cols * size) % 16 != 0 || cols > MAX_BOX {
            return None;
        }
        // A 16-bit plain tile the threads read in a wgmma fragment's order (8 rows, 4 column
        // pairs per warp) is swizzled: 8 distinct bank groups instead of 2 (a 4-way conflict on
        // K#1's 64-byte dv rows). Others stay row-major: the swizzle's address arithmetic in
        // CTA loops cost a kernel at 255 registers (k1_scan_channel, then) 4 bytes of spills.
        match size {
            2 if rows % 8 == 0 && frag_read.contains(&v) => Swizzle::for_cols(cols),
            _ => None,
        }
    };
    let ranges: Vec<usize> = index.iter().enumerate().filter(|(_, ix)| matches!(ix, Index::Range { .. })).map(|(d, _)| d).collect();
    if ranges.len() != 2 || ranges[1] + 1 != index.len() {
        return None;
    }
    let mut box_dims = vec![1; index.len()];
    box_dims[ranges[0]] = rows;
    box_dims[index.len() - 1] = sw.map_or(cols, Swizzle::elems);
    let ok = sw.is_none_or(|sw| panels_fit(k, roles, v, sw, tcgen05));
    ok.then_some((v, TensorMapPlan { param: src, box_dims, swizzle: sw }, rows))
}

/// The metadata records of `plan`'s tensor maps (`docs/metadata.md`, `tensor_maps`).
pub fn to_meta(k: &Kernel, plan: &TmaPlan) -> Vec<tilec_abi::meta::TensorMapMeta> {
    plan.maps
        .iter()
        .map(|m| tilec_abi::meta::TensorMapMeta {
            tensor: k.params[m.param].name.clone(),
            box_dims: m.box_dims.clone(),
            element_strides: vec![1; m.box_dims.len()],
            swizzle: m.swizzle.map_or("none", Swizzle::name).into(),
            oob_fill: "zero".into(),
        })
        .collect()
}
