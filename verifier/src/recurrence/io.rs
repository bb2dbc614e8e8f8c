//! Inputs and results as fp64 safetensors in fla's layout and names, and seeded input generation.
//!
//! Names (gdn-math.md §1 layouts; with GVA every H below but q's and k's is HV): inputs
//! `q k [B,T,H,K]`, `v [B,T,H,V]`, `g` (`[B,T,H,K]` or
//! `[B,T,H]`), `b [B,T,H,K]` and `w [B,T,H,V]` (general) or `beta [B,T,H]` (KDA, GDN),
//! `s0 [N,H,K,V]`, `do [B,T,H,V]`, `dst [N,H,K,V]`, optional `cu_seqlens` (int64 `[N+1]`);
//! results `o st dq dk dv dg db dw dbeta ds0`. Every float tensor is F64; reading any other float
//! dtype is an error (never a silent upcast).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use tilec_abi::rng::NormalRng;
use tilec_abi::st::{read_raw, write_raw, FileDtype, RawFile, RawTensor, StError};

use super::batch::{Problem, Results};
use super::family::{Gate, Model};
use super::tensor::Tensor;
use super::RecurrenceError;

/// Problem sizes for generation; every one must be positive.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// B (1 with `cu_seqlens`).
    pub batch: usize,
    /// H.
    pub heads: usize,
    /// T, tokens per batch entry (with `cu_seqlens`: all sequences together).
    pub seq_len: usize,
    /// K, key dim (of q, k, g, b and the state's rows).
    pub dk: usize,
    /// V, value dim (of v, w, o and the state's columns).
    pub dv: usize,
    /// HV, value heads (GVA: a multiple of H; each group of HV/H value heads shares one key
    /// head); `None` for HV = H.
    pub value_heads: Option<usize>,
}

/// Generates a problem from `seed` ([`NormalRng`]: ChaCha8, Box–Muller). Distributions, drawn in this order, each tensor
/// in row-major order: q ~ N(0,1); k ~ N(0,1) then l2-normalised per token; v ~ N(0,1);
/// g = logsigmoid(N(0,1)) (per channel or per token-head by model; none for LA);
/// general: b, w = sigmoid(N(0,1)) per element; KDA/GDN: β = sigmoid(N(0,1));
/// s0 ~ N(0,1); do ~ N(0,1); dst ~ N(0,1).
///
/// `cu_seqlens` (optional, requires batch 1) splits the T tokens into sequences; s0 and dst then
/// have one entry per sequence. With `value_heads` (GVA) v, g, b, w, β, do, s0 and dst have HV
/// heads, q and k H. `scale` defaults to `dk^-0.5`.
///
/// Errors: [`RecurrenceError::Invalid`] for a zero size; as [`Problem::validate`] (bad
/// `cu_seqlens`).
pub fn generate(model: Model, d: Dims, seed: u64, scale: Option<f64>, cu_seqlens: Option<Vec<usize>>) -> Result<Problem, RecurrenceError> {
    if d.batch == 0 || d.heads == 0 || d.seq_len == 0 || d.dk == 0 || d.dv == 0 {
        return Err(RecurrenceError::Invalid(format!("every size must be positive, got {d:?}")));
    }
    let mut rng = NormalRng::new(seed);
    let (b, t, h, k, v) = (d.batch, d.seq_len, d.heads, d.dk, d.dv);
    let hv = d.value_heads.unwrap_or(h);
    if hv == 0 || hv % h != 0 {
        return Err(RecurrenceError::Invalid(format!("value heads {hv} must be a positive multiple of the key heads {h} (GVA)")));
    }
    let n = cu_seqlens.as_ref().map_or(b, |c| c.len().saturating_sub(1));
    let mut normal = |shape: &[usize]| Tensor { shape: shape.to_vec(), data: (0..shape.iter().product()).map(|_| rng.normal()).collect() };
    let q = normal(&[b, t, h, k]);
    let mut kt = normal(&[b, t, h, k]);
    for row in kt.data.chunks_mut(k) {
        let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    let vt = normal(&[b, t, hv, v]);
    let g = match model.gate() {
        Gate::None => None,
        Gate::Scalar => Some(map(normal(&[b, t, hv]), logsigmoid)),
        Gate::Channel => Some(map(normal(&[b, t, hv, k]), logsigmoid)),
    };
    let (bg, wg) = if model == Model::General {
        (Some(map(normal(&[b, t, hv, k]), sigmoid)), Some(map(normal(&[b, t, hv, v]), sigmoid)))
    } else {
        (None, None)
    };
    let beta = model.has_beta().then(|| map(normal(&[b, t, hv]), sigmoid));
    let s0 = normal(&[n, hv, k, v]);
    let d_o = normal(&[b, t, hv, v]);
    let dst = normal(&[n, hv, k, v]);
    let p = Problem { model, q, k: kt, v: vt, g, b: bg, w: wg, beta, s0, d_o, dst, scale: scale.unwrap_or((k as f64).powf(-0.5)), cu_seqlens };
    p.validate()?;
    Ok(p)
}

/// `log σ(x)`, computed without overflow.
pub fn logsigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

/// `σ(x)`.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn map(mut t: Tensor, f: fn(f64) -> f64) -> Tensor {
    t.data.iter_mut().for_each(|x| *x = f(*x));
    t
}

/// Largest problem `kverify ref` accepts, in fp64 elements held at once (4 GiB).
pub const MAX_ELEMENTS: u128 = 1 << 29;

/// Reads a problem for `model` from a safetensors file. Required: q, k, v, do, plus g (gated
/// models), b and w (general) or beta (KDA, GDN). Optional: s0, dst (zero when absent),
/// cu_seqlens (int64). Scale: `scale` if given, else the file's `scale` metadata, else `K^-0.5`.
///
/// Errors: I/O, malformed file, a float tensor that is not F64 ([`RecurrenceError::Dtype`]),
/// missing tensors, bad shapes, a zero-filled state above [`MAX_ELEMENTS`].
pub fn read_problem(path: &Path, model: Model, scale: Option<f64>) -> Result<Problem, RecurrenceError> {
    let file = read_raw(path).map_err(|e| st_error(path, e))?;
    let get = |name: &str| -> Result<Option<Tensor>, RecurrenceError> { file.tensors.get(name).map(|t| f64_tensor(name, t)).transpose() };
    let req = |name: &str| get(name)?.ok_or_else(|| RecurrenceError::Missing(name.into()));
    let q = req("q")?;
    let v = req("v")?;
    let cu_seqlens = file.tensors.get("cu_seqlens").map(index_vector).transpose()?;
    let (b, t, h, k) = match q.shape[..] {
        [b, t, h, k] => (b, t, h, k),
        _ => return Err(RecurrenceError::Shape { name: "q".into(), expected: vec![0, 0, 0, 0], got: q.shape.clone() }),
    };
    let vd = v.shape.last().copied().unwrap_or(0);
    // GVA: the states have v's heads.
    let h = if v.shape.len() == 4 && v.shape[2] > 0 { v.shape[2] } else { h };
    let n = cu_seqlens.as_ref().map_or(b, |c| c.len().saturating_sub(1));
    // A zero-filled state is sized by the file's extents, which an empty tensor can set to
    // anything: refuse before allocating (a 328-byte file asked for 8 TiB).
    let state = [n, h, k, vd].iter().fold(1u128, |acc, &x| acc.saturating_mul(x as u128));
    if state > MAX_ELEMENTS {
        return Err(RecurrenceError::Invalid(format!("the state [N={n}, H={h}, K={k}, V={vd}] would hold {state} fp64 values, the limit is {MAX_ELEMENTS}")));
    }
    let state_or_zero = |name: &str| -> Result<Tensor, RecurrenceError> { Ok(get(name)?.unwrap_or_else(|| Tensor::zeros(&[n, h, k, vd]))) };
    let file_scale = file.metadata.get("scale").and_then(|s| s.parse::<f64>().ok());
    let g = if model.gate() == Gate::None { None } else { Some(req("g")?) };
    let general = model == Model::General;
    let p = Problem {
        model,
        q,
        k: req("k")?,
        v,
        g,
        b: if general { Some(req("b")?) } else { None },
        w: if general { Some(req("w")?) } else { None },
        beta: if model.has_beta() { Some(req("beta")?) } else { None },
        s0: state_or_zero("s0")?,
        d_o: req("do")?,
        dst: state_or_zero("dst")?,
        scale: scale.or(file_scale).unwrap_or((k as f64).powf(-0.5)),
        cu_seqlens,
    };
    let _ = t;
    p.validate()?;
    Ok(p)
}

/// An I/O failure stays [`RecurrenceError::Io`]; anything about the contents is a
/// safetensors error naming the file.
fn st_error(path: &Path, e: StError) -> RecurrenceError {
    match e {
        StError::Io { path, source } => RecurrenceError::Io { path: path.display().to_string(), source },
        other => RecurrenceError::Safetensors(format!("{}: {other}", path.display())),
    }
}

fn f64_tensor(name: &str, t: &RawTensor) -> Result<Tensor, RecurrenceError> {
    let data = match (t.dtype, t.float_values()) {
        (FileDtype::F64, Some(v)) => v,
        _ => return Err(RecurrenceError::Dtype { name: name.into(), dtype: format!("{:?}", t.dtype) }),
    };
    Tensor::new(&t.shape, data).ok_or_else(|| RecurrenceError::Safetensors(format!("tensor `{name}`: data length does not match its shape")))
}

fn index_vector(t: &RawTensor) -> Result<Vec<usize>, RecurrenceError> {
    let values = match (t.dtype, t.shape.len(), t.int_values()) {
        (FileDtype::I64, 1, Some(v)) => v,
        _ => return Err(RecurrenceError::CuSeqlens(format!("must be a 1-D int64 tensor, got {:?} {:?}", t.dtype, t.shape))),
    };
    values.into_iter().map(|x| usize::try_from(x).map_err(|_| RecurrenceError::CuSeqlens(format!("negative entry {x}")))).collect()
}

/// Writes the problem's inputs and the results to one safetensors file (all F64; cu_seqlens as
/// int64). `metadata` is stored in the header (model, method, chunk, scale, seed ...).
///
/// Errors: I/O or serialisation failure.
pub fn write(path: &Path, p: &Problem, r: &Results, metadata: HashMap<String, String>) -> Result<(), RecurrenceError> {
    let mut named = p.named_inputs();
    named.extend(r.named());
    let mut file = RawFile { tensors: BTreeMap::new(), metadata: metadata.into_iter().collect() };
    for (n, t) in named {
        let bytes = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        file.tensors.insert(n.to_string(), RawTensor { dtype: FileDtype::F64, shape: t.shape.clone(), bytes });
    }
    if let Some(cu) = &p.cu_seqlens {
        let bytes = cu.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect();
        file.tensors.insert("cu_seqlens".into(), RawTensor { dtype: FileDtype::I64, shape: vec![cu.len()], bytes });
    }
    write_raw(path, &file).map_err(|e| st_error(path, e))
}
