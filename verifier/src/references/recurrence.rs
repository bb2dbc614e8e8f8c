//! The gated-linear-recurrence family as operator classes: `gdn`, `kda`, `gla`, `ssd`, `la`.
//!
//! Each class is one family member of [`crate::recurrence::family`], judged as a candidate
//! operator by the gates like every other class (`kverify check --op gdn`; the backward, as for
//! `sdpa`, when the candidate declares one). There is no second recurrence here: the reference
//! forward and backward are [`crate::recurrence::batch::run`] with [`Method::Serial`], i.e. each
//! member's own token-serial fp64 definition (gdn-math.md §1–2, fla's `naive_recurrent_*`),
//! which `tests/recurrence_family.rs` checks against the general recurrence and the chunkwise
//! algorithm.
//!
//! **Dims** (fla's layout, no varlen): `B` batch (1..4, native 1), `T` tokens (1..1024, native
//! 128: two whole chunks of 64, so partial chunks are CMP-03's business), `H` heads (1..8,
//! native 2), `K` key dim and `V` value dim (fixed by CMP-03, 1..256, native 16; a kernel built
//! for K = V = 128 is judged with `--dims K=128,V=128`). Constraint: `(T + 1)·K·V ≤`
//! [`STATE_BUDGET`] (the oracle stores every state for its exact backward).
//!
//! **Inputs**, in order (fla's call order): `q [B,T,H,K]` (unscaled), `k [B,T,H,K]`,
//! `v [B,T,H,V]`, then `g` (natural-log decay; `[B,T,H]` for gdn and ssd, `[B,T,H,K]` for kda
//! and gla, absent for la), then `beta [B,T,H]` (gdn, kda), then `s0 [B,H,K,V]` (initial state).
//! The scale is fixed to fla's default `K^-0.5`: `o_t = S_tᵀ(K^-0.5·q_t)`.
//! **Outputs**: `o [B,T,H,V]`, `st [B,H,K,V]` (final state). **Backward** (output gradients
//! `do`, `dst`): `dq, dk, dv, [dg], [dbeta], ds0`, each shaped as its input.
//!
//! **Input structure** ([`InputRule`]): the gates draw raw values (N(0,1), U[1,2), wide range,
//! subnormal, ...) and map them as [`crate::recurrence::io::generate`] does: k l2-normalised per
//! token and head, g = logsigmoid(x) ≤ 0, β = sigmoid(x) ∈ (0, 1); q, v, s0 as drawn. The
//! reference refuses a NaN or ±Inf anywhere ([`crate::recurrence::RecurrenceError::NonFinite`]),
//! reported as [`super::RefError::Domain`] (never charged, rule 1).
//!
//! **In-process mirror** (`k32`): the fp64 oracle on the f32 inputs, rounded to f32 — not an
//! independent f32 implementation (one implementation of the recurrence only). Honest f32
//! arithmetic is exercised by the NumPy worker of `tests/recurrence_candidate.rs`.
//! Error profiles: [`super::recurrence_profile`].

use super::recurrence_profile::{backward_profiles, forward_profiles};
use super::{Backward, DimKind, DimSpec, Dims, InputRule, InputSpec, Op};
use crate::recurrence::batch::{run, Method, Problem, Results};
use crate::recurrence::family::{Gate, Model};
use crate::recurrence::io::{logsigmoid, sigmoid};
use crate::recurrence::tensor::Tensor as RTensor;
use std::sync::Arc;

/// The class ids, in registry order.
pub const RECURRENCE_CLASSES: [&str; 5] = ["gdn", "kda", "gla", "ssd", "la"];

/// The family member of a recurrence class id (`None` for any other id).
pub fn model_of(id: &str) -> Option<Model> {
    [Model::Gdn, Model::Kda, Model::Gla, Model::Ssd, Model::La].into_iter().find(|m| m.name() == id)
}

/// `(B, T, H, K, V)` of `d`.
pub fn bthkv(d: &Dims) -> (usize, usize, usize, usize, usize) {
    (d.get("B"), d.get("T"), d.get("H"), d.get("K"), d.get("V"))
}

/// fla's default scale `K^-0.5`, the class's fixed scale.
pub fn scale_of(d: &Dims) -> f64 {
    (d.get("K").max(1) as f64).powf(-0.5)
}

/// Which of the optional inputs a member takes: the index of `g` and of `beta` in the input
/// list (`None` when absent), and the number of inputs: gdn, kda `(Some(3), Some(4), 6)`,
/// gla, ssd `(Some(3), None, 5)`, la `(None, None, 4)`; `q k v` are 0..3 and `s0` is last.
pub fn layout(model: Model) -> (Option<usize>, Option<usize>, usize) {
    let g = (model.gate() != Gate::None).then_some(3);
    let beta = model.has_beta().then_some(3 + usize::from(g.is_some()));
    (g, beta, 4 + usize::from(g.is_some()) + usize::from(beta.is_some()))
}

fn dims_spec() -> Vec<DimSpec> {
    vec![
        DimSpec { name: "B", native: 1, min: 1, max: 4, kind: DimKind::Batch },
        DimSpec { name: "T", native: 128, min: 1, max: 1024, kind: DimKind::Reduction },
        DimSpec { name: "H", native: 2, min: 1, max: 8, kind: DimKind::Batch },
        DimSpec { name: "K", native: 16, min: 1, max: 256, kind: DimKind::Fixed },
        DimSpec { name: "V", native: 16, min: 1, max: 256, kind: DimKind::Fixed },
    ]
}

/// The most f64 values the oracle may keep per (sequence, head): it stores every state
/// `S_0..S_T` ((T + 1)·K·V values) for its exact backward, and runs two heads at a time on
/// this machine's cores: 2^27 values = 1 GiB per head.
pub const STATE_BUDGET: usize = 1 << 27;

/// The class's constraint: `(T + 1)·K·V ≤ STATE_BUDGET` (the envelope keeps it for K = V ≤ 256;
/// CMP-03 lists a past-envelope size beyond it as skipped).
fn state_budget(d: &Dims) -> Result<(), String> {
    let need = (d.get("T") + 1).saturating_mul(d.get("K")).saturating_mul(d.get("V"));
    if need > STATE_BUDGET {
        return Err(format!("the oracle keeps (T + 1)·K·V = {need} state values per head, over its budget of {STATE_BUDGET}"));
    }
    Ok(())
}

fn input_specs(model: Model) -> Vec<InputSpec> {
    let bthk = |d: &Dims| vec![d.get("B"), d.get("T"), d.get("H"), d.get("K")];
    let mut v = vec![
        InputSpec { name: "q", shape: bthk, reduction_axis: None, data: true },
        InputSpec { name: "k", shape: bthk, reduction_axis: None, data: true },
        InputSpec { name: "v", shape: |d| vec![d.get("B"), d.get("T"), d.get("H"), d.get("V")], reduction_axis: None, data: true },
    ];
    match model.gate() {
        Gate::None => {}
        Gate::Scalar => v.push(InputSpec { name: "g", shape: |d| vec![d.get("B"), d.get("T"), d.get("H")], reduction_axis: None, data: false }),
        Gate::Channel => v.push(InputSpec { name: "g", shape: bthk, reduction_axis: None, data: false }),
    }
    if model.has_beta() {
        v.push(InputSpec { name: "beta", shape: |d| vec![d.get("B"), d.get("T"), d.get("H")], reduction_axis: None, data: false });
    }
    v.push(InputSpec { name: "s0", shape: |d| vec![d.get("B"), d.get("H"), d.get("K"), d.get("V")], reduction_axis: None, data: true });
    v
}

/// Builds the oracle's [`Problem`] from the class's f64 inputs (flat, row-major, in the shapes
/// of the module doc at `d`) and output gradients `[do [B,T,H,V], dst [B,H,K,V]]` (zeros for a
/// forward-only call); scale `K^-0.5`, no varlen.
///
/// Errors: a message when the number of inputs or gradients does not match the member, or a
/// tensor's length is not the product of its shape at `d`.
pub fn problem(model: Model, d: &Dims, xs: &[&[f64]], grads: Option<&[&[f64]]>) -> Result<Problem, String> {
    let (b, t, h, k, v) = bthkv(d);
    let (gi, bi, n) = layout(model);
    if xs.len() != n {
        return Err(format!("{} takes {n} inputs, got {}", model.name(), xs.len()));
    }
    let shape_g = if model.gate() == Gate::Scalar { vec![b, t, h] } else { vec![b, t, h, k] };
    let ten = |name: &str, shape: Vec<usize>, data: &[f64]| -> Result<RTensor, String> {
        RTensor::new(&shape, data.to_vec()).ok_or_else(|| format!("`{name}` has {} values, its shape {shape:?} needs {}", data.len(), shape.iter().product::<usize>()))
    };
    let (d_o, dst) = match grads {
        Some([go, gs]) => (ten("do", vec![b, t, h, v], go)?, ten("dst", vec![b, h, k, v], gs)?),
        Some(g) => return Err(format!("{} takes 2 output gradients (do, dst), got {}", model.name(), g.len())),
        None => (RTensor::zeros(&[b, t, h, v]), RTensor::zeros(&[b, h, k, v])),
    };
    Ok(Problem {
        model,
        q: ten("q", vec![b, t, h, k], xs[0])?,
        k: ten("k", vec![b, t, h, k], xs[1])?,
        v: ten("v", vec![b, t, h, v], xs[2])?,
        g: gi.map(|i| ten("g", shape_g.clone(), xs[i])).transpose()?,
        b: None,
        w: None,
        beta: bi.map(|i| ten("beta", vec![b, t, h], xs[i])).transpose()?,
        s0: ten("s0", vec![b, h, k, v], xs[n - 1])?,
        d_o,
        dst,
        scale: scale_of(d),
        cu_seqlens: None,
    })
}

/// Runs the oracle ([`run`], [`Method::Serial`]: the member's own token-serial fp64
/// definition, gdn-math.md §1–2) on the class's inputs: `o [B,T,H,V]`, `st [B,H,K,V]` and the
/// gradients of `L = Σ o⊙do + Σ S_T⊙dst`.
///
/// Errors: as [`problem`], or the oracle's refusal ([`crate::recurrence::RecurrenceError`]:
/// a non-finite value, a shape) as text.
pub fn oracle(model: Model, d: &Dims, xs: &[&[f64]], grads: Option<&[&[f64]]>) -> Result<Results, String> {
    let p = problem(model, d, xs, grads)?;
    run(&p, Method::Serial, 64).map_err(|e| e.to_string())
}

/// The input gradients of `r` in the class's input order: `dq dk [B,T,H,K]`, `dv [B,T,H,V]`,
/// `dg` (shaped as g, when the member has one), `dbeta [B,T,H]` (gdn, kda), `ds0 [B,H,K,V]`.
pub fn grads_in_order(r: Results) -> Vec<Vec<f64>> {
    let mut v = vec![r.dq.data, r.dk.data, r.dv.data];
    v.extend(r.dg.map(|t| t.data));
    v.extend(r.dbeta.map(|t| t.data));
    v.push(r.ds0.data);
    v
}

/// NaN-filled vectors of the given lengths: what a kernel returns if the oracle refuses after
/// [`InputRule::admit`] let the inputs through (it never does: admit checks the same finiteness).
fn nan_like(lens: &[usize]) -> Vec<Vec<f64>> {
    lens.iter().map(|&n| vec![f64::NAN; n]).collect()
}

fn forward64(model: Model, d: &Dims, xs: &[&[f64]]) -> Vec<Vec<f64>> {
    match oracle(model, d, xs, None) {
        Ok(r) => vec![r.o.data, r.st.data],
        Err(_) => {
            let (b, t, h, k, v) = bthkv(d);
            nan_like(&[b * t * h * v, b * h * k * v])
        }
    }
}

fn backward64(model: Model, d: &Dims, xs: &[&[f64]], gs: &[&[f64]]) -> Vec<Vec<f64>> {
    match oracle(model, d, xs, Some(gs)) {
        Ok(r) => grads_in_order(r),
        Err(_) => nan_like(&xs.iter().map(|x| x.len()).collect::<Vec<_>>()),
    }
}

fn widen(xs: &[&[f32]]) -> Vec<Vec<f64>> {
    xs.iter().map(|x| x.iter().map(|&e| f64::from(e)).collect()).collect()
}

fn narrow(v: Vec<Vec<f64>>) -> Vec<Vec<f32>> {
    v.into_iter().map(|x| x.into_iter().map(|e| e as f32).collect()).collect()
}

/// [`InputRule::condition`]: k l2-normalised per (b, t, h) row of K, g = logsigmoid, β =
/// sigmoid (the distributions of [`crate::recurrence::io::generate`] applied to the gates' raw
/// draws). A zero or non-finite key row is left as it is (the reference judges it).
fn condition(model: Model, d: &Dims, vals: &mut [Vec<f64>]) {
    let (gi, bi, n) = layout(model);
    if vals.len() != n {
        return;
    }
    let k = d.get("K").max(1);
    for row in vals[1].chunks_mut(k) {
        let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 && norm.is_finite() {
            row.iter_mut().for_each(|x| *x /= norm);
        }
    }
    if let Some(i) = gi {
        vals[i].iter_mut().for_each(|x| *x = logsigmoid(*x));
    }
    if let Some(i) = bi {
        vals[i].iter_mut().for_each(|x| *x = sigmoid(*x));
    }
}

/// [`InputRule::admit`]: every value finite (the oracle's domain).
fn admit(model: Model, xs: &[&[f64]]) -> Result<(), String> {
    let names = ["q", "k", "v", "g", "beta", "s0"];
    let (gi, bi, _) = layout(model);
    for (i, x) in xs.iter().enumerate() {
        if let Some(at) = x.iter().position(|e| !e.is_finite()) {
            let name = if i == 0 || i == 1 || i == 2 {
                names[i]
            } else if Some(i) == gi {
                "g"
            } else if Some(i) == bi {
                "beta"
            } else {
                "s0"
            };
            return Err(format!("`{name}` element {at} is {}; the recurrence oracle accepts finite values only", x[at]));
        }
    }
    Ok(())
}

/// The operator class of one family member (see the module doc for dims, tensors and the
/// input rule). [`Model::General`] has no class of its own (no fla counterpart): it is given
/// the `gdn` class.
pub fn class(model: Model) -> Op {
    let model = if model == Model::General { Model::Gdn } else { model };
    let (id, summary, rule): (&'static str, &'static str, InputRule) = match model {
        Model::Kda => (
            "kda",
            "KDA: Ŝ = Diag(e^g_t)S, S_t = Ŝ + k_t(β_t(v_t − Ŝᵀk_t))ᵀ, o_t = S_tᵀ(K^-0.5 q_t); outputs o, S_T",
            InputRule { condition: |d, v| condition(Model::Kda, d, v), admit: |_, x| admit(Model::Kda, x) },
        ),
        Model::Gla => (
            "gla",
            "GLA: S_t = Diag(e^g_t)S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ(K^-0.5 q_t); outputs o, S_T",
            InputRule { condition: |d, v| condition(Model::Gla, d, v), admit: |_, x| admit(Model::Gla, x) },
        ),
        Model::Ssd => (
            "ssd",
            "SSD: S_t = e^g_t S_{t−1} + k_t v_tᵀ (scalar g), o_t = S_tᵀ(K^-0.5 q_t); outputs o, S_T",
            InputRule { condition: |d, v| condition(Model::Ssd, d, v), admit: |_, x| admit(Model::Ssd, x) },
        ),
        Model::La => (
            "la",
            "LA: S_t = S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ(K^-0.5 q_t); outputs o, S_T",
            InputRule { condition: |d, v| condition(Model::La, d, v), admit: |_, x| admit(Model::La, x) },
        ),
        _ => (
            "gdn",
            "GDN: Ŝ = e^g_t S, S_t = Ŝ + k_t(β_t(v_t − Ŝᵀk_t))ᵀ (scalar g), o_t = S_tᵀ(K^-0.5 q_t); outputs o, S_T",
            InputRule { condition: |d, v| condition(Model::Gdn, d, v), admit: |_, x| admit(Model::Gdn, x) },
        ),
    };
    Op {
        id,
        summary,
        dims: dims_spec(),
        constraint: state_budget,
        inputs: input_specs(model),
        outputs: vec![|d| vec![d.get("B"), d.get("T"), d.get("H"), d.get("V")], |d| vec![d.get("B"), d.get("H"), d.get("K"), d.get("V")]],
        k64: Arc::new(move |d, x| forward64(model, d, x)),
        k32: Arc::new(move |d, x| {
            let w = widen(x);
            narrow(forward64(model, d, &w.iter().map(|v| v.as_slice()).collect::<Vec<_>>()))
        }),
        profile: Arc::new(move |d, x, _| forward_profiles(model, d, x)),
        backward: Some(Backward {
            k64: Arc::new(move |d, x, g| backward64(model, d, x, g)),
            k32: Arc::new(move |d, x, g| {
                let (w, wg) = (widen(x), widen(g));
                let xs: Vec<&[f64]> = w.iter().map(|v| v.as_slice()).collect();
                let gs: Vec<&[f64]> = wg.iter().map(|v| v.as_slice()).collect();
                narrow(backward64(model, d, &xs, &gs))
            }),
            profile: Arc::new(move |d, x, g, _| backward_profiles(model, d, x, g)),
        }),
        input_rule: Some(rule),
        // The final state comes back in f32 whatever the declared output dtype (fla returns it so).
        wide_outputs: &[1],
    }
}

/// Every recurrence class, in [`RECURRENCE_CLASSES`] order.
pub fn all() -> Vec<Op> {
    [Model::Gdn, Model::Kda, Model::Gla, Model::Ssd, Model::La].into_iter().map(class).collect()
}
