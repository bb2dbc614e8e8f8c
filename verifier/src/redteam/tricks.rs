//! The in-process red team: one honest matmul, one honest max, and the tricks of `docs/gates.md`,
//! each a real (deliberately broken) f32 kernel declaring fp32 in / fp32 accumulate / fp32 out.

use crate::candidate::inprocess::{honest, to_f32_vec, BwdFn, FwdFn, InProcess};
use crate::candidate::{CandidateError, CandidateOutput};
use crate::error_model::Precision;
use crate::gates::inputs::{gate_seed, generate, Dist};
use crate::references::linear::matmul;
use crate::references::reduce::{row_reduce, RowReduce};
use crate::references::Dims;
use crate::tensor::{round_tf32, Device, Storage, Tensor};
use tilec_abi::round::{f32_to_bf16, f32_to_f16};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sequential f32 matmul with a per-product hook and a per-accumulation hook.
fn mm_with(d: &Dims, a: &[f32], b: &[f32], prod: impl Fn(f32, f32) -> f32, acc: impl Fn(f32, f32) -> f32) -> Vec<f32> {
    let (m, k, n) = (d.get("M"), d.get("K"), d.get("N"));
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for p in 0..k {
                s = acc(s, prod(a[i * k + p], b[p * n + j]));
            }
            out[i * n + j] = s;
        }
    }
    out
}

fn plain(d: &Dims, a: &[f32], b: &[f32]) -> Vec<f32> {
    mm_with(d, a, b, |x, y| x * y, |s, p| s + p)
}

fn ok(shape: Vec<usize>, v: Vec<f32>) -> Result<CandidateOutput, CandidateError> {
    Ok(CandidateOutput { outputs: vec![Tensor::f32(shape, v)], ..Default::default() })
}

fn out_shape(d: &Dims) -> Vec<usize> {
    vec![d.get("M"), d.get("N")]
}

/// A matmul candidate from a function of (dims, A, B) -> C.
fn mm_trick(name: &str, f: impl Fn(&Dims, &[f32], &[f32]) -> Vec<f32> + Send + Sync + 'static) -> InProcess {
    let fwd: FwdFn = Arc::new(move |d, x| {
        let (a, b) = (to_f32_vec(&x[0]), to_f32_vec(&x[1]));
        ok(out_shape(d), f(d, &a, &b))
    });
    InProcess { name: name.into(), op_id: "matmul".into(), precision: Precision::F32, fwd, bwd: None }
}

/// A matmul candidate with full access to the call.
fn mm_raw(name: &str, f: FwdFn) -> InProcess {
    InProcess { name: name.into(), op_id: "matmul".into(), precision: Precision::F32, fwd: f, bwd: None }
}

/// The honest matmul (with backward) and the honest max.
pub fn honest_matmul() -> InProcess {
    let op = matmul();
    let mut h = honest(&op, Precision::F32);
    h.name = "honest".into();
    h
}

/// Honest max (NaN-propagating, exact).
pub fn honest_max() -> InProcess {
    let op = row_reduce(RowReduce::Max);
    let mut h = honest(&op, Precision::F32);
    h.name = "honest-max".into();
    h
}

/// One trick: name, the gate meant to catch it, what it does, and its in-process build.
pub struct Trick {
    /// Name (also the external candidate's file stem).
    pub name: &'static str,
    /// Gate meant to catch it.
    pub gate: &'static str,
    /// Operator it implements.
    pub op: &'static str,
    /// What it does.
    pub what: &'static str,
    /// In-process build.
    pub build: fn() -> InProcess,
}

fn identity() -> InProcess {
    mm_raw("identity", Arc::new(|_, x| Ok(CandidateOutput { outputs: vec![x[0].deep_copy()], ..Default::default() })))
}

fn zeros() -> InProcess {
    mm_trick("zeros", |d, _, _| vec![0.0; d.get("M") * d.get("N")])
}

fn cache_first() -> InProcess {
    let cache: Arc<Mutex<Option<Tensor>>> = Arc::new(Mutex::new(None));
    mm_raw(
        "cache_first",
        Arc::new(move |d, x| {
            let mut c = cache.lock().map_err(|_| CandidateError::Crashed("poisoned cache".into()))?;
            if let Some(t) = c.as_ref() {
                if t.shape == out_shape(d) {
                    return Ok(CandidateOutput { outputs: vec![t.deep_copy()], ..Default::default() });
                }
            }
            let t = Tensor::f32(out_shape(d), plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1])));
            *c = Some(t.deep_copy());
            Ok(CandidateOutput { outputs: vec![t], ..Default::default() })
        }),
    )
}

/// The answer a naive single-seed test would see: CMP-01's first seed at the native shape.
pub fn default_seed_answer() -> (Dims, Vec<f32>) {
    let op = matmul();
    let d = op.native();
    let x = generate(&op, &d, Dist::Normal, gate_seed("CMP-01", 0), Precision::F32.input);
    (d.clone(), plain(&d, &to_f32_vec(&x.candidate[0]), &to_f32_vec(&x.candidate[1])))
}

fn hardcoded_seed() -> InProcess {
    let (d0, ans) = default_seed_answer();
    mm_raw(
        "hardcoded_seed",
        Arc::new(move |d, _| {
            if *d != d0 {
                return Err(CandidateError::Refused("only the benchmark shape".into()));
            }
            ok(out_shape(d), ans.clone())
        }),
    )
}

fn fp16_accum() -> InProcess {
    mm_trick("fp16_accum", |d, a, b| mm_with(d, a, b, |x, y| x * y, |s, p| f32_to_f16(s + p).to_f32()))
}

fn bf16_compute() -> InProcess {
    mm_trick("bf16_compute", |d, a, b| {
        let r = |v: &[f32]| v.iter().map(|&x| f32_to_bf16(x).to_f32()).collect::<Vec<_>>();
        plain(d, &r(a), &r(b))
    })
}

fn tf32() -> InProcess {
    mm_trick("tf32", |d, a, b| {
        let r = |v: &[f32]| v.iter().map(|&x| round_tf32(x)).collect::<Vec<_>>();
        plain(d, &r(a), &r(b))
    })
}

static CALLS: AtomicU64 = AtomicU64::new(1);

fn nondeterministic() -> InProcess {
    mm_trick("nondeterministic", |d, a, b| {
        // Like split-K with atomics: the start of the k loop depends on which block came first.
        let (m, k, n) = (d.get("M"), d.get("K"), d.get("N"));
        let r = CALLS.fetch_add(7, Ordering::Relaxed) as usize;
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f32;
                for t in 0..k {
                    let p = (t + r + i + j) % k.max(1);
                    s += a[i * k + p] * b[p * n + j];
                }
                out[i * n + j] = s;
            }
        }
        out
    })
}

fn nan_to_zero() -> InProcess {
    mm_trick("nan_to_zero", |d, a, b| plain(d, a, b).into_iter().map(|v| if v.is_nan() { 0.0 } else { v }).collect())
}

fn inf_clamp() -> InProcess {
    mm_trick("inf_clamp", |d, a, b| plain(d, a, b).into_iter().map(|v| if v.is_infinite() { v.signum() * f32::MAX } else { v }).collect())
}

fn nan_dropping_max() -> InProcess {
    let fwd: FwdFn = Arc::new(|d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        // f32::max returns the non-NaN operand: NaNs silently vanish.
        let out: Vec<f32> = (0..r).map(|i| v[i * n..(i + 1) * n].iter().fold(f32::NEG_INFINITY, |m, &y| m.max(y))).collect();
        Ok(CandidateOutput { outputs: vec![Tensor::f32(vec![r], out)], ..Default::default() })
    });
    InProcess { name: "nan_dropping_max".into(), op_id: "max".into(), precision: Precision::F32, fwd, bwd: None }
}

fn ftz() -> InProcess {
    mm_trick("ftz", |d, a, b| {
        let z = |x: f32| if x.is_subnormal() { 0.0 } else { x };
        let a: Vec<f32> = a.iter().map(|&x| z(x)).collect();
        let b: Vec<f32> = b.iter().map(|&x| z(x)).collect();
        mm_with(d, &a, &b, |x, y| z(x * y), |s, p| z(s + p))
    })
}

fn native_shape_only() -> InProcess {
    let native = matmul().native();
    mm_raw(
        "native_shape_only",
        Arc::new(move |d, x| {
            if *d != native {
                return Err(CandidateError::Refused(format!("kernel specialised for {native}")));
            }
            ok(out_shape(d), plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1])))
        }),
    )
}

/// Tile width of [`drops_partial_tile`].
pub const TILE: usize = 16;

fn drops_partial_tile() -> InProcess {
    mm_trick("drops_partial_tile", |d, a, b| {
        let (m, n) = (d.get("M"), d.get("N"));
        let full = plain(d, a, b);
        let covered = (n / TILE) * TILE;
        (0..m * n).map(|idx| if idx % n < covered { full[idx] } else { 0.0 }).collect()
    })
}

fn mutates_input() -> InProcess {
    mm_raw(
        "mutates_input",
        Arc::new(|d, x| {
            let out = plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1]));
            // Uses A as scratch space after reading it.
            if let Storage::F32(v) = Arc::make_mut(&mut x[0].data) {
                v.iter_mut().for_each(|e| *e = 0.0);
            }
            ok(out_shape(d), out)
        }),
    )
}

fn aliases_input() -> InProcess {
    mm_raw(
        "aliases_input",
        Arc::new(|d, x| {
            let out = plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1]));
            if x[0].len() == out.len() {
                // Writes C over A's buffer and returns that buffer.
                if let Storage::F32(v) = Arc::make_mut(&mut x[0].data) {
                    v.copy_from_slice(&out);
                }
                let mut t = x[0].clone();
                t.shape = out_shape(d);
                return Ok(CandidateOutput { outputs: vec![t], ..Default::default() });
            }
            ok(out_shape(d), out)
        }),
    )
}

fn wrong_device() -> InProcess {
    mm_raw(
        "wrong_device",
        Arc::new(|d, x| {
            let mut t = Tensor::f32(out_shape(d), plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1])));
            t.device = Device::Cuda(0);
            Ok(CandidateOutput { outputs: vec![t], ..Default::default() })
        }),
    )
}

fn wrong_dtype() -> InProcess {
    mm_raw(
        "wrong_dtype",
        Arc::new(|d, x| {
            let v: Vec<f64> = plain(d, &to_f32_vec(&x[0]), &to_f32_vec(&x[1])).into_iter().map(|v| v as f64).collect();
            Ok(CandidateOutput { outputs: vec![Tensor::f64(out_shape(d), v)], ..Default::default() })
        }),
    )
}

/// How long [`hangs`] spins before giving up on its own (far beyond any time limit used).
pub const HANG_FOR: Duration = Duration::from_secs(60);

fn hangs() -> InProcess {
    mm_trick("hangs", |d, a, b| {
        if d.get("M") == 1 {
            // Waits for a tile that never arrives.
            let t0 = std::time::Instant::now();
            while t0.elapsed() < HANG_FOR {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        plain(d, a, b)
    })
}

// The panic is the trick: a kernel that crashes at odd N. The harness must turn it into an error
// instead of going down with it.
#[allow(clippy::panic)]
fn crashes() -> InProcess {
    mm_trick("crashes", |d, a, b| {
        if d.get("N") % 2 == 1 {
            panic!("vectorised store assumes an even N (got {})", d.get("N"));
        }
        plain(d, a, b)
    })
}

fn near_miss_scale() -> InProcess {
    mm_trick("near_miss_scale", |d, a, b| plain(d, a, b).into_iter().map(|v| v * 1.01).collect())
}

fn saturating() -> InProcess {
    mm_trick("saturating", |d, a, b| mm_with(d, a, b, |x, y| (x * y).clamp(-65504.0, 65504.0), |s, p| s + p))
}

fn wrong_grad() -> InProcess {
    let mut h = honest_matmul();
    h.name = "wrong_grad".into();
    let inner = h.bwd.clone();
    let bwd: BwdFn = Arc::new(move |d, x, g| {
        let f = inner.as_ref().ok_or(CandidateError::NoBackward)?;
        let mut out = f(d, x, g)?;
        // Forgets the second input's gradient scale (a missing factor 2 of a fused kernel).
        if let Some(t) = out.outputs.get_mut(1) {
            let v: Vec<f32> = to_f32_vec(t).into_iter().map(|x| 0.5 * x).collect();
            *t = Tensor::f32(t.shape.clone(), v);
        }
        Ok(out)
    });
    h.bwd = Some(bwd);
    h
}

/// Block width of the backward reduction of [`honest_blocked_grad`] and `nondeterministic_grad`.
pub const GRAD_BLOCK: usize = 16;

/// dA = dC B^T in f32 with the reduction over N split into [`GRAD_BLOCK`]-wide blocks: each
/// block is summed in order, and the block partial sums are added to the accumulator starting
/// at block `start` (wrapping), as a split-K backward adds its blocks in completion order.
pub fn blocked_grad_a(d: &Dims, g: &[f32], b: &[f32], start: usize) -> Vec<f32> {
    let (m, k, n) = (d.get("M"), d.get("K"), d.get("N"));
    let nb = n.div_ceil(GRAD_BLOCK).max(1);
    let mut out = vec![0f32; m * k];
    for i in 0..m {
        for p in 0..k {
            let mut s = 0f32;
            for q in 0..nb {
                let blk = (start + q) % nb;
                let mut part = 0f32;
                for j in blk * GRAD_BLOCK..((blk + 1) * GRAD_BLOCK).min(n) {
                    part += g[i * n + j] * b[p * n + j];
                }
                s += part;
            }
            out[i * k + p] = s;
        }
    }
    out
}

/// The honest matmul whose backward computes dA by [`blocked_grad_a`] with the first block
/// chosen by `start` (called once per backward call); dB is the honest mirror's.
fn blocked_grad(name: &str, start: impl Fn(usize) -> usize + Send + Sync + 'static) -> InProcess {
    let mut h = honest_matmul();
    h.name = name.into();
    let inner = h.bwd.clone();
    let bwd: BwdFn = Arc::new(move |d, x, g| {
        let f = inner.as_ref().ok_or(CandidateError::NoBackward)?;
        let mut out = f(d, x, g)?;
        let nb = d.get("N").div_ceil(GRAD_BLOCK).max(1);
        let da = blocked_grad_a(d, &to_f32_vec(&g[0]), &to_f32_vec(&x[1]), start(nb));
        if let Some(t) = out.outputs.get_mut(0) {
            *t = Tensor::f32(t.shape.clone(), da);
        }
        Ok(out)
    });
    h.bwd = Some(bwd);
    h
}

/// Honest twin of `nondeterministic_grad`: the same blocked backward, blocks always in order.
pub fn honest_blocked_grad() -> InProcess {
    blocked_grad("honest_blocked_grad", |_| 0)
}

fn nondeterministic_grad() -> InProcess {
    // Deterministic forward; the backward's first block is a per-candidate call counter (the
    // block that "finished first"): calls 0, 1, 2, ... start at blocks 0, 1, 2, ... mod the count.
    let calls = Arc::new(AtomicU64::new(0));
    blocked_grad("nondeterministic_grad", move |nb| (calls.fetch_add(1, Ordering::Relaxed) as usize) % nb)
}

/// Every trick, in a fixed order: the matmul and max tricks, then those of [`super::op_tricks`].
pub fn tricks() -> Vec<Trick> {
    let mut v = matmul_tricks();
    v.extend(super::op_tricks::tricks());
    v.extend(super::size_tricks::tricks());
    v.extend(super::index_tricks::tricks());
    v
}

fn matmul_tricks() -> Vec<Trick> {
    vec![
        Trick { name: "identity", gate: "CMP-01", op: "matmul", what: "returns its input", build: identity },
        Trick { name: "zeros", gate: "CMP-01", op: "matmul", what: "returns zeros", build: zeros },
        Trick { name: "cache_first", gate: "RES-01", op: "matmul", what: "caches its first answer", build: cache_first },
        Trick { name: "hardcoded_seed", gate: "CMP-01", op: "matmul", what: "hard-codes the answer for the default seed", build: hardcoded_seed },
        Trick { name: "fp16_accum", gate: "PRC-02", op: "matmul", what: "accumulates the reduction in fp16", build: fp16_accum },
        Trick { name: "bf16_compute", gate: "PRC-01", op: "matmul", what: "computes in bf16 while declaring fp32", build: bf16_compute },
        Trick { name: "tf32", gate: "PRC-01", op: "matmul", what: "uses TF32 while declaring fp32", build: tf32 },
        Trick { name: "nondeterministic", gate: "ORD-02", op: "matmul", what: "summation order changes run to run", build: nondeterministic },
        Trick { name: "nan_to_zero", gate: "EXC-01", op: "matmul", what: "replaces NaN by zero", build: nan_to_zero },
        Trick { name: "inf_clamp", gate: "EXC-01", op: "matmul", what: "clamps +-Inf to finite", build: inf_clamp },
        Trick { name: "nan_dropping_max", gate: "EXC-01", op: "max", what: "max that drops NaN", build: nan_dropping_max },
        Trick { name: "ftz", gate: "EXC-02", op: "matmul", what: "flushes subnormals to zero", build: ftz },
        Trick { name: "native_shape_only", gate: "CMP-03", op: "matmul", what: "works only at the native shape", build: native_shape_only },
        Trick { name: "drops_partial_tile", gate: "CMP-03", op: "matmul", what: "drops the partial last tile", build: drops_partial_tile },
        Trick { name: "mutates_input", gate: "RES-01", op: "matmul", what: "uses an input as scratch", build: mutates_input },
        Trick { name: "aliases_input", gate: "RES-01", op: "matmul", what: "output aliases an input", build: aliases_input },
        Trick { name: "wrong_device", gate: "RES-01", op: "matmul", what: "answers on another device", build: wrong_device },
        Trick { name: "wrong_dtype", gate: "RES-01", op: "matmul", what: "answers in another dtype", build: wrong_dtype },
        Trick { name: "hangs", gate: "RES-01", op: "matmul", what: "hangs on some input (M = 1)", build: hangs },
        Trick { name: "crashes", gate: "RES-01", op: "matmul", what: "crashes on some input (odd N)", build: crashes },
        Trick { name: "near_miss_scale", gate: "CMP-01", op: "matmul", what: "off by a factor 1 + 1e-2", build: near_miss_scale },
        Trick { name: "saturating", gate: "ORD-03", op: "matmul", what: "saturates products at the fp16 range", build: saturating },
        Trick { name: "wrong_grad", gate: "CMP-02", op: "matmul", what: "gradient of B off by a factor 2", build: wrong_grad },
        Trick { name: "nondeterministic_grad", gate: "ORD-02", op: "matmul", what: "backward adds its reduction blocks in a run-dependent order", build: nondeterministic_grad },
    ]
}
