//! What each variable is on one target, decided once per kernel: a register-resident MMA
//! accumulator (and whether it needs a shared-memory buffer at all), an operand tile kept in the
//! core-matrix layout wgmma reads in place, or a plain shared-memory tile. The passes (fusion,
//! the shared-memory plan, pipelining), the back end and the interpreter's MMA numerics all read
//! these rules from here ([`VarRoles::compute`]: a few walks over the kernel, linear in its
//! length).

use std::collections::HashMap;

use cranelift_entity::SecondaryMap;

use crate::ir::{Axis, Elem, Inst, Kernel, Op, Space, Value, ValueDef, Var};
use super::fuse::MAX_FRAGMENT_ROOT_FLOATS;
use crate::layout::wgmma::{Distribution, WARPGROUP};
use crate::target::TargetInfo;

/// Registers per thread one register-resident accumulator may take: 128 floats leave room for
/// addresses and operands under the 255-register limit (a 128 x 128 tile on one warpgroup).
pub const MAX_ACCUMULATOR_FLOATS: u32 = 128;

/// 32-bit registers of an SM's register file (sm_90a).
const REGISTER_FILE: u32 = 65536;

/// Registers per thread kept for addresses and operands beside the fragments of tmem tiles that
/// no MMA writes.
const REGISTER_MARGIN: u32 = 64;

/// The roles of a kernel's variables on one target.
#[derive(Clone, Debug, Default)]
pub struct VarRoles {
    /// Register-resident accumulators and how their fragments are spread: an f32 `tmem`
    /// variable, on a target with `wgmma` and without tensor memory, in a kernel of whole
    /// warpgroups, whose fragments ([`Distribution`]) take at most [`MAX_ACCUMULATOR_FLOATS`]
    /// per thread. Its MMAs are `wgmma` with the old value as the first step's input (the
    /// interpreter's numerics follow this); its shared-memory buffer is where reads and writes
    /// meet it. An f32 `tmem` tile that no MMA writes is one too when every access of it can
    /// be made in fragment order ([`in_fragment_order`]), it takes at most
    /// [`MAX_FRAGMENT_ROOT_FLOATS`] per thread, and the fragments of all of them fit beside the
    /// MMA accumulators' in the registers a thread has: a loop-carried elementwise tile (the
    /// per-channel distance loops' running decays and sums) is then updated by each thread in
    /// its own registers, where a shared-memory tile cost a load, a store and their address
    /// arithmetic per element and step (631 → 287 SASS instructions per step in
    /// k2_keys_channel, 4.10 → 3.58 ms on an H100; docs/results.md, twenty-eighth session).
    /// Otherwise it stays in shared memory.
    pub accumulators: SecondaryMap<Var, Option<Distribution>>,
    /// Register accumulators that need no shared-memory buffer at all: every write is a
    /// broadcast scalar (`zeros`, `full`: set in registers), so the fragments are the only copy;
    /// a read is evaluated from them (fused into its consumer) or written from them straight
    /// into the read's result tile. A buffer would cost `M·N·4` bytes, and a read through it a
    /// second copy of the tile.
    pub register_only: SecondaryMap<Var, bool>,
    /// Register accumulators every read of which is stored straight to a global tensor: their
    /// fragments are stored in place, however many per thread (a GEMM's accumulator).
    pub stored_only: SecondaryMap<Var, bool>,
    /// Shared-memory operand tiles kept in the 8 x 8 core-matrix layout wgmma and tcgen05 read
    /// directly ([`crate::layout::staging::kmajor_offset`] with the tile's column count as K; or
    /// a swizzled layout when TMA fills it, [`crate::passes::tma`]): a bf16/f16 `smem` tile of
    /// whole core matrices read as an operand of MMAs into register accumulators (wgmma) or
    /// tensor memory (tcgen05), and otherwise only by the threads, which address it in that
    /// layout. Its MMAs point their descriptors into its buffer (K-major where its columns are
    /// the product's K, MN-major otherwise) instead of staging.
    pub tiled: SecondaryMap<Var, bool>,
}

impl VarRoles {
    /// Decides every variable's role in kernel `k` on `target`.
    pub fn compute(k: &Kernel, target: &TargetInfo) -> VarRoles {
        let mut r = VarRoles::default();
        let wgmma = target.mma.wgmma && target.tmem.is_none();
        let tcgen05 = target.mma.tcgen05 && target.tmem.is_some();
        if !wgmma && !tcgen05 {
            return r;
        }
        let mut mma_dst: SecondaryMap<Var, bool> = SecondaryMap::new();
        let mut uses: HashMap<Value, Vec<Inst>> = HashMap::new();
        k.walk(|i| {
            if let Op::Mma { dst, .. } = k.insts[i].op {
                mma_dst[dst] = true;
            }
            for a in k.inst_args(i) {
                uses.entry(a).or_default().push(i);
            }
        });
        // MMA destinations first; then the other f32 tmem tiles, each only while the fragments
        // of all of them fit the registers a thread has beside its addresses and operands.
        let budget = MAX_ACCUMULATOR_FLOATS.min((REGISTER_FILE / k.threads.max(1)).saturating_sub(REGISTER_MARGIN));
        let mut floats = 0;
        for pass_mma in [true, false] {
            for (v, d) in k.vars.iter() {
                if !wgmma || d.space != Space::Tmem || d.ty.elem() != Elem::F32 || k.threads % WARPGROUP != 0 || mma_dst[v] != pass_mma {
                    continue;
                }
                let dist = d.ty.shape().and_then(|(m, n)| Distribution::new(m, n, k.threads / WARPGROUP));
                let dist = if pass_mma {
                    dist.filter(|d| d.floats_per_thread() <= MAX_ACCUMULATOR_FLOATS)
                } else {
                    dist.filter(|d| d.floats_per_thread() <= MAX_FRAGMENT_ROOT_FLOATS && floats + d.floats_per_thread() <= budget && in_fragment_order(k, &uses, v))
                };
                floats += dist.map_or(0, |d| d.floats_per_thread());
                r.accumulators[v] = dist;
            }
        }
        let mut reg_only: SecondaryMap<Var, bool> = SecondaryMap::new();
        let mut stored: SecondaryMap<Var, bool> = SecondaryMap::new();
        let mut tiled_ok: SecondaryMap<Var, Option<bool>> = SecondaryMap::new();
        let mut mma_read: SecondaryMap<Var, bool> = SecondaryMap::new();
        for v in k.vars.keys() {
            reg_only[v] = r.accumulators[v].is_some();
            stored[v] = reg_only[v];
        }
        k.walk(|i| {
            match &k.insts[i].op {
                Op::WriteVar(w, x) if reg_only[*w] => reg_only[*w] = is_splat(k, *x),
                Op::ReadVar(v) if stored[*v] => {
                    let res = k.insts[i].result;
                    let u = res.and_then(|x| uses.get(&x)).map(Vec::as_slice).unwrap_or(&[]);
                    stored[*v] = matches!(u, [s] if matches!(k.insts[*s].op, Op::Store { value, .. } if Some(value) == res));
                }
                _ => {}
            }
            let (reads, _) = k.inst_vars(i);
            for v in reads {
                // An operand of MMAs that read shared memory through descriptors: wgmma into a
                // register accumulator, or tcgen05 into tensor memory. The threads may read it
                // back too (`ReadVar` addresses it in its layout, as `WriteVar` writes it).
                let ok = match k.insts[i].op {
                    Op::Mma { dst, a, b, .. } => dst != v && (a.var == v || b.var == v) && (r.accumulators[dst].is_some() || (tcgen05 && k.vars[dst].space == Space::Tmem)),
                    Op::ReadVar(_) => true,
                    _ => false,
                };
                tiled_ok[v] = Some(tiled_ok[v].unwrap_or(true) && ok);
                mma_read[v] |= ok && matches!(k.insts[i].op, Op::Mma { .. });
            }
        });
        for (v, d) in k.vars.iter() {
            r.register_only[v] = reg_only[v];
            r.stored_only[v] = reg_only[v] && stored[v];
            let whole_cores = d.ty.shape().is_some_and(|(rr, c)| rr % 8 == 0 && c % 8 == 0);
            r.tiled[v] = d.space == Space::Smem && matches!(d.ty.elem(), Elem::Bf16 | Elem::F16) && whole_cores && tiled_ok[v] == Some(true) && mma_read[v];
        }
        r
    }

    /// The distribution of `v` if it is a register accumulator.
    pub fn accumulator(&self, v: Var) -> Option<Distribution> {
        self.accumulators.get(v).copied().flatten()
    }

    /// Whether `v` is a register accumulator without a buffer.
    pub fn is_register_only(&self, v: Var) -> bool {
        self.register_only.get(v).copied().unwrap_or(false)
    }

    /// Whether `v` is a register accumulator whose every read is stored straight to global
    /// memory from its fragments.
    pub fn is_stored_only(&self, v: Var) -> bool {
        self.stored_only.get(v).copied().unwrap_or(false)
    }

    /// Whether `v` is an operand tile in the core-matrix layout.
    pub fn is_tiled(&self, v: Var) -> bool {
        self.tiled.get(v).copied().unwrap_or(false)
    }

    /// Whether `v` has a shared-memory buffer on `target`: every variable does, except `tmem`
    /// ones on a target with tensor memory and register accumulators that need none.
    pub fn in_shared_memory(&self, k: &Kernel, v: Var, target: &TargetInfo) -> bool {
        (k.vars[v].space != Space::Tmem || target.tmem.is_none()) && !self.is_register_only(v)
    }
}

/// Whether every access of variable `v` can be made where its fragments are, element by
/// element: each write a broadcast scalar, a whole-tile load or a pointwise expression at its
/// whole shape, and each read taken only by pointwise operations, row reductions, writes and
/// stores of its whole shape.
/// A view, transpose or block update of a register tile needs its fragments written back to a
/// buffer and a copy of the whole tile (more shared memory and barriers than a shared-memory
/// variable read in place), so a tmem tile that no MMA writes is register-resident only when
/// there is none.
fn in_fragment_order(k: &Kernel, uses: &HashMap<Value, Vec<Inst>>, v: Var) -> bool {
    let Some(shape) = k.vars[v].ty.shape() else { return false };
    let pointwise = |op: &Op| matches!(op, Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..));
    let full = |x: Value| k.values[x].ty.shape() == Some(shape);
    let mut ok = true;
    k.walk(|i| match &k.insts[i].op {
        Op::WriteVar(w, x) if *w == v => {
            let def = match k.values[*x].def {
                ValueDef::Result(d) => Some(&k.insts[d].op),
                ValueDef::LoopIndex(_) => None,
            };
            // A whole-tile load is read per element in fragment order too (as a converted one:
            // `f32(load x)` of an f32 tensor is the load itself, `sema`'s identity conversion).
            ok &= is_splat(k, *x) || (full(*x) && def.is_some_and(|op| pointwise(op) || matches!(op, Op::Load { .. })));
        }
        Op::ReadVar(w) if *w == v => {
            let res = k.insts[i].result;
            for &u in res.and_then(|x| uses.get(&x)).map(Vec::as_slice).unwrap_or(&[]) {
                let uop = &k.insts[u].op;
                let rshape = k.insts[u].result.and_then(|x| k.values[x].ty.shape());
                ok &= match uop {
                    Op::Reduce(_, Axis::Row, _) | Op::WriteVar(..) | Op::Store { .. } => true,
                    op if pointwise(op) => rshape == Some(shape),
                    _ => false,
                };
            }
        }
        _ => {}
    });
    ok
}

/// Whether tile value `x` is a scalar broadcast (`Splat`), possibly converted.
pub fn is_splat(k: &Kernel, x: Value) -> bool {
    match k.values[x].def {
        ValueDef::Result(d) => match k.insts[d].op {
            Op::Splat(_) => true,
            Op::Cast(y, _) => is_splat(k, y),
            _ => false,
        },
        ValueDef::LoopIndex(_) => false,
    }
}
