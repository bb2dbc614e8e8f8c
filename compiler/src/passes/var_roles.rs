//! What each variable is on one target, decided once per kernel: a register-resident MMA
//! accumulator (and whether it needs a shared-memory buffer at all), an operand tile kept in the
//! core-matrix layout wgmma reads in place, or a plain shared-memory tile. The passes (fusion,
//! the shared-memory plan, pipelining), the back end and the interpreter's MMA numerics all read
//! these rules from here ([`VarRoles::compute`]: a few walks over the kernel, linear in its
//! length).

use std::collections::HashMap;

use cranelift_entity::SecondaryMap;

use crate::ir::{Elem, Inst, Kernel, Op, Space, Value, ValueDef, Var};
use crate::layout::wgmma::{Distribution, WARPGROUP};
use crate::target::TargetInfo;

/// Registers per thread one register-resident accumulator may take: 128 floats leave room for
/// addresses and operands under the 255-register limit (a 128 x 128 tile on one warpgroup).
pub const MAX_ACCUMULATOR_FLOATS: u32 = 128;

/// The roles of a kernel's variables on one target.
#[derive(Clone, Debug, Default)]
pub struct VarRoles {
    /// Register-resident accumulators and how their fragments are spread: an f32 `tmem`
    /// variable, on a target with `wgmma` and without tensor memory, in a kernel of whole
    /// warpgroups, whose fragments ([`Distribution`]) take at most [`MAX_ACCUMULATOR_FLOATS`]
    /// per thread. Its MMAs are `wgmma` with the old value as the first step's input (the
    /// interpreter's numerics follow this); its shared-memory buffer is where reads and writes
    /// meet it. No MMA need write it: a loop-carried elementwise tile declared `tmem` (the
    /// per-channel distance loops' running decays and sums) is updated in its fragments, each
    /// thread its own elements in registers, where a shared-memory tile cost a load, a store
    /// and their address arithmetic per element and step (631 → 311 SASS instructions per step
    /// in k2_keys_channel).
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
        let mut uses: HashMap<Value, Vec<Inst>> = HashMap::new();
        k.walk(|i| {
            for a in k.inst_args(i) {
                uses.entry(a).or_default().push(i);
            }
        });
        for (v, d) in k.vars.iter() {
            if !wgmma || d.space != Space::Tmem || d.ty.elem() != Elem::F32 || k.threads % WARPGROUP != 0 {
                continue;
            }
            let dist = d.ty.shape().and_then(|(m, n)| Distribution::new(m, n, k.threads / WARPGROUP));
            r.accumulators[v] = dist.filter(|d| d.floats_per_thread() <= MAX_ACCUMULATOR_FLOATS);
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
