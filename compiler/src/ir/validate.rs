//! The IR validator: structural and type checks run between passes (in tests and debug
//! builds). Errors are collected, not short-circuited.
//!
//! Checks, in order: entity references exist; every value is defined before use and in scope
//! (defined in the same or an enclosing block); operand and result types agree; every variable
//! is written (declared) before it is read and accessed only inside its declaring block; MMA operand
//! spaces and shapes; TMEM lifecycle shape when the planner has run (exactly one alloc, one
//! relinquish and one dealloc at the kernel's top level, in that order, around every TMEM
//! access); and the warp-to-lane-quarter rule of `tcgen05.ld/st` for the CTA's warps.

use std::collections::HashSet;

use super::types::broadcast;
use super::*;

/// One validation error.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kernel}: {}{message}", inst.map(|i| format!("{i}: ")).unwrap_or_default())]
pub struct ValidateError {
    /// Kernel name.
    pub kernel: String,
    /// The offending instruction, if any.
    pub inst: Option<Inst>,
    /// What is wrong.
    pub message: String,
}

/// A kernel that passed the validator, with the analysis its consumers need (program points;
/// liveness and def-use are derived from them). Only [`validate`] makes one, and the planners,
/// the back end and the interpreter take one as their argument, so unvalidated IR cannot reach
/// them (naga's `ModuleInfo` is the model).
#[derive(Clone, Debug)]
pub struct Validated<'k> {
    kernel: &'k Kernel,
    points: ProgramPoints,
}

impl<'k> Validated<'k> {
    /// The kernel.
    pub fn kernel(&self) -> &'k Kernel {
        self.kernel
    }

    /// Program points of every instruction and the extent of every loop.
    pub fn points(&self) -> &ProgramPoints {
        &self.points
    }
}

/// Validates every kernel of a module.
///
/// # Errors
/// All problems found, in program order.
pub fn validate_module(m: &Module) -> Result<(), Vec<ValidateError>> {
    let errs: Vec<ValidateError> = m.kernels.iter().flat_map(|k| validate(k).err().unwrap_or_default()).collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Validates one kernel and returns it with its analysis.
///
/// # Errors
/// All problems found, in program order.
pub fn validate(k: &Kernel) -> Result<Validated<'_>, Vec<ValidateError>> {
    let mut cx = Cx { k, errs: vec![], defined: HashSet::new(), vars_in_scope: HashSet::new(), declared: HashSet::new() };
    cx.block(k.body, true);
    cx.lifecycle();
    cx.lane_quarters();
    cx.residency();
    if cx.errs.is_empty() {
        Ok(Validated { kernel: k, points: ProgramPoints::compute(k) })
    } else {
        Err(cx.errs)
    }
}

struct Cx<'a> {
    k: &'a Kernel,
    errs: Vec<ValidateError>,
    /// Values visible at the current point (scoped by block).
    defined: HashSet<Value>,
    /// Variables visible at the current point: declared (first written) in this block or an
    /// enclosing one.
    vars_in_scope: HashSet<Var>,
    /// Variables declared so far, in or out of scope.
    declared: HashSet<Var>,
}

impl Cx<'_> {
    fn err(&mut self, inst: Option<Inst>, message: String) {
        self.errs.push(ValidateError { kernel: self.k.name.clone(), inst, message });
    }

    fn block(&mut self, b: Block, top: bool) {
        let Some(data) = self.k.blocks.get(b) else {
            self.err(None, format!("missing block {b}"));
            return;
        };
        let mut local = vec![];
        let mut local_vars = vec![];
        for &i in &data.insts {
            if !self.k.insts.is_valid(i) {
                self.err(None, format!("missing instruction {i}"));
                continue;
            }
            for a in self.k.inst_args(i) {
                if !self.k.values.is_valid(a) {
                    self.err(Some(i), format!("uses missing value {a}"));
                } else if !self.defined.contains(&a) {
                    self.err(Some(i), format!("uses {a} before its definition or outside its scope"));
                }
            }
            // A variable's first access writes it without reading it (its declaration), and
            // later accesses stay in the declaring block or one nested in it: the DSL's `let`
            // scoping, which the shared-memory and TMEM planners rely on (a variable declared
            // in a loop body is dead between iterations and after the loop). IR read from text
            // that breaks it is refused here rather than planned wrongly.
            let (r, w) = self.k.inst_vars(i);
            for &v in r.iter().chain(&w) {
                if !self.k.vars.is_valid(v) {
                    self.err(Some(i), format!("uses missing variable {v}"));
                } else if self.declared.insert(v) {
                    if r.contains(&v) {
                        self.err(Some(i), format!("reads variable {v} (`{}`) before any write declares it", self.k.vars[v].name));
                    }
                    self.vars_in_scope.insert(v);
                    local_vars.push(v);
                } else if !self.vars_in_scope.contains(&v) {
                    let m = format!("accesses variable {v} (`{}`) outside the block that declares it (a variable declared in a loop body does not outlive an iteration)", self.k.vars[v].name);
                    self.err(Some(i), m);
                }
            }
            if matches!(self.k.insts[i].op, Op::TmemAlloc { .. } | Op::TmemDealloc { .. } | Op::TmemRelinquish) && !top {
                self.err(Some(i), "TMEM lifecycle instruction inside a loop".into());
            }
            self.types(i);
            if let Op::For { body, .. } = self.k.insts[i].op {
                // The induction variable is visible inside the body only.
                let iv = self.k.insts[i].result;
                if let Some(iv) = iv {
                    self.defined.insert(iv);
                }
                self.block(body, false);
                if let Some(iv) = iv {
                    self.defined.remove(&iv);
                }
            } else if let Some(r) = self.k.insts[i].result {
                self.defined.insert(r);
                local.push(r);
            }
        }
        for v in local {
            self.defined.remove(&v);
        }
        for v in local_vars {
            self.vars_in_scope.remove(&v);
        }
    }

    fn ty(&self, v: Value) -> Option<Type> {
        self.k.values.get(v).map(|d| d.ty)
    }

    fn types(&mut self, i: Inst) {
        let k = self.k;
        let res = k.insts[i].result.and_then(|r| self.ty(r));
        let op = &k.insts[i].op;
        let want_result = !matches!(op, Op::Store { .. } | Op::WriteVar(..) | Op::Mma { .. } | Op::TmemAlloc { .. } | Op::TmemRelinquish | Op::TmemDealloc { .. });
        if want_result != res.is_some() {
            self.err(Some(i), format!("result presence does not match the operation ({})", if want_result { "missing" } else { "unexpected" }));
            return;
        }
        let scalar_i32 = Type::Scalar(Elem::I32);
        match op {
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) => {
                let (Some(ta), Some(tb)) = (self.ty(*a), self.ty(*b)) else { return };
                match broadcast(ta, tb) {
                    Err(()) => self.err(Some(i), format!("operands {ta} and {tb} do not broadcast")),
                    Ok(shape) => {
                        if let Some(r) = res {
                            if r.shape() != shape {
                                self.err(Some(i), format!("result {r} does not have the broadcast shape"));
                            }
                        }
                    }
                }
            }
            Op::Select(c, _, _) => {
                if let Some(tc) = self.ty(*c) {
                    if tc.elem() != Elem::Bool {
                        self.err(Some(i), format!("select condition is {tc}, not bool"));
                    }
                }
            }
            Op::Load { src, index } | Op::Store { dst: src, index, .. } => {
                let Some(p) = k.params.get(*src) else {
                    self.err(Some(i), format!("missing parameter {src}"));
                    return;
                };
                let ParamKind::Tensor { shape, output, .. } = &p.kind else {
                    self.err(Some(i), format!("{src} is not a tensor"));
                    return;
                };
                if shape.len() != index.len() {
                    self.err(Some(i), format!("{} indices for a rank-{} tensor", index.len(), shape.len()));
                }
                if matches!(op, Op::Store { .. }) && !output {
                    self.err(Some(i), format!("store to input tensor {}", p.name));
                }
                let ranges: Vec<u32> = index.iter().filter_map(|ix| if let Index::Range { len, .. } = ix { Some(*len) } else { None }).collect();
                if ranges.len() > 2 {
                    self.err(Some(i), "more than two ranged indices".into());
                }
                for ix in index {
                    let v = match ix {
                        Index::Point(v) | Index::Range { start: v, .. } => *v,
                    };
                    if self.ty(v).is_some_and(|t| t != scalar_i32) {
                        self.err(Some(i), format!("index {v} is not an i32 scalar"));
                    }
                }
                if let Op::Store { mask: Some(m), .. } = op {
                    if self.ty(*m).is_some_and(|t| t.elem() != Elem::Bool) {
                        self.err(Some(i), format!("store mask {m} is not bool"));
                    }
                }
                if let (Op::Load { .. }, Some(r)) = (op, res) {
                    let expect = match ranges.as_slice() {
                        [] => None,
                        [n] => Some((*n, 1)),
                        [m, n, ..] => Some((*m, *n)),
                    };
                    if r.shape() != expect {
                        self.err(Some(i), format!("load result {r} does not match its ranges"));
                    }
                }
            }
            Op::WriteVar(var, v) => {
                if let (Some(vd), Some(t)) = (k.vars.get(*var), self.ty(*v)) {
                    if vd.ty.shape() != t.shape() {
                        self.err(Some(i), format!("writes {t} into {var} of type {}", vd.ty));
                    }
                }
            }
            Op::ReadVar(var) => {
                if let (Some(vd), Some(r)) = (k.vars.get(*var), res) {
                    if vd.ty != r {
                        self.err(Some(i), format!("reads {var} of type {} as {r}", vd.ty));
                    }
                }
            }
            Op::Mma { dst, a, b, .. } => self.mma(i, *dst, *a, *b),
            Op::Slice { src, row, col } => {
                self.indices(i, &[*row, *col]);
                if let (Some(t), Some(r)) = (self.ty(*src), res) {
                    let (sr, sc) = t.shape().unwrap_or((0, 0));
                    let (vr, vc) = r.shape().unwrap_or((1, 1));
                    if t.shape().is_none() || vr > sr || vc > sc || r.elem() != t.elem() {
                        self.err(Some(i), format!("a {r} view of {t}"));
                    }
                }
            }
            Op::Gather { src, row, col } => {
                let (tr, tc) = (self.ty(*row), self.ty(*col));
                for (v, t) in [(row, tr), (col, tc)] {
                    if t.is_some_and(|t| t.elem() != Elem::I32) {
                        self.err(Some(i), format!("gather index {v} is not i32"));
                    }
                }
                if let (Some(t), Some(r), Some(tr), Some(tc)) = (self.ty(*src), res, tr, tc) {
                    let shape = r.shape().unwrap_or((1, 1));
                    if t.shape().is_none() || r.elem() != t.elem() || !super::broadcasts_to(tr, shape) || !super::broadcasts_to(tc, shape) {
                        self.err(Some(i), format!("a {r} gather of {t} at {tr}, {tc}"));
                    }
                }
            }
            Op::Insert { base, value, row, col, rows, cols } => {
                self.indices(i, &[*row, *col]);
                if let (Some(tb), Some(tv), Some(r)) = (self.ty(*base), self.ty(*value), res) {
                    let (br, bc) = tb.shape().unwrap_or((0, 0));
                    if r != tb || *rows == 0 || *cols == 0 || *rows > br || *cols > bc || !super::broadcasts_to(tv, (*rows, *cols)) {
                        self.err(Some(i), format!("insert of {tv} as a {rows}x{cols} block of {tb} typed {r}"));
                    }
                }
            }
            Op::Scan { src, .. } => {
                if let (Some(t), Some(r)) = (self.ty(*src), res) {
                    if t.shape().is_none() || r.shape() != t.shape() || matches!(t.elem(), Elem::Bool) {
                        self.err(Some(i), format!("scan of {t} typed {r}"));
                    }
                }
            }
            Op::For { lo, hi, .. } => {
                for v in [lo, hi] {
                    if self.ty(*v).is_some_and(|t| t != scalar_i32) {
                        self.err(Some(i), format!("loop bound {v} is not an i32 scalar"));
                    }
                }
            }
            _ => {}
        }
    }

    /// View coordinates are i32 scalars.
    fn indices(&mut self, i: Inst, vs: &[Value]) {
        for &v in vs {
            if self.ty(v).is_some_and(|t| t != Type::Scalar(Elem::I32)) {
                self.err(Some(i), format!("view index {v} is not an i32 scalar"));
            }
        }
    }

    fn mma(&mut self, i: Inst, dst: Var, a: MmaOperand, b: MmaOperand) {
        let k = self.k;
        let (Some(d), Some(av), Some(bv)) = (k.vars.get(dst), k.vars.get(a.var), k.vars.get(b.var)) else { return };
        let oriented = |t: Type, tr: bool| t.shape().map(|(r, c)| if tr { (c, r) } else { (r, c) });
        let (Some((m, n)), Some((am, ak)), Some((bk, bn))) = (d.ty.shape(), oriented(av.ty, a.transposed), oriented(bv.ty, b.transposed)) else {
            self.err(Some(i), "MMA operands must be tiles".into());
            return;
        };
        if am != m || bn != n || ak != bk {
            self.err(Some(i), format!("MMA shapes do not chain: D {m}x{n}, A {am}x{ak}, B {bk}x{bn}"));
        }
        if d.space == Space::Smem {
            self.err(Some(i), format!("MMA accumulator {dst} is in shared memory"));
        }
        if av.space == Space::Reg || bv.space == Space::Reg {
            self.err(Some(i), "MMA operands must be in shared or tensor memory".into());
        }
        if bv.space == Space::Tmem {
            self.err(Some(i), "MMA B operand must be in shared memory".into());
        }
    }

    /// After the TMEM planner: one alloc, one relinquish, one dealloc at top level, in that order,
    /// with every TMEM access between the alloc and the dealloc.
    fn lifecycle(&mut self) {
        let k = self.k;
        let pp = ProgramPoints::compute(k);
        let (mut allocs, mut relinqs, mut deallocs) = (vec![], vec![], vec![]);
        let mut tmem_uses = vec![];
        k.walk(|i| {
            match k.insts[i].op {
                Op::TmemAlloc { columns } => allocs.push((i, columns)),
                Op::TmemRelinquish => relinqs.push(i),
                Op::TmemDealloc { columns } => deallocs.push((i, columns)),
                _ => {}
            }
            let (r, w) = k.inst_vars(i);
            if r.iter().chain(&w).any(|v| k.vars.get(*v).is_some_and(|d| d.space == Space::Tmem)) {
                tmem_uses.push(i);
            }
        });
        if allocs.is_empty() && relinqs.is_empty() && deallocs.is_empty() {
            return; // planner not run yet, or no TMEM
        }
        if allocs.len() != 1 || relinqs.len() != 1 || deallocs.len() != 1 {
            self.err(None, format!("TMEM lifecycle is {} alloc / {} relinquish / {} dealloc, not 1/1/1", allocs.len(), relinqs.len(), deallocs.len()));
            return;
        }
        let ((a, acols), r, (d, dcols)) = (allocs[0], relinqs[0], deallocs[0]);
        if acols != dcols {
            self.err(Some(d), format!("dealloc of {dcols} columns after an alloc of {acols}"));
        }
        if !(32..=512).contains(&acols) || !acols.is_power_of_two() {
            self.err(Some(a), format!("alloc of {acols} columns is not a power of two in 32..=512"));
        }
        let (pa, pr, pd) = (pp.point[a], pp.point[r], pp.point[d]);
        if !(pa < pr && pr < pd) {
            self.err(Some(r), "relinquish must come after the alloc and before the dealloc".into());
        }
        for u in tmem_uses {
            if !(pa < pp.point[u] && pp.point[u] < pd) {
                self.err(Some(u), "TMEM access outside the alloc..dealloc window".into());
            }
        }
    }

    /// `ctas_per_sm` must be residency its target can hold: N CTAs of `threads` threads within
    /// the resident thread and CTA limits ([`crate::target::TargetInfo`]), once per target.
    fn residency(&mut self) {
        let k = self.k;
        for (i, &(t, n, _)) in k.ctas_per_sm.iter().enumerate() {
            let (threads, ctas) = (t.info().max_threads_per_sm, t.info().max_ctas_per_sm);
            if n == 0 || n > t.info().most_resident_ctas(k.threads) {
                self.err(None, format!("ctas_per_sm {} {n} with {} threads per CTA: an SM holds at most {ctas} CTAs and {threads} threads", t.name(), k.threads));
            }
            if k.ctas_per_sm[..i].iter().any(|e| e.0 == t) {
                self.err(None, format!("ctas_per_sm {} given twice", t.name()));
            }
        }
    }

    /// Warp `w` may only touch lanes `32*(w%4)..+32` ([`crate::layout::tmem`]); a CTA using TMEM
    /// must have whole warpgroups so that every lane quarter of a 128-lane buffer has an owning
    /// warp, and every row a thread holds must live in a lane that thread can reach.
    fn lane_quarters(&mut self) {
        let k = self.k;
        if !k.vars.values().any(|v| v.space == Space::Tmem) {
            return;
        }
        if k.threads == 0 || k.threads % 128 != 0 {
            self.err(None, format!("{} threads per CTA: TMEM access needs whole warpgroups (multiples of 128)", k.threads));
            return;
        }
        for (v, d) in k.vars.iter() {
            if d.space == Space::Tmem {
                if let Some((rows, _)) = d.ty.shape() {
                    if rows != 64 && rows != 128 {
                        self.err(None, format!("TMEM buffer {v} has {rows} rows; lanes must be 64 or 128"));
                    } else if let Err((w, l, row, accessed, want)) = crate::layout::tmem::check_quarters(rows) {
                        // The back end addresses TMEM through these maps: a thread must reach
                        // the lane its row lives in from its own lane quarter.
                        self.err(None, format!("TMEM buffer {v}: thread {l} of warp {w} holds row {row}, which lives in lane {want}, but it accesses lane {accessed} (lane quarter rule of tcgen05.ld/st)"));
                    }
                }
            }
        }
    }
}
