//! Execution of one CTA: a walk over the structured body, instruction by instruction.
//!
//! A CTA is interpreted as a single logical thread that computes whole tiles, which is what
//! the IR describes; how the GPU spreads a tile over threads is invisible at this level.
//! Values live in an environment indexed by [`Value`] (a loop body rebinds its values on every
//! iteration); variables start empty in every CTA, so a read before the first write is an error
//! rather than whatever shared or tensor memory happened to hold.

use cranelift_entity::SecondaryMap;
use tilec_abi::round::{f64_to_bf16, f64_to_f16};

use super::bind::Bound;
use super::dump::Watch;
use crate::passes::var_roles::VarRoles;
use super::elementwise::{binary, compare, dims, reduce, scan, select, unary};
use super::error::ExecError;
use super::mma;
use super::value::{Val, S};
use super::TmemCounts;
use crate::backend::Target;
use crate::ir::validate::Validated;
use crate::ir::{Axis, Block, Edge, Elem, Index, Inst, Kernel, MmaOperand, Op, TriMask, Type, Value, Var};

/// Instruction budget shared by all CTAs of a run.
#[derive(Debug)]
pub struct Budget {
    /// Steps taken so far (instructions plus loop iterations).
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// Wall-clock deadline, checked every 4096 steps (`None`: none).
    pub deadline: Option<(std::time::Instant, std::time::Duration)>,
}

/// The origin `(row, col)` of a `view`-shaped block inside a tile of `tile` shape.
///
/// # Errors
/// [`ExecError::ViewOutOfBounds`] unless the whole block lies inside the tile.
fn view_origin(tile: (usize, usize), row: i64, col: i64, view: (usize, usize)) -> Result<(usize, usize), ExecError> {
    let fits = |start: i64, len: usize, extent: usize| start >= 0 && start.checked_add(len as i64).is_some_and(|e| e <= extent as i64);
    if !fits(row, view.0, tile.0) || !fits(col, view.1, tile.1) {
        return Err(ExecError::ViewOutOfBounds { row, col, rows: view.0, cols: view.1, tile_rows: tile.0, tile_cols: tile.1 });
    }
    Ok((row as usize, col as usize))
}

/// The linear index of CTA `pid` in `grid` (x fastest), as a `u32` (grids are at most 2³² CTAs
/// in the interpreter's element limit).
fn linear_cta(pid: [i64; 3], grid: [i64; 3]) -> u32 {
    (pid[0] + grid[0] * (pid[1] + grid[1] * pid[2])) as u32
}

/// Inverse of [`linear_cta`].
fn pid_of(n: u32, grid: [i64; 3]) -> [i64; 3] {
    let n = i64::from(n);
    [n % grid[0].max(1), n / grid[0].max(1) % grid[1].max(1), n / (grid[0].max(1) * grid[1].max(1))]
}

/// The multi-index of flat offset `o` in a row-major tensor of `shape`.
fn unflatten(mut o: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        idx[d] = o % n.max(1);
        o /= n.max(1);
    }
    idx
}

/// The state of one CTA.
pub struct Cta<'a> {
    k: &'a Kernel,
    bound: &'a mut Bound,
    pid: [i64; 3],
    vals: SecondaryMap<Value, Option<Val>>,
    vars: SecondaryMap<Var, Option<Val>>,
    budget: &'a mut Budget,
    max_elements: u64,
    target: Target,
    /// TMEM lifecycle instructions executed by this CTA.
    pub tmem: TmemCounts,
    /// Values to record (`--dump`), when this is the chosen CTA.
    pub(crate) watch: Option<&'a mut Watch>,
    /// The variables' roles on `target` (which accumulators are seeded).
    roles: &'a VarRoles,
}

type Fail = (Inst, ExecError);

/// A global-tensor region addressed by an index list.
struct Region {
    /// Per tensor dimension: `(position, None)` for a point, `(start, Some(j))` for the `j`-th
    /// ranged index (0 runs along tile rows, 1 along columns).
    dims: Vec<(i64, Option<usize>)>,
    /// The tile shape the ranges describe (`[n]` is `n x 1`; no range is `1 x 1`).
    shape: (usize, usize),
    /// Number of ranged indices.
    ranges: usize,
}

impl<'a> Cta<'a> {
    /// A fresh CTA of a validated kernel with index `pid`; its MMAs follow the lowering for
    /// `target`.
    pub fn new(v: &Validated<'a>, bound: &'a mut Bound, pid: [i64; 3], budget: &'a mut Budget, max_elements: u64, target: Target, roles: &'a VarRoles) -> Self {
        Cta { k: v.kernel(), bound, pid, vals: SecondaryMap::new(), vars: SecondaryMap::new(), budget, max_elements, target, tmem: TmemCounts::default(), watch: None, roles }
    }

    /// Runs the kernel body.
    ///
    /// # Errors
    /// The first failing instruction and why.
    pub fn run(&mut self) -> Result<(), Fail> {
        self.block(self.k.body)
    }

    fn block(&mut self, b: Block) -> Result<(), Fail> {
        for &i in &self.k.blocks[b].insts {
            self.tick().map_err(|e| (i, e))?;
            if let Op::For { lo, hi, reverse, body } = self.k.insts[i].op {
                self.for_loop(i, lo, hi, reverse, body)?;
            } else {
                self.inst(i).map_err(|e| (i, e))?;
            }
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<(), ExecError> {
        self.budget.used += 1;
        if self.budget.used > self.budget.limit {
            return Err(ExecError::StepLimit { limit: self.budget.limit });
        }
        // Reading the clock (tens of ns) every 64 steps: cheap next to a step, and a step over a
        // large tile can take milliseconds, so a coarser check could overshoot the deadline by
        // seconds (the fuzzer found 2,000-step runs taking 2-5 s under load).
        if self.budget.used % 64 == 0 {
            if let Some((at, limit)) = self.budget.deadline {
                if std::time::Instant::now() >= at {
                    return Err(ExecError::TimeLimit { seconds: limit.as_secs_f64(), steps: self.budget.used });
                }
            }
        }
        Ok(())
    }

    fn for_loop(&mut self, i: Inst, lo: Value, hi: Value, reverse: bool, body: Block) -> Result<(), Fail> {
        let bounds = || -> Result<(i64, i64), ExecError> { Ok((self.scalar(lo)?.as_i64()?, self.scalar(hi)?.as_i64()?)) };
        let (lo, hi) = bounds().map_err(|e| (i, e))?;
        let iv = self.k.insts[i].result.ok_or((i, ExecError::Malformed("loop without induction value".into())))?;
        let step = |cta: &mut Self, n: i64| -> Result<(), Fail> {
            cta.tick().map_err(|e| (i, e))?;
            cta.vals[iv] = Some(Val::scalar(Elem::I32, S::I(n)));
            cta.block(body)
        };
        if reverse {
            for n in (lo..hi).rev() {
                step(self, n)?;
            }
        } else {
            for n in lo..hi {
                step(self, n)?;
            }
        }
        Ok(())
    }

    fn get(&self, v: Value) -> Result<&Val, ExecError> {
        self.vals.get(v).and_then(Option::as_ref).ok_or_else(|| ExecError::Malformed(format!("{v} has no value here")))
    }

    fn scalar(&self, v: Value) -> Result<S, ExecError> {
        self.get(v)?.as_scalar()
    }

    fn read_var(&self, var: Var) -> Result<&Val, ExecError> {
        let name = || self.k.vars.get(var).map_or_else(|| var.to_string(), |d| d.name.clone());
        self.vars.get(var).and_then(Option::as_ref).ok_or_else(|| ExecError::ReadBeforeWrite { var: name() })
    }

    fn var_type(&self, var: Var) -> Result<Type, ExecError> {
        self.k.vars.get(var).map(|d| d.ty).ok_or_else(|| ExecError::Malformed(format!("missing variable {var}")))
    }

    fn inst(&mut self, i: Inst) -> Result<(), ExecError> {
        let k = self.k;
        let result = k.insts[i].result;
        let ty = result.map(|r| k.values[r].ty);
        if let Some(t) = ty {
            let (r, c) = dims(t);
            let n = (r as u64).saturating_mul(c as u64);
            if n > self.max_elements {
                return Err(ExecError::TileTooLarge { elements: n, limit: self.max_elements });
            }
        }
        let need = || ty.ok_or_else(|| ExecError::Malformed("operation without a result".into()));
        let out: Option<Val> = match &k.insts[i].op {
            Op::ConstInt(c) => Some(Val::scalar(Elem::I32, S::I(*c)).convert(need()?.elem())?),
            Op::ConstFloat(c) => {
                // One correct rounding from the f64 literal to the result type.
                let t = need()?;
                let x = match t.elem() {
                    Elem::Bf16 => f64_to_bf16(*c).to_f32(),
                    Elem::F16 => f64_to_f16(*c).to_f32(),
                    _ => *c as f32,
                };
                Some(Val::scalar(Elem::F32, S::F(x)).convert(t.elem())?)
            }
            Op::ProgramId(a) => {
                let p = *self.pid.get(usize::from(*a)).ok_or_else(|| ExecError::Malformed(format!("program_id({a})")))?;
                Some(Val::scalar(Elem::I32, S::I(p)).convert(need()?.elem())?)
            }
            Op::Size(n) => {
                let s = *self.bound.sizes.get(n.as_u32() as usize).ok_or_else(|| ExecError::Malformed(format!("size {n}")))?;
                Some(Val::scalar(Elem::I32, S::I(s)).convert(need()?.elem())?)
            }
            Op::ScalarParam(p) => {
                let s = self.bound.scalars.get(*p).copied().flatten().ok_or_else(|| ExecError::Malformed(format!("{p} is not a scalar")))?;
                Some(Val::scalar(need()?.elem(), s.convert(need()?.elem())?))
            }
            Op::Unary(op, a) => Some(unary(*op, self.get(*a)?, need()?)?),
            Op::Binary(op, a, b) => Some(binary(*op, self.get(*a)?, self.get(*b)?, need()?)?),
            Op::Cmp(op, a, b) => Some(compare(*op, self.get(*a)?, self.get(*b)?, need()?)?),
            Op::Select(c, a, b) => Some(select(self.get(*c)?, self.get(*a)?, self.get(*b)?, need()?)?),
            Op::Cast(a, e) => Some(self.get(*a)?.convert(*e)?),
            Op::Splat(a) => {
                let (t, s) = (need()?, self.scalar(*a)?);
                Some(Val::build(t, |_, _| s.convert(t.elem()))?)
            }
            Op::Iota(axis) => {
                let t = need()?;
                Some(Val::build(t, |r, c| S::I(if *axis == Axis::Row { r } else { c } as i64).convert(t.elem()))?)
            }
            Op::Mask(m) => {
                let t = need()?;
                Some(Val::build(t, |r, c| Ok(S::B(if *m == TriMask::StrictLower { c < r } else { c <= r })))?)
            }
            Op::Reduce(op, axis, a) => Some(reduce(*op, *axis, self.get(*a)?, need()?)?),
            Op::Transpose(a) => {
                let (t, a) = (need()?, self.get(*a)?);
                let (rows, cols) = a.dims();
                if dims(t) != (cols, rows) {
                    return Err(ExecError::Malformed(format!("transpose of {} has type {t}", a.ty())));
                }
                Some(Val::build(t, |r, c| a.data[c * cols + r].convert(t.elem()))?)
            }
            Op::Slice { src, row, col } => {
                let (t, a) = (need()?, self.get(*src)?);
                let (r0, c0) = (self.scalar(*row)?.as_i64()?, self.scalar(*col)?.as_i64()?);
                let (r0, c0) = view_origin(a.dims(), r0, c0, dims(t))?;
                let cols = a.dims().1;
                Some(Val::build(t, |r, c| Ok(a.data[(r0 + r) * cols + c0 + c]))?)
            }
            Op::Gather { src, row, col } => {
                let (t, a) = (need()?, self.get(*src)?);
                let shape = dims(t);
                let (ri, ci) = (self.get(*row)?.broadcaster(shape)?, self.get(*col)?.broadcaster(shape)?);
                let (rows, cols) = a.dims();
                Some(Val::build(t, |r, c| {
                    let (i, j) = (ri(r, c).as_i64()?, ci(r, c).as_i64()?);
                    if !(0..rows as i64).contains(&i) || !(0..cols as i64).contains(&j) {
                        return Err(ExecError::GatherOutOfBounds { at_row: r, at_col: c, row: i, col: j, tile_rows: rows, tile_cols: cols });
                    }
                    Ok(a.data[i as usize * cols + j as usize])
                })?)
            }
            Op::Insert { base, value, row, col, rows, cols } => {
                let (t, b, v) = (need()?, self.get(*base)?, self.get(*value)?);
                let (r0, c0) = (self.scalar(*row)?.as_i64()?, self.scalar(*col)?.as_i64()?);
                let block = (*rows as usize, *cols as usize);
                let (r0, c0) = view_origin(b.dims(), r0, c0, block)?;
                let at = v.broadcaster(block)?;
                let bcols = b.dims().1;
                Some(Val::build(t, |r, c| {
                    let inside = (r0..r0 + block.0).contains(&r) && (c0..c0 + block.1).contains(&c);
                    let x = if inside { at(r - r0, c - c0) } else { b.data[r * bcols + c] };
                    x.convert(t.elem())
                })?)
            }
            Op::Scan { src, reverse } => Some(scan(self.get(*src)?, *reverse, need()?)?),
            Op::Load { src, index } => Some(self.load(*src, index, need()?)?),
            Op::Store { dst, index, value, mask } => {
                let v = self.get(*value)?.clone();
                let m = match mask {
                    Some(m) => Some(self.get(*m)?.clone()),
                    None => None,
                };
                self.store(*dst, index, &v, m.as_ref())?;
                None
            }
            Op::ReadVar(var) => Some(self.read_var(*var)?.clone()),
            Op::WriteVar(var, v) => {
                let t = self.var_type(*var)?;
                let val = {
                    let at = self.get(*v)?.broadcaster(dims(t))?;
                    Val::build(t, |r, c| at(r, c).convert(t.elem()))?
                };
                if let Some(w) = self.watch.as_deref_mut() {
                    w.var(*var, &val);
                }
                self.vars[*var] = Some(val);
                None
            }
            Op::Mma { dst, a, b, accumulate, negate } => {
                self.mma(*dst, *a, *b, *accumulate, *negate)?;
                None
            }
            Op::For { .. } => return Err(ExecError::Malformed("loop outside a block walk".into())),
            Op::TmemAlloc { .. } => {
                self.tmem.alloc += 1;
                None
            }
            Op::TmemRelinquish => {
                self.tmem.relinquish += 1;
                None
            }
            Op::TmemDealloc { .. } => {
                self.tmem.dealloc += 1;
                None
            }
        };
        match (result, out) {
            (Some(r), Some(v)) => {
                if let Some(w) = self.watch.as_deref_mut() {
                    w.value(r, &v);
                }
                self.vals[r] = Some(v);
            }
            (None, None) => {}
            _ => return Err(ExecError::Malformed("result presence does not match the operation".into())),
        }
        Ok(())
    }

    /// Resolves an index list to a [`Region`].
    fn resolve(&self, index: &[Index]) -> Result<Region, ExecError> {
        let mut dims_out = Vec::with_capacity(index.len());
        let mut lens = vec![];
        for ix in index {
            match ix {
                Index::Point(v) => dims_out.push((self.scalar(*v)?.as_i64()?, None)),
                Index::Range { start, len } => {
                    lens.push(*len as usize);
                    dims_out.push((self.scalar(*start)?.as_i64()?, Some(lens.len() - 1)));
                }
            }
        }
        let shape = match lens.as_slice() {
            [] => (1, 1),
            [n] => (*n, 1),
            [m, n] => (*m, *n),
            _ => return Err(ExecError::Malformed("more than two ranged indices".into())),
        };
        Ok(Region { dims: dims_out, shape, ranges: lens.len() })
    }

    /// The tensor position, per dimension, of tile element `(r, c)` of an access at `dims`.
    fn position(dims: &[(i64, Option<usize>)], r: usize, c: usize) -> impl Iterator<Item = i64> + '_ {
        dims.iter().map(move |&(start, which)| match which {
            None => start,
            Some(0) => start + r as i64,
            Some(_) => start + c as i64,
        })
    }

    /// Flat offset of tile element `(r, c)` in a tensor of `shape`, or `None` when out of bounds.
    fn offset(dims: &[(i64, Option<usize>)], shape: &[usize], r: usize, c: usize) -> Option<usize> {
        let mut off = 0usize;
        for (x, &extent) in Self::position(dims, r, c).zip(shape) {
            if x < 0 || x >= extent as i64 {
                return None;
            }
            off = off * extent + x as usize;
        }
        Some(off)
    }

    fn load(&self, src: crate::ir::Param, index: &[Index], t: Type) -> Result<Val, ExecError> {
        let g = self.bound.tensors.get(src).and_then(Option::as_ref).ok_or_else(|| ExecError::Malformed(format!("{src} is not a tensor")))?;
        if g.shape.len() != index.len() {
            return Err(ExecError::Malformed(format!("{} indices for a rank-{} tensor", index.len(), g.shape.len())));
        }
        let Region { dims: ix, shape, .. } = self.resolve(index)?;
        if dims(t) != shape {
            return Err(ExecError::Malformed(format!("load of a {shape:?} region has type {t}")));
        }
        let zero = S::I(0).convert(t.elem())?;
        let padded = self.k.params[src].edge == Edge::Zeros;
        Val::build(t, |r, c| match Self::offset(&ix, &g.shape, r, c) {
            Some(o) => g.data[o].convert(t.elem()),
            None if padded => Ok(zero),
            None => Err(self.past_edge(src, &ix, &g.shape, r, c, false)),
        })
    }

    /// [`ExecError::PastEdge`] for tile element `(r, c)` of an access at `dims`.
    fn past_edge(&self, p: crate::ir::Param, dims: &[(i64, Option<usize>)], shape: &[usize], r: usize, c: usize, store: bool) -> ExecError {
        let index = Self::position(dims, r, c).collect();
        ExecError::PastEdge { tensor: self.k.params[p].name.clone(), index, shape: shape.to_vec(), store }
    }

    fn store(&mut self, dst: crate::ir::Param, index: &[Index], v: &Val, mask: Option<&Val>) -> Result<(), ExecError> {
        let Region { dims: ix, shape: (rows, cols), ranges: nranges } = self.resolve(index)?;
        let grid = self.bound.grid;
        let me = linear_cta(self.pid, grid) + 1;
        let g = self.bound.tensors[dst].as_mut().ok_or_else(|| ExecError::Malformed(format!("{dst} is not a tensor")))?;
        if g.shape.len() != index.len() {
            return Err(ExecError::Malformed(format!("{} indices for a rank-{} tensor", index.len(), g.shape.len())));
        }
        // A single range takes a row vector `[1, n]` as well as a column vector `[n, 1]`.
        let row_vector = nranges == 1 && v.dims() == (1, rows) && rows != 1;
        let bc = if row_vector { None } else { Some(v.broadcaster((rows, cols))?) };
        let keep = match mask {
            Some(m) => Some(m.broadcaster((rows, cols))?),
            None => None,
        };
        for r in 0..rows {
            for c in 0..cols {
                if let Some(keep) = &keep {
                    if !keep(r, c).as_bool()? {
                        continue;
                    }
                }
                let Some(o) = Self::offset(&ix, &g.shape, r, c) else {
                    if self.k.params[dst].edge == Edge::Zeros {
                        continue;
                    }
                    let shape = g.shape.clone();
                    return Err(self.past_edge(dst, &ix, &shape, r, c, true));
                };
                match g.writers.get(o).copied() {
                    Some(w) if w != 0 && w != me => {
                        let tensor = self.k.params[dst].name.clone();
                        return Err(ExecError::WriteRace { tensor, index: unflatten(o, &g.shape), other: pid_of(w - 1, grid) });
                    }
                    Some(_) => g.writers[o] = me,
                    None => {}
                }
                let s = match &bc {
                    Some(at) => at(r, c),
                    None => v.data[r],
                };
                g.data[o] = s.convert(g.elem)?;
            }
        }
        Ok(())
    }

    /// `D (+)= ± A·B` in K steps of 16, associated with the old D as the lowering for
    /// `self.target` does ([`mma::element`]), then rounded to D's element type.
    fn mma(&mut self, dst: Var, a: MmaOperand, b: MmaOperand, accumulate: bool, negate: bool) -> Result<(), ExecError> {
        let dt = self.var_type(dst)?;
        let oriented = |o: MmaOperand| -> Result<(Vec<f32>, usize, usize, bool), ExecError> {
            let v = self.read_var(o.var)?;
            let (r, c) = v.dims();
            Ok(if o.transposed { (v.f32s()?, c, r, true) } else { (v.f32s()?, r, c, false) })
        };
        let (av, m, ka, at) = oriented(a)?;
        let (bv, kb, n, bt) = oriented(b)?;
        if ka != kb || dims(dt) != (m, n) {
            return Err(ExecError::Malformed(format!("MMA shapes do not chain: D {dt}, A {m}x{ka}, B {kb}x{n}")));
        }
        let old = if accumulate { Some(self.read_var(dst)?.f32s()?) } else { None };
        // Element (i, j) of an operand stored as `rows x cols`, seen through its transposition.
        let a_at = |i: usize, kk: usize| if at { av[kk * m + i] } else { av[i * ka + kk] };
        let b_at = |kk: usize, j: usize| if bt { bv[j * kb + kk] } else { bv[kk * n + j] };
        // A's rows and B's columns, each contiguous, for `mma::row` (products of bf16/f16
        // values are exact in f32).
        let a_rows: Vec<f32> = (0..m).flat_map(|i| (0..ka).map(move |kk| a_at(i, kk))).collect();
        let b_cols: Vec<f32> = (0..n).flat_map(|j| (0..ka).map(move |kk| b_at(kk, j))).collect();
        // Which lowering's association applies (mma.rs): sm_100a seeds tcgen05.mma with D_old
        // for a TMEM accumulator; every other accumulator takes the mma.sync path.
        let seeded = mma::seeds_accumulator(self.target, self.k, &self.roles, dst);
        let mut d = Vec::with_capacity(m * n);
        for i in 0..m {
            mma::row(&a_rows[i * ka..(i + 1) * ka], &b_cols, n, old.as_ref().map(|o| &o[i * n..(i + 1) * n]), negate, seeded, &mut d);
        }
        let val = Val::build(dt, |i, j| S::F(d[i * n + j]).convert(dt.elem()))?;
        if let Some(w) = self.watch.as_deref_mut() {
            w.var(dst, &val);
        }
        self.vars[dst] = Some(val);
        Ok(())
    }
}
