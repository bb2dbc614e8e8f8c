//! CMP-03's probe past 2^31 flat elements (issue 12, item 3), for candidates that compute on a
//! GPU ([`crate::candidate::Candidate::compute_device`]).
//!
//! * **Shape** ([`flat_shape`]): one dim grows, every other changeable dim at its minimum (fixed
//!   dims as given), until the largest input holds more than [`FLAT_ELEMENTS`] = 2^31 elements:
//!   n = ⌊2^31 / c⌋ + 1 for c elements of that input per index of the dim, so its last flat
//!   offset is at least 2^31, past every i32 offset. The dim must *split* the operator: it is
//!   the leading axis of every output and of every input that has it, and the fp64 reference
//!   on a subset of its indices equals that subset of the reference (checked bitwise at a small
//!   size). Every extent stays ≤ [`MAX_EXTENT`] = 2^31 − 1 (a tilec kernel's sizes are i32):
//!   where one element per index would need n = 2^31 + 1, one other changeable dim is raised to
//!   the smallest value that avoids it. Of the shapes that qualify, the one whose tensors take
//!   the fewest bytes is taken (softmax R = 2^30 + 1 at N = 2; matmul M = 2^30 + 1 at K = 2,
//!   N = 1; sdpa Bt = 2^26 + 1 at Lq = Lk = 1, D = Dv = 32).
//! * **What is compared** ([`sample_rows`]): the reference runs only at sampled indices of the
//!   grown dim — the first two, the middle, the last three, and those holding the flat elements
//!   2^k − 1 and 2^k of the largest input for every k from 16 up to the limit (where 16-bit,
//!   f32-exact and 32-bit offsets and counters turn over) — so it needs kilobytes, not the
//!   16 GiB an f64 copy of 2^31 elements would. The candidate's answer at those indices is cut
//!   out of its full output and compared under the deterministic bound, as at every CMP-03 shape.
//! * **Inputs** ([`flat_inputs`]): standard normal, made by the gates' own generator
//!   ([`inputs::generate`]) in chunks of indices along the grown dim (chunk k with seed + k), on
//!   every core, straight into the declared input dtype; the reference's rows are cut out of the
//!   candidate's tensors (the same values, widened exactly).
//! * **Judged like the other past-envelope sizes**: the dim's range is widened for the
//!   reference; the candidate may decline (listed as declined; for a tilec GPU artifact,
//!   `tilec-run`'s binder refusing a size, [`crate::candidate::tilec::binder_refusal`]), a
//!   crash or hang is an error.
//! * **Skipped, with the reason in the gate's detail** ([`plan`]): when the candidate computes
//!   on the CPU; when no dim splits the class; when the candidate's process has an address-space
//!   cap below the bytes of its inputs and outputs; when [`HOST_COPIES`] × those bytes exceed
//!   the host memory available (`MemAvailable` in `/proc/meminfo`). GPU memory is the
//!   candidate's to manage: it declines the shape, or its failure is reported.

use super::cmp03_probes::widened;
use super::compare::{self, ValueReport};
use super::{inputs, inputs::Dist, Ctx, Probe};
use crate::candidate::Candidate;
use crate::error_model::{BoundKind, Precision};
use crate::references::{DimKind, Dims, Op};
use crate::tensor::{numel, DType, Device, Storage, Tensor};
use half::{bf16, f16};
use std::sync::{Arc, Mutex};

/// The flat element count the probe's largest input exceeds: 2^31 (an i32 offset wraps there).
pub const FLAT_ELEMENTS: usize = 1 << 31;

/// Host bytes the probe is charged per byte of the candidate's inputs and outputs: kverify's
/// tensors, the byte copies it checksums and writes the protocol file from, the file, and the
/// candidate process's own copies.
pub const HOST_COPIES: usize = 4;

/// Elements of one input in one generation chunk (2^22: 32 MiB of f64 per chunk and thread).
pub const CHUNK_ELEMENTS: usize = 1 << 22;

/// The split check runs the reference at this extent of the dim and at these of its indices.
const SPLIT_CHECK: (usize, [usize; 3]) = (6, [1, 4, 5]);

/// The probe past [`FLAT_ELEMENTS`].
#[derive(Debug, Clone)]
pub struct FlatProbe {
    /// Label (`R=1073741825 (past 2^31 flat elements: x holds 2147483650; 38 indices of R compared)`).
    pub label: String,
    /// The dims: `dim` grown, the other changeable dims at their minimum.
    pub dims: Dims,
    /// The grown dim (the leading axis of every tensor that has it).
    pub dim: &'static str,
    /// Index of the input with the most elements per index of `dim`.
    pub input: usize,
    /// Elements of that input at `dims`.
    pub elements: usize,
    /// The indices of `dim` at which the answer is compared, ascending.
    pub rows: Vec<usize>,
    /// Bytes of the candidate's inputs and outputs at `dims` in their declared dtypes.
    pub candidate_bytes: usize,
}

impl FlatProbe {
    /// Host memory the probe is charged: [`HOST_COPIES`] × [`FlatProbe::candidate_bytes`].
    pub fn host_bytes(&self) -> usize {
        self.candidate_bytes.saturating_mul(HOST_COPIES)
    }
}

/// For each input and each output, whether `dim` is its leading axis (false: the tensor does
/// not have it). None when a tensor has it on another axis or an output does not have it.
fn leading(op: &Op, at: &Dims, dim: &str) -> Option<(Vec<bool>, Vec<bool>)> {
    let (a, b) = (at.with(dim, 2), at.with(dim, 3));
    let one = |s2: &Vec<usize>, s3: &Vec<usize>| -> Option<bool> {
        if s2 == s3 {
            return Some(false);
        }
        (s2.len() == s3.len() && s2.first() == Some(&2) && s3.first() == Some(&3) && s2[1..] == s3[1..]).then_some(true)
    };
    let ins = op.input_shapes(&a).iter().zip(&op.input_shapes(&b)).map(|(x, y)| one(x, y)).collect::<Option<Vec<bool>>>()?;
    let outs = op.output_shapes(&a).iter().zip(&op.output_shapes(&b)).map(|(x, y)| one(x, y)).collect::<Option<Vec<bool>>>()?;
    outs.iter().all(|&o| o).then_some((ins, outs))
}

fn take<T: Copy>(v: &[T], row: usize, rows: &[usize]) -> Vec<T> {
    rows.iter().flat_map(|&r| v.get(r * row..(r + 1) * row).unwrap_or(&[]).iter().copied()).collect()
}

/// The slices `rows` of `t` along its leading axis, in that order, in `t`'s dtype: shape
/// `[rows.len(), t.shape[1..]]`. An index past the axis contributes no elements.
pub fn take_rows(t: &Tensor, rows: &[usize]) -> Tensor {
    let row = match t.shape.first() {
        Some(&n) if n > 0 => t.len() / n,
        _ => 0,
    };
    let data = match &*t.data {
        Storage::F64(v) => Storage::F64(take(v, row, rows)),
        Storage::F32(v) => Storage::F32(take(v, row, rows)),
        Storage::Bf16(v) => Storage::Bf16(take(v, row, rows)),
        Storage::F16(v) => Storage::F16(take(v, row, rows)),
        Storage::I32(v) => Storage::I32(take(v, row, rows)),
        Storage::I64(v) => Storage::I64(take(v, row, rows)),
    };
    let mut shape = t.shape.clone();
    if let Some(s) = shape.first_mut() {
        *s = rows.len();
    }
    Tensor { shape, device: t.device, data: Arc::new(data) }
}

/// `Ok` when the fp64 reference of `op` at a subset of the indices of `dim` equals that subset
/// of its answer, bitwise (at `at` with `dim` = [`SPLIT_CHECK`]'s extent).
fn splits(op: &Op, at: &Dims, dim: &str, ins: &[bool]) -> Result<(), String> {
    let (n, subset) = SPLIT_CHECK;
    let w = widened(op, dim, n);
    let d = at.with(dim, n);
    let x = inputs::generate(&w, &d, Dist::Normal, 0x5EED, DType::F64);
    let full = w.forward(&d, &x.reference).map_err(|e| e.to_string())?;
    let cut: Vec<Tensor> = x.reference.iter().zip(ins).map(|(t, &h)| if h { take_rows(t, &subset) } else { t.clone() }).collect();
    let sub = w.forward(&at.with(dim, subset.len()), &cut).map_err(|e| e.to_string())?;
    let same = full.outputs.iter().zip(&sub.outputs).all(|(f, s)| take_rows(f, &subset).to_le_bytes() == s.to_le_bytes());
    if same {
        Ok(())
    } else {
        Err(format!("the reference at some indices of {dim} is not those indices of the reference"))
    }
}

/// The indices of a dim of extent `n` that the probe compares, for `per` elements of the
/// largest input per index: 0, 1, n/2, n−3, n−2, n−1 and, for every 2^k with 2^16 ≤ 2^k ≤
/// `limit`, the indices holding flat elements 2^k − 1 and 2^k; ascending, each once, all < n.
pub fn sample_rows(n: usize, per: usize, limit: usize) -> Vec<usize> {
    let per = per.max(1);
    let mut r = vec![0, 1, n / 2, n.saturating_sub(3), n.saturating_sub(2), n.saturating_sub(1)];
    let mut p = 1usize << 16;
    while p <= limit {
        r.extend([(p - 1) / per, p / per]);
        p *= 2;
    }
    r.retain(|&i| i < n);
    r.sort_unstable();
    r.dedup();
    r
}

/// The largest extent the probe gives any dim: [`i32::MAX`]. A tilec kernel's sizes are i32
/// (the DSL's size scalars; `tilec-run`'s binder refuses 2^31 + 1), so a shape with an extent
/// past it is one no such kernel can take, whatever its offsets.
pub const MAX_EXTENT: usize = i32::MAX as usize;

/// Elements of the largest input that has `s` as its leading axis, per index of `s` at `at`:
/// (that input, the count, which inputs have `s`). None when `s` does not split the shapes.
fn per_index(op: &Op, at: &Dims, s: &str) -> Option<(usize, usize, Vec<bool>)> {
    let (ins, _) = leading(op, at, s)?;
    let per: Vec<usize> = op.input_shapes(&at.with(s, 1)).iter().zip(&ins).map(|(sh, &h)| if h { numel(sh) } else { 0 }).collect();
    let (input, c) = per.iter().enumerate().fold((0, 0), |b, (i, &c)| if c > b.1 { (i, c) } else { b });
    Some((input, c, ins))
}

/// The shape past `limit` flat elements for `op` from `base` (see the module docs), with the
/// bytes of the candidate's tensors in `precision`'s dtypes. `Err` says why no dim qualifies.
///
/// Every extent stays ≤ [`MAX_EXTENT`]: where the grown dim alone would need more (one element
/// per index: softmax, matmul, the row-wise and elementwise classes), one other changeable dim
/// is raised to the smallest value that brings it under (softmax N = 2, R = 2^30 + 1; matmul
/// K = 2, M = 2^30 + 1). The grown dim still splits the class (checked at the raised shape),
/// so its indices stay independent and [`sample_rows`] applies unchanged.
pub fn flat_shape(op: &Op, base: &Dims, precision: &Precision, limit: usize) -> Result<FlatProbe, String> {
    let changeable: Vec<_> = op.dims.iter().filter(|d| d.kind != DimKind::Fixed).collect();
    let mut start = base.clone();
    for o in &changeable {
        start = start.with(o.name, o.min.max(1));
    }
    let mut best: Option<FlatProbe> = None;
    let mut why = Vec::new();
    for s in changeable.iter().filter(|s| s.kind != DimKind::Reduction) {
        let Some((_, c, _)) = per_index(op, &start, s.name) else {
            why.push(format!("{} is not the leading axis of every output and input that has it", s.name));
            continue;
        };
        if c == 0 {
            continue;
        }
        // The shapes to try: every other dim at its minimum or, when that needs an extent past
        // MAX_EXTENT, each other changeable dim raised to the smallest value that avoids it.
        let mut tries = vec![start.clone()];
        if limit / c + 1 > MAX_EXTENT {
            tries.clear();
            for o in changeable.iter().filter(|o| o.name != s.name) {
                let lo = start.get(o.name);
                let v = (lo + 1..=o.max.min(lo + 1024)).find(|&v| per_index(op, &start.with(o.name, v), s.name).is_some_and(|(_, c, _)| c > 0 && limit / c < MAX_EXTENT));
                if let Some(v) = v {
                    tries.push(start.with(o.name, v));
                }
            }
            if tries.is_empty() {
                why.push(format!("{}: {} > i32::MAX indices needed and no other dim raises its elements per index", s.name, limit / c + 1));
                continue;
            }
        }
        for at in tries {
            let Some((input, c, ins)) = per_index(op, &at, s.name) else {
                why.push(format!("{} is not the leading axis of every output and input that has it at {at}", s.name));
                continue;
            };
            let n = limit / c + 1;
            let d = at.with(s.name, n);
            if let Err(e) = widened(op, s.name, n).check_dims(&d).map_err(|e| e.to_string()).and_then(|_| splits(op, &at, s.name, &ins)) {
                why.push(format!("{}: {e}", s.name));
                continue;
            }
            let count = |shapes: Vec<Vec<usize>>, t: DType| shapes.iter().map(|s| numel(s)).sum::<usize>().saturating_mul(t.storage().bytes());
            let bytes = count(op.input_shapes(&d), precision.input).saturating_add(count(op.output_shapes(&d), precision.output));
            let rows = sample_rows(n, c, limit);
            let name = op.inputs.get(input).map(|i| i.name).unwrap_or("?");
            let past = if limit.is_power_of_two() { format!("2^{}", limit.trailing_zeros()) } else { limit.to_string() };
            let label = format!("{}={n} (past {past} flat elements: {name} holds {}; {} indices of {} compared)", s.name, n * c, rows.len(), s.name);
            if best.as_ref().is_none_or(|b| bytes < b.candidate_bytes) {
                best = Some(FlatProbe { label, dims: d, dim: s.name, input, elements: n * c, rows, candidate_bytes: bytes });
            }
        }
    }
    best.ok_or_else(|| format!("no dim of {} splits its outputs: {}", op.id, why.join("; ")))
}

/// Host memory available now (`MemAvailable` of `/proc/meminfo`), bytes; None when unknown.
pub fn host_available() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = text.lines().find(|l| l.starts_with("MemAvailable:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// Why memory does not allow probe `p` for `cand` (None: it does): the candidate process's
/// address-space cap ([`Candidate::memory_limit_mb`]) below [`FlatProbe::candidate_bytes`], or
/// [`FlatProbe::host_bytes`] above `host` bytes available (unknown: not probed).
pub fn memory_skip(cand: &dyn Candidate, p: &FlatProbe, host: Option<usize>) -> Option<String> {
    let mib = |b: usize| b >> 20;
    let cap = cand.memory_limit_mb() as usize;
    if cap > 0 && mib(p.candidate_bytes) > cap {
        return Some(format!("its inputs and outputs need {} MiB > the candidate process's {cap} MiB address-space cap", mib(p.candidate_bytes)));
    }
    match host {
        None => Some("host memory unknown: no MemAvailable in /proc/meminfo".into()),
        Some(a) if p.host_bytes() > a => Some(format!(
            "needs {} MiB of host memory ({HOST_COPIES} x {} MiB of inputs and outputs) > {} MiB available",
            mib(p.host_bytes()),
            mib(p.candidate_bytes),
            mib(a)
        )),
        Some(_) => None,
    }
}

/// The probe CMP-03 runs for `ctx`'s candidate at [`FLAT_ELEMENTS`], or why it is skipped: the
/// candidate computes on the CPU, no dim splits the class ([`flat_shape`]), or memory does not
/// allow it ([`memory_skip`] with [`host_available`]).
pub fn plan(ctx: &Ctx) -> Result<FlatProbe, String> {
    let device = ctx.harness.cand.compute_device();
    if device == Device::Cpu {
        return Err("the candidate computes on the cpu".into());
    }
    let p = flat_shape(ctx.op, &ctx.dims, &ctx.precision, FLAT_ELEMENTS)?;
    match memory_skip(ctx.harness.cand.as_ref(), &p, host_available()) {
        Some(why) => Err(format!("{}: {why}", p.dims)),
        None => Ok(p),
    }
}

/// Element types the inputs are generated in.
trait Elem: Copy + Default + Send + Sync {
    fn slice(s: &Storage) -> Option<&[Self]>;
    fn storage(v: Vec<Self>) -> Storage;
}

macro_rules! elem {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn storage(v: Vec<Self>) -> Storage {
                Storage::$v(v)
            }
        }
    };
}
elem!(f64, F64);
elem!(f32, F32);
elem!(bf16, Bf16);
elem!(f16, F16);

/// The inputs of `op` at `dims` in `dtype`'s storage: standard normal, generated by
/// [`inputs::generate`] in chunks of indices along `dim` (≤ [`CHUNK_ELEMENTS`] elements of
/// each input per chunk; chunk k at seed `seed + k`), chunks spread over every core. Inputs
/// without `dim` (`has[i]` false) are chunk 0's. Errors: a dtype that is not a float format.
pub fn flat_inputs(op: &Op, dims: &Dims, dim: &str, has: &[bool], dtype: DType, seed: u64) -> Result<Vec<Tensor>, String> {
    match dtype.storage() {
        DType::F64 => fill::<f64>(op, dims, dim, has, dtype, seed),
        DType::F32 => fill::<f32>(op, dims, dim, has, dtype, seed),
        DType::Bf16 => fill::<bf16>(op, dims, dim, has, dtype, seed),
        DType::F16 => fill::<f16>(op, dims, dim, has, dtype, seed),
        d => Err(format!("inputs of dtype {} are not generated", d.name())),
    }
}

type Chunk<'a, T> = (usize, Vec<&'a mut [T]>);

fn fill<T: Elem>(op: &Op, dims: &Dims, dim: &str, has: &[bool], dtype: DType, seed: u64) -> Result<Vec<Tensor>, String> {
    let n = dims.get(dim).max(1);
    let shapes = op.input_shapes(dims);
    let per: Vec<usize> = shapes.iter().map(|s| numel(s) / n).collect();
    let widest = per.iter().zip(has).filter(|(_, &h)| h).map(|(p, _)| *p).max().unwrap_or(1).max(1);
    let step = (CHUNK_ELEMENTS / widest).max(1);
    let chunks = n.div_ceil(step);
    let mut bufs: Vec<Vec<T>> = shapes.iter().zip(has).map(|(s, &h)| if h { vec![T::default(); numel(s)] } else { Vec::new() }).collect();
    let threads = std::thread::available_parallelism().map(|t| t.get()).unwrap_or(1).clamp(1, chunks.max(1));
    let mut groups: Vec<Vec<Chunk<'_, T>>> = (0..threads).map(|_| Vec::new()).collect();
    let mut parts: Vec<_> = bufs.iter_mut().zip(&per).map(|(b, &p)| b.chunks_mut((step * p).max(1))).collect();
    for k in 0..chunks {
        let slices: Vec<&mut [T]> = parts.iter_mut().map(|it| it.next().unwrap_or_default()).collect();
        if let Some(g) = groups.get_mut(k % threads) {
            g.push((k, slices));
        }
    }
    let shared: Mutex<Option<Vec<Tensor>>> = Mutex::new(None);
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|sc| {
        for g in groups {
            let (shared, failed) = (&shared, &failed);
            sc.spawn(move || {
                for (k, slices) in g {
                    let rows = step.min(n - k * step);
                    let x = inputs::generate(op, &dims.with(dim, rows), Dist::Normal, seed.wrapping_add(k as u64), dtype);
                    for ((dst, t), &h) in slices.into_iter().zip(&x.candidate).zip(has) {
                        match T::slice(&t.data) {
                            Some(v) if v.len() == dst.len() => dst.copy_from_slice(v),
                            _ if !h => {}
                            _ => {
                                if let Ok(mut f) = failed.lock() {
                                    *f = Some(format!("chunk {k}: generated {} elements of dtype {}, expected {}", t.len(), t.dtype().name(), dst.len()));
                                }
                            }
                        }
                    }
                    if k == 0 {
                        if let Ok(mut s) = shared.lock() {
                            *s = Some(x.candidate);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    let first = shared.into_inner().ok().flatten().ok_or("no chunk generated")?;
    Ok(bufs
        .into_iter()
        .zip(shapes)
        .zip(has)
        .zip(first)
        .map(|(((b, s), &h), f)| if h { Tensor { shape: s, device: Device::Cpu, data: Arc::new(T::storage(b)) } } else { f })
        .collect())
}

/// Run probe `p` for gate `gate` with inputs of `seed` (see [`flat_inputs`]): the reference at
/// `p.rows` only, the candidate at `p.dims`, its answer at `p.rows` compared under the
/// deterministic bound. A refusal is [`Probe::Refused`] (CMP-03 lists it as declined past the
/// envelope); an output of the wrong shape is a structural failure.
pub fn run_probe(ctx: &Ctx, gate: &str, p: &FlatProbe, seed: u64) -> Probe {
    let op = widened(ctx.op, p.dim, p.dims.get(p.dim));
    let Some((has, _)) = leading(&op, &p.dims, p.dim) else { return Probe::NotApplicable(format!("{} does not split {}", p.dim, op.id)) };
    let x = match flat_inputs(&op, &p.dims, p.dim, &has, ctx.precision.input, seed) {
        Ok(x) => x,
        Err(e) => return Probe::NotApplicable(e),
    };
    let cut: Vec<Tensor> = x.iter().zip(&has).map(|(t, &h)| if h { take_rows(t, &p.rows) } else { t.clone() }).map(|t| Tensor::f64(t.shape.clone(), t.to_f64_vec())).collect();
    let r = match op.forward(&p.dims.with(p.dim, p.rows.len()), &cut) {
        Ok(r) => r,
        Err(e) => return Probe::NotApplicable(e.to_string()),
    };
    let call = ctx.harness.forward(gate, &p.dims, x);
    match call.outcome {
        Err(e) if e.is_runtime_failure() => Probe::Runtime(e),
        Err(e) => Probe::Refused(e.to_string()),
        Ok(outs) => {
            let want = op.output_shapes(&p.dims);
            if let Some((o, (c, w))) = outs.iter().zip(&want).enumerate().find(|(_, (c, w))| &c.shape != *w) {
                let structural = Some(format!("output {o} has shape {:?}, expected {w:?}", c.shape));
                return Probe::Values(ValueReport { structural, worst_ratio: f64::INFINITY, ..Default::default() });
            }
            let cut: Vec<Tensor> = outs.iter().map(|t| take_rows(t, &p.rows)).collect();
            Probe::Values(compare::compare(&r, &cut, &ctx.precision, BoundKind::Deterministic))
        }
    }
}
