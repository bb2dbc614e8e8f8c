//! Red-team tricks on operator classes other than matmul (issue 12's failure kinds), each beside
//! the honest twin that does the same job correctly. Every trick declares fp32 in / accumulate /
//! out; each has a NumPy twin of the same name in `verifier/python/redteam/tricks.py`.

use crate::candidate::inprocess::{honest, to_f32_vec, BwdFn, FwdFn, InProcess};
use crate::candidate::{CandidateError, CandidateOutput};
use crate::error_model::Precision;
use crate::references::normalize::NORM_EPS;
use crate::references::op_by_id;
use crate::tensor::Tensor;
use std::sync::{Arc, Mutex};

fn mirror(op: &str, name: &str) -> InProcess {
    mirror_at(op, name, Precision::F32)
}

/// The honest f32 (or `precision`) mirror of registered class `op`, named `name`. An id that is
/// not registered gives a candidate whose every call fails naming it (not another class's
/// mirror, which would pass every gate); `tests::every_trick_and_twin_is_of_its_declared_class`
/// keeps the ids in use registered.
pub(super) fn mirror_at(op: &str, name: &str, precision: Precision) -> InProcess {
    match op_by_id(op) {
        Some(o) => {
            let mut h = honest(&o, precision);
            h.name = name.into();
            h
        }
        None => {
            let msg = format!("`{op}` is not a registered operator class");
            let fwd: FwdFn = Arc::new(move |_, _| Err(CandidateError::Refused(msg.clone())));
            InProcess { name: name.into(), op_id: op.into(), precision, fwd, bwd: None }
        }
    }
}

fn one(shape: Vec<usize>, v: Vec<f32>) -> Result<CandidateOutput, CandidateError> {
    Ok(CandidateOutput { outputs: vec![Tensor::f32(shape, v)], ..Default::default() })
}

/// The honest mirror of `op` whose backward returns all-zero gradients (a backward that was
/// never written: the forward is right, every input gradient is 0).
fn zero_grad(op: &'static str, name: &str) -> InProcess {
    let mut h = mirror(op, name);
    let bwd: BwdFn = Arc::new(|_, x, _| {
        Ok(CandidateOutput { outputs: x.iter().map(|t| Tensor::f32(t.shape.clone(), vec![0.0; t.len()])).collect(), ..Default::default() })
    });
    h.bwd = Some(bwd);
    h
}

fn zero_grad_sdpa() -> InProcess {
    zero_grad("sdpa", "zero_grad_sdpa")
}

fn zero_grad_layer_norm() -> InProcess {
    zero_grad("layer_norm", "zero_grad_layer_norm")
}

fn zero_grad_rms_norm() -> InProcess {
    zero_grad("rms_norm", "zero_grad_rms_norm")
}

/// f32 softmax over the rows of x[R,N], with `flush` applied to every exp and every quotient.
fn softmax_with(d: &crate::references::Dims, x: &[f32], flush: impl Fn(f32) -> f32) -> Vec<f32> {
    let (r, n) = (d.get("R"), d.get("N"));
    let mut out = vec![0f32; r * n];
    for i in 0..r {
        let row = &x[i * n..(i + 1) * n];
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) });
        let e: Vec<f32> = row.iter().map(|&v| flush((v - m).exp())).collect();
        let s: f32 = e.iter().sum();
        for j in 0..n {
            out[i * n + j] = flush(e[j] / s);
        }
    }
    out
}

/// Lanes of the vector load on the single-element path of `nan_padded_grad_softmax` (R = N = 1).
pub const SCALAR_PATH_LANES: usize = 2;

/// f32 softmax backward over the rows of x[R,N] with output gradient g[R,N] (row-major f32):
/// dx_j = y_j (g_j − s), s = Σ_k y_k g_k, y the f32 softmax of the row. The products y_k g_k of a
/// row are loaded into a tile of `lanes` ≥ N lanes, the lanes past N holding NaN (a masked load
/// with `other = NaN`); `masked` sums only the lanes below N, otherwise every lane of the tile.
/// Returns dx[R,N].
pub fn softmax_grad_tiled(d: &crate::references::Dims, x: &[f32], g: &[f32], lanes: usize, masked: bool) -> Vec<f32> {
    let (r, n) = (d.get("R"), d.get("N"));
    let y = softmax_with(d, x, |v| v);
    let mut dx = vec![0f32; r * n];
    for i in 0..r {
        let row = i * n..(i + 1) * n;
        let tile: Vec<f32> = (0..lanes.max(n)).map(|k| if k < n { y[i * n + k] * g[i * n + k] } else { f32::NAN }).collect();
        let s: f32 = tile.iter().enumerate().filter(|(k, _)| !masked || *k < n).map(|(_, v)| v).sum();
        for j in row {
            dx[j] = y[j] * (g[j] - s);
        }
    }
    dx
}

fn nan_padded_grad_softmax() -> InProcess {
    // The honest forward; the backward's 1 x 1 launch takes a scalar path whose 2-lane vector
    // load pads the tile with NaN and reduces it unmasked: dx = NaN at R = N = 1 only.
    let mut h = mirror("softmax", "nan_padded_grad_softmax");
    let bwd: BwdFn = Arc::new(|d, x, g| {
        let scalar = d.get("R") == 1 && d.get("N") == 1;
        let lanes = if scalar { SCALAR_PATH_LANES } else { d.get("N") };
        one(vec![d.get("R"), d.get("N")], softmax_grad_tiled(d, &to_f32_vec(&x[0]), &to_f32_vec(&g[0]), lanes, !scalar))
    });
    h.bwd = Some(bwd);
    h
}

fn ftz_softmax() -> InProcess {
    let fwd: FwdFn = Arc::new(|d, x| {
        let z = |v: f32| if v.is_subnormal() { 0.0 } else { v };
        one(vec![d.get("R"), d.get("N")], softmax_with(d, &to_f32_vec(&x[0]), z))
    });
    InProcess { name: "ftz_softmax".into(), op_id: "softmax".into(), precision: Precision::F32, fwd, bwd: None }
}

fn masked_row_zero_softmax() -> InProcess {
    // FlashAttention's convention for a fully masked row: a row whose max is -inf gets the max 0,
    // so every exp is 0, and a zero row sum gives the output 0 instead of 0/0 = NaN.
    let fwd: FwdFn = Arc::new(|d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        let mut out = vec![0f32; r * n];
        for i in 0..r {
            let row = &v[i * n..(i + 1) * n];
            let mut m = row.iter().fold(f32::NEG_INFINITY, |a, &b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) });
            if m == f32::NEG_INFINITY {
                m = 0.0;
            }
            let e: Vec<f32> = row.iter().map(|&y| (y - m).exp()).collect();
            let s: f32 = e.iter().sum();
            for j in 0..n {
                out[i * n + j] = if s == 0.0 { 0.0 } else { e[j] / s };
            }
        }
        one(vec![r, n], out)
    });
    InProcess { name: "masked_row_zero_softmax".into(), op_id: "softmax".into(), precision: Precision::F32, fwd, bwd: None }
}

/// Block width of the chunked sums.
pub const SUM_BLOCK: usize = 64;

/// A row sum in [`SUM_BLOCK`]-wide blocks through a scratch buffer that lives across calls (a
/// workspace allocated once). `stale` reads every block in full and masks the tail by
/// multiplying with 0 (so whatever the previous call left past the row's end is read: NaN * 0 is
/// NaN); otherwise the tail is skipped.
fn chunked_sum(name: &str, stale: bool) -> InProcess {
    let scratch: Arc<Mutex<Vec<f32>>> = Arc::new(Mutex::new(Vec::new()));
    let fwd: FwdFn = Arc::new(move |d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        let mut s = scratch.lock().map_err(|_| CandidateError::Crashed("poisoned scratch".into()))?;
        let padded = n.div_ceil(SUM_BLOCK) * SUM_BLOCK;
        if s.len() < padded {
            s.resize(padded, 0.0);
        }
        let mut out = vec![0f32; r];
        for i in 0..r {
            s[..n].copy_from_slice(&v[i * n..(i + 1) * n]);
            let mut acc = 0f32;
            for b in 0..padded / SUM_BLOCK {
                let mut part = 0f32;
                for k in b * SUM_BLOCK..(b + 1) * SUM_BLOCK {
                    if stale {
                        part += s[k] * if k < n { 1.0 } else { 0.0 };
                    } else if k < n {
                        part += s[k];
                    }
                }
                acc += part;
            }
            out[i] = acc;
        }
        one(vec![r], out)
    });
    InProcess { name: name.into(), op_id: "sum".into(), precision: Precision::F32, fwd, bwd: None }
}

fn stale_over_read() -> InProcess {
    chunked_sum("stale_over_read", true)
}

/// Honest twin of `stale_over_read`: the same blocks, the tail not read.
pub fn honest_chunked_sum() -> InProcess {
    chunked_sum("honest-chunked-sum", false)
}

fn naive_variance_layer_norm() -> InProcess {
    // var = E[x^2] - E[x]^2 in one pass: cancels catastrophically for a large common offset.
    let fwd: FwdFn = Arc::new(|d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let (v, w, b) = (to_f32_vec(&x[0]), to_f32_vec(&x[1]), to_f32_vec(&x[2]));
        let mut out = vec![0f32; r * n];
        for i in 0..r {
            let row = &v[i * n..(i + 1) * n];
            let (mut s, mut q) = (0f32, 0f32);
            for &y in row {
                s += y;
                q += y * y;
            }
            let mu = s / n as f32;
            let var = q / n as f32 - mu * mu;
            let rs = 1.0 / (var + NORM_EPS as f32).sqrt();
            for j in 0..n {
                out[i * n + j] = (row[j] - mu) * rs * w[j] + b[j];
            }
        }
        one(vec![r, n], out)
    });
    InProcess { name: "naive_variance_layer_norm".into(), op_id: "layer_norm".into(), precision: Precision::F32, fwd, bwd: None }
}

/// An elementwise candidate applying `f` to every element of x.
fn elementwise(name: &str, op: &str, f: fn(f32) -> f32) -> InProcess {
    let fwd: FwdFn = Arc::new(move |d, x| one(vec![d.get("R"), d.get("N")], to_f32_vec(&x[0]).into_iter().map(f).collect()));
    InProcess { name: name.into(), op_id: op.into(), precision: Precision::F32, fwd, bwd: None }
}

// f32::clamp would keep the NaN; the trick is max then min, which drop it.
#[allow(clippy::manual_clamp)]
fn nan_dropping_clamp() -> InProcess {
    // fmaxf / fminf return the non-NaN operand: clamp(NaN) comes out -1.
    elementwise("nan_dropping_clamp", "clamp", |x| x.max(-1.0).min(1.0))
}

fn ftz_logsigmoid() -> InProcess {
    // The stable min(x, 0) - log1p(e^-|x|), with e^-|x| flushed to zero below 2^-126: for
    // x ~ 90 the output -e^-90 (subnormal) comes out 0.
    elementwise("ftz_logsigmoid", "logsigmoid", |x| {
        let e = (-x.abs()).exp();
        let e = if e.is_subnormal() { 0.0 } else { e };
        (if x.is_nan() { x } else { x.min(0.0) }) - e.ln_1p()
    })
}

/// The honest twins of these tricks (each the f32 mirror of its class, with its backward).
pub fn honest_twins() -> Vec<InProcess> {
    vec![
        mirror("softmax", "honest-softmax"),
        honest_chunked_sum(),
        mirror("layer_norm", "honest-layer-norm"),
        mirror("rms_norm", "honest-rms-norm"),
        mirror("sdpa", "honest-sdpa"),
        mirror("clamp", "honest-clamp"),
        mirror("logsigmoid", "honest-logsigmoid"),
        mirror("exp", "honest-exp"),
        super::index_tricks::honest_argmax(),
    ]
}

/// The tricks of this module, as `tricks::Trick` rows.
pub fn tricks() -> Vec<super::tricks::Trick> {
    use super::tricks::Trick;
    vec![
        Trick { name: "zero_grad_sdpa", gate: "CMP-02", op: "sdpa", what: "attention backward returns all-zero gradients", build: zero_grad_sdpa },
        Trick { name: "zero_grad_layer_norm", gate: "CMP-02", op: "layer_norm", what: "layer-norm backward returns all-zero gradients", build: zero_grad_layer_norm },
        Trick { name: "zero_grad_rms_norm", gate: "CMP-02", op: "rms_norm", what: "RMS-norm backward returns all-zero gradients", build: zero_grad_rms_norm },
        Trick { name: "nan_padded_grad_softmax", gate: "CMP-02", op: "softmax", what: "softmax backward whose 1 x 1 path pads its tile with NaN (dx = NaN at R = N = 1)", build: nan_padded_grad_softmax },
        Trick { name: "ftz_softmax", gate: "EXC-02", op: "softmax", what: "softmax flushing subnormal exps and outputs to zero", build: ftz_softmax },
        Trick { name: "stale_over_read", gate: "EXC-01", op: "sum", what: "chunked sum reading full 64-wide blocks of a reused scratch, tail masked by * 0", build: stale_over_read },
        Trick { name: "masked_row_zero_softmax", gate: "EXC-01", op: "softmax", what: "softmax giving 0 instead of NaN on an all -inf row", build: masked_row_zero_softmax },
        Trick { name: "naive_variance_layer_norm", gate: "CMP-01", op: "layer_norm", what: "layer norm with var = E[x^2] - E[x]^2", build: naive_variance_layer_norm },
        Trick { name: "nan_dropping_clamp", gate: "EXC-01", op: "clamp", what: "clamp by fmax/fmin: NaN comes out -1", build: nan_dropping_clamp },
        Trick { name: "ftz_logsigmoid", gate: "EXC-02", op: "logsigmoid", what: "logsigmoid flushing its subnormal exp to zero", build: ftz_logsigmoid },
    ]
}

#[cfg(test)]
mod tests {
    use crate::references::op_by_id;

    /// Every trick (all modules) is built as a candidate of the class it declares, and every honest
    /// twin's class is registered: a mistyped id cannot turn a twin into another class's mirror.
    #[test]
    fn every_trick_and_twin_is_of_its_declared_class() {
        for t in super::super::tricks::tricks() {
            let c = (t.build)();
            assert_eq!(c.op_id, t.op, "trick {}", t.name);
            assert!(op_by_id(t.op).is_some(), "trick {}: `{}` is not registered", t.name, t.op);
        }
        for h in super::honest_twins() {
            assert!(op_by_id(&h.op_id).is_some(), "twin {}: `{}` is not registered", h.name, h.op_id);
        }
        let bad = super::mirror("no_such_class", "x");
        assert_eq!(bad.op_id, "no_such_class");
    }
}
