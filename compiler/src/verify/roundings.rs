//! Rounding points of an operator (the `R` of verify-on-compile's bound `λ √R κu`): the sites
//! where a value is narrowed — a narrowing float conversion (`bf16(…)`, `f16(…)`) or a store of
//! a wider value into a narrower tensor — each counted once per launch (a site inside a loop
//! rounds different data each iteration, and the decays damp what earlier iterations carry
//! forward; see the module docs of [`super`]).
//!
//! [`rounding_points`] counts every site of every launched kernel. [`output_roundings`] counts,
//! per output, only the sites whose results reach it: the data dependences of the output's
//! stores, through values, variables (loop-carried included), matrix products, and across
//! launches through the tensors one kernel writes and a later one reads. That is the `R` of the
//! probabilistic argument (Higham & Mary 2019, Thm 2.4: the independent roundings that
//! perturb this output), never more than the operator's whole count plus its rounded inputs:
//! `ai` of a forward, which reads no rounded `w`/`u`, is judged by its own sites, not by the
//! state's. Indices, masks and `select` conditions count as dependences; loop bounds do not
//! (a rounded value steering a loop's trip count would be missed; the operators' bounds are
//! i32 arithmetic on sizes and offset tables).
//!
//! The same analysis counts, for the operator's wide twin ([`super::widen`]), the f32
//! *arithmetic* roundings instead ([`Sites::Arithmetic`]): with nothing narrowed, those are the
//! only roundings left, each float operation one (an MMA one per K = 16 step, a reduction or
//! scan one per element it folds), again once per launch.

use std::collections::{BTreeMap, BTreeSet};

use cranelift_entity::SecondaryMap;

use crate::ir::{Elem, Inst, Kernel, Module, Op, Operator, Param, ParamKind, Value, Var};

/// kverify's dtype of an element type; `None` for `bool` (never in memory).
pub(crate) fn kverify_dtype(e: Elem) -> Option<kverify::tensor::DType> {
    use kverify::tensor::DType as D;
    match e {
        Elem::Bf16 => Some(D::Bf16),
        Elem::F16 => Some(D::F16),
        Elem::F32 => Some(D::F32),
        Elem::I32 => Some(D::I32),
        Elem::Bool => None,
    }
}

/// Unit roundoff of a float element type (kverify's table, Higham Table 2.1); `None` for
/// non-floats.
pub(crate) fn unit_roundoff(e: Elem) -> Option<f64> {
    kverify_dtype(e).filter(|d| !d.is_integer()).map(|d| d.unit_roundoff())
}

/// Whether converting a float of type `from` to `to` rounds (a narrowing float conversion).
fn wider(from: Elem, to: Elem) -> bool {
    from.is_float() && to.is_float() && from.size_bytes() > to.size_bytes()
}

/// Which instructions count as rounding sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sites {
    /// Narrowing float conversions and narrowing stores (the 16-bit build's bound).
    Narrowing,
    /// Every float operation (the wide twin's bound, where nothing narrows).
    Arithmetic,
}

/// How many roundings site `i` of `k` makes on one output element's path under `rule` (0: not
/// a site). Under [`Sites::Arithmetic`]: a float operation one (its result type is a float;
/// `exp2` two, being within one ulp rather than half of one; `exp` three, `x·log2 e` then `exp2`; negation, `abs`, `min` and `max` round nothing and are
/// counted anyway), an MMA once per K = 16 step ([`crate::interp::mma`]: one f32 rounding per
/// tensor-core instruction) plus one for its products (exact for 16-bit operands, rounded in
/// the wide twin, each term by at most u) plus one for adding the old accumulator where the
/// lowering adds it after the steps (`mma.sync`; counted for every accumulating MMA), a
/// reduction or scan once per element it folds.
fn weight(k: &Kernel, i: Inst, rule: Sites) -> usize {
    match rule {
        Sites::Narrowing => usize::from(narrows_to(k, i).is_some()),
        Sites::Arithmetic => {
            let float = |v: Value| k.value_type(v).elem().is_float();
            let float_result = k.insts[i].result.is_some_and(float);
            match &k.insts[i].op {
                // exp2 is faithful, not correctly rounded (within one ulp, 2u relative:
                // crate::ir::exp2): two roundings; exp one more for x·log2 e.
                Op::Unary(crate::ir::UnOp::Exp2, _) if float_result => 2,
                Op::Unary(crate::ir::UnOp::Exp, _) if float_result => 3,
                Op::Unary(..) | Op::Binary(..) if float_result => 1,
                Op::Reduce(_, axis, a) if float(*a) => {
                    let (r, c) = k.value_type(*a).shape().unwrap_or((1, 1));
                    (if *axis == crate::ir::Axis::Row { c } else { r }) as usize
                }
                Op::Scan { src, .. } if float(*src) => k.value_type(*src).shape().map_or(1, |(r, _)| r as usize),
                Op::Mma { a, accumulate, .. } => {
                    let (r, c) = k.vars[a.var].ty.shape().unwrap_or((16, 16));
                    (if a.transposed { r } else { c }).div_ceil(16) as usize + 1 + usize::from(*accumulate)
                }
                _ => 0,
            }
        }
    }
}

/// The element type instruction `i` of `k` narrows to, if it is a rounding site.
fn narrows_to(k: &Kernel, i: Inst) -> Option<Elem> {
    match &k.insts[i].op {
        Op::Cast(v, e) if wider(k.value_type(*v).elem(), *e) => Some(*e),
        Op::Store { dst, value, .. } => match &k.params[*dst].kind {
            ParamKind::Tensor { elem, .. } if wider(k.value_type(*value).elem(), *elem) => Some(*elem),
            _ => None,
        },
        _ => None,
    }
}

/// `(R, u)`: every rounding site of every launched kernel (each once per launch) and the unit
/// roundoff of the narrowest float they round to (f32's when there is none).
pub fn rounding_points(module: &Module, op: &Operator) -> (usize, f64) {
    let mut r = 0;
    let mut u = kverify::tensor::DType::F32.unit_roundoff();
    for l in &op.launches {
        let Some(k) = module.kernels.iter().find(|k| k.name == l.kernel) else { continue };
        k.walk(|i| {
            if let Some(x) = narrows_to(k, i).and_then(unit_roundoff) {
                r += 1;
                u = u.max(x);
            }
        });
    }
    (r.max(1), u)
}

/// What a value, variable or output tensor of one kernel depends on.
#[derive(Clone, Debug, Default, PartialEq)]
struct Deps {
    /// Rounding sites of this kernel.
    sites: BTreeSet<Inst>,
    /// Tensor parameters read.
    params: BTreeSet<Param>,
}

impl Deps {
    /// Adds `o`'s dependences; whether anything was new.
    fn absorb(&mut self, o: &Deps) -> bool {
        let (a, b) = (self.sites.len(), self.params.len());
        self.sites.extend(&o.sites);
        self.params.extend(&o.params);
        (a, b) != (self.sites.len(), self.params.len())
    }
}

/// Per output tensor parameter of `k`, the rounding sites and input tensors its stores depend
/// on: a fixed point over the kernel (a variable's dependences are those of every write to it,
/// so values carried around a loop are covered).
fn kernel_outputs(k: &Kernel, rule: Sites) -> BTreeMap<Param, Deps> {
    let mut vars: SecondaryMap<Var, Deps> = SecondaryMap::new();
    let mut outs: BTreeMap<Param, Deps> = BTreeMap::new();
    loop {
        let mut values: SecondaryMap<Value, Deps> = SecondaryMap::new();
        let mut changed = false;
        k.walk(|i| {
            let mut d = Deps::default();
            for a in k.inst_args(i) {
                d.absorb(&values[a]);
            }
            match &k.insts[i].op {
                Op::Load { src, .. } => {
                    d.params.insert(*src);
                    // A tensor this kernel also writes: what its stores carried comes back.
                    if let Some(o) = outs.get(src) {
                        d.absorb(o);
                    }
                }
                Op::ReadVar(v) => {
                    d.absorb(&vars[*v]);
                }
                Op::WriteVar(v, _) => changed |= vars[*v].absorb(&d),
                Op::Mma { dst, a, b, .. } => {
                    let mut m = vars[a.var].clone();
                    m.absorb(&vars[b.var]);
                    if weight(k, i, rule) > 0 {
                        m.sites.insert(i);
                    }
                    changed |= vars[*dst].absorb(&m);
                }
                Op::Store { dst, .. } => {
                    if weight(k, i, rule) > 0 {
                        d.sites.insert(i);
                    }
                    changed |= outs.entry(*dst).or_default().absorb(&d);
                }
                _ => {}
            }
            if !matches!(k.insts[i].op, Op::Store { .. } | Op::Mma { .. }) && weight(k, i, rule) > 0 {
                d.sites.insert(i);
            }
            if let Some(r) = k.insts[i].result {
                values[r] = d;
            }
        });
        if !changed {
            return outs;
        }
    }
}

/// Per output parameter of `op` (by name): the number of rounding sites whose results reach
/// it, each once per launch (at least 1). `rounded_inputs` names inputs that arrive rounded to
/// their dtype (a forward's saved `ai`, rounded from the oracle's): one site each, in every
/// output that reads them. (The unit roundoff stays the operator's, [`rounding_points`]: an
/// output whose own sites are all f32 still carries f32 accumulation errors over long sums,
/// which the bf16 `u` covers and one f32 rounding would not.)
pub fn output_roundings(module: &Module, op: &Operator, rounded_inputs: &[&str]) -> BTreeMap<String, usize> {
    output_sites(module, op, rounded_inputs, Sites::Narrowing)
}

/// As [`output_roundings`], counting the sites `rule` names, each with its [`weight`].
pub fn output_sites(module: &Module, op: &Operator, rounded_inputs: &[&str], rule: Sites) -> BTreeMap<String, usize> {
    // For every operator parameter or buffer: the (launch, site) pairs its contents depend on;
    // an input's rounding as launch `usize::MAX`.
    let mut deps: BTreeMap<String, BTreeSet<(usize, Inst)>> = BTreeMap::new();
    for (n, p) in op.params.iter().enumerate() {
        if let (true, ParamKind::Tensor { elem, output: false, .. }) = (rounded_inputs.contains(&p.name.as_str()), &p.kind) {
            if elem.is_float() {
                deps.entry(p.name.clone()).or_default().insert((usize::MAX, Inst::from_u32(n as u32)));
            }
        }
    }
    for (l, launch) in op.launches.iter().enumerate() {
        let Some(k) = module.kernels.iter().find(|k| k.name == launch.kernel) else { continue };
        let bound = |p: Param| launch.args.iter().find(|(kp, _)| *kp == k.params[p].name).map(|(_, name)| name.clone());
        // What the tensors held before this launch: its reads see that, whatever order its
        // outputs are merged in.
        let before = deps.clone();
        for (p, d) in kernel_outputs(k, rule) {
            let Some(name) = bound(p) else { continue };
            let mut set: BTreeSet<(usize, Inst)> = d.sites.iter().map(|&i| (l, i)).collect();
            for q in d.params {
                if let Some(from) = bound(q).and_then(|n| before.get(&n)) {
                    set.extend(from);
                }
            }
            deps.entry(name).or_default().extend(set);
        }
    }
    op.params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Tensor { output: true, .. }))
        .map(|p| {
            let weigh = |&(l, i): &(usize, Inst)| {
                // An input's rounding (launch usize::MAX) is one site.
                let k = op.launches.get(l).and_then(|launch| module.kernels.iter().find(|k| k.name == launch.kernel));
                k.map_or(1, |k| weight(k, i, rule))
            };
            (p.name.clone(), deps.get(&p.name).map_or(0, |d| d.iter().map(weigh).sum::<usize>()).max(1))
        })
        .collect()
}
