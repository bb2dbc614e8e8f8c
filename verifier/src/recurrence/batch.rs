//! Runs a reference over fla's layouts: `[B, T, H, ·]` tensors, `[N, H, K, V]` states, and
//! optional `cu_seqlens` (varlen, B = 1; gdn-math.md §1 "Varlen"). Each (sequence, head) is an
//! independent problem; they are spread over the available CPU cores.

use super::chunk;
use super::family::{Gate, MemberInputs, Model};
use super::problem::{HeadInputs, HeadSeeds};
use super::serial;
use super::tensor::{Mat, Tensor};
use super::{HeadOutputs, RecurrenceError};

/// Which algorithm computes the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Token-serial. For a family member this is the member's own definition.
    Serial,
    /// Chunkwise (B0..B6) on the general recurrence, with the member's gates mapped onto it.
    Chunk,
}

/// A whole problem in fla's layout. All tensors fp64.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Which recurrence; decides which of `g`, `b`, `w`, `beta` are present.
    pub model: Model,
    /// Queries `[B, T, H, K]`, unscaled.
    pub q: Tensor,
    /// Keys `[B, T, H, K]`, used as given (no l2norm here; [`super::io::generate`] draws them
    /// normalised).
    pub k: Tensor,
    /// Values `[B, T, H, V]`.
    pub v: Tensor,
    /// Natural-log decay: `[B, T, H, K]` (general, GLA, KDA), `[B, T, H]` (SSD, GDN), absent for LA.
    pub g: Option<Tensor>,
    /// Erase gate `[B, T, H, K]` (general only).
    pub b: Option<Tensor>,
    /// Write gate `[B, T, H, V]` (general only).
    pub w: Option<Tensor>,
    /// β `[B, T, H]` (KDA, GDN only): erase and write gate, `b = w = β·1`.
    pub beta: Option<Tensor>,
    /// Initial state `[N, H, K, V]`, N = B or the number of varlen sequences.
    pub s0: Tensor,
    /// Loss seed `∂L/∂o` `[B, T, H, V]` (fla: `do`).
    pub d_o: Tensor,
    /// Loss seed `∂L/∂S_T` `[N, H, K, V]` (fla: `dht`).
    pub dst: Tensor,
    /// Multiplies q inside the recurrence, `o_t = S_tᵀ(scale·q_t)` (fla's default `K^-0.5`).
    pub scale: f64,
    /// Sequence boundaries `[N+1]` (requires B = 1), or `None`.
    pub cu_seqlens: Option<Vec<usize>>,
}

/// Outputs and gradients in fla's layout (same shapes as the matching inputs).
#[derive(Clone, Debug)]
pub struct Results {
    /// Output `[B, T, H, V]`.
    pub o: Tensor,
    /// Final state `S_T` `[N, H, K, V]`.
    pub st: Tensor,
    /// `∂L/∂q` `[B, T, H, K]`, with respect to the unscaled q.
    pub dq: Tensor,
    /// `∂L/∂k` `[B, T, H, K]`.
    pub dk: Tensor,
    /// `∂L/∂v` `[B, T, H, V]`.
    pub dv: Tensor,
    /// `∂L/∂g`, shaped as `g` (scalar gates: `Σ_c dg_c`); `None` for LA.
    pub dg: Option<Tensor>,
    /// `∂L/∂b` `[B, T, H, K]` (general only).
    pub db: Option<Tensor>,
    /// `∂L/∂w` `[B, T, H, V]` (general only).
    pub dw: Option<Tensor>,
    /// `∂L/∂β` `[B, T, H]` = `Σ_c db_c + Σ_v dw_v` (KDA, GDN only).
    pub dbeta: Option<Tensor>,
    /// `∂L/∂S_0` `[N, H, K, V]`.
    pub ds0: Tensor,
}

impl Results {
    /// Every tensor present under its file name (`o`, `st`, `dq`, `dk`, `dv`, `ds0`, then `dg`,
    /// `db`, `dw`, `dbeta` when the model has them) — the names [`super::io::write`] uses.
    pub fn named(&self) -> Vec<(&'static str, &Tensor)> {
        let mut v = vec![("o", &self.o), ("st", &self.st), ("dq", &self.dq), ("dk", &self.dk), ("dv", &self.dv), ("ds0", &self.ds0)];
        for (name, t) in [("dg", &self.dg), ("db", &self.db), ("dw", &self.dw), ("dbeta", &self.dbeta)] {
            if let Some(t) = t {
                v.push((name, t));
            }
        }
        v
    }
}

/// Sizes `(B, T, H, K, V)` of a problem, read from `q` and `v`; all zero when either is not 4-D.
/// H is q's (key) heads; see [`value_heads`] for GVA.
pub fn dims(p: &Problem) -> (usize, usize, usize, usize, usize) {
    let s = &p.q.shape;
    if s.len() != 4 || p.v.shape.len() != 4 {
        return (0, 0, 0, 0, 0);
    }
    (s[0], s[1], s[2], s[3], p.v.shape[3])
}

/// HV, the value heads (v's third extent): H without GVA, a multiple of H with it (fla's
/// grouped value attention: value head `hv` reads key head `hv / (HV / H)`). 0 when v is not 4-D.
pub fn value_heads(p: &Problem) -> usize {
    if p.v.shape.len() == 4 {
        p.v.shape[2]
    } else {
        0
    }
}

impl Problem {
    /// Every input tensor present under its file name (`q`, `k`, `v`, `s0`, `do`, `dst`, then
    /// `g`, `b`, `w`, `beta` when the model has them) — the names [`super::io::write`] and
    /// [`super::io::read_problem`] use (fla calls `dst` `dht`).
    pub fn named_inputs(&self) -> Vec<(&'static str, &Tensor)> {
        let mut v = vec![("q", &self.q), ("k", &self.k), ("v", &self.v), ("s0", &self.s0), ("do", &self.d_o), ("dst", &self.dst)];
        for (name, t) in [("g", &self.g), ("b", &self.b), ("w", &self.w), ("beta", &self.beta)] {
            if let Some(t) = t {
                v.push((name, t));
            }
        }
        v
    }

    /// [`Problem::named_inputs`], writable.
    pub fn named_inputs_mut(&mut self) -> Vec<(&'static str, &mut Tensor)> {
        let mut v = vec![("q", &mut self.q), ("k", &mut self.k), ("v", &mut self.v), ("s0", &mut self.s0), ("do", &mut self.d_o), ("dst", &mut self.dst)];
        for (name, t) in [("g", &mut self.g), ("b", &mut self.b), ("w", &mut self.w), ("beta", &mut self.beta)] {
            if let Some(t) = t {
                v.push((name, t));
            }
        }
        v
    }

    /// `(batch index, start, end)` of every sequence: `(b, 0, T)` for each b, or with
    /// `cu_seqlens` `(0, c_n, c_{n+1})` for each n.
    ///
    /// Errors: [`RecurrenceError::CuSeqlens`] when B ≠ 1, or `cu_seqlens` does not run strictly
    /// increasing from 0 to T.
    pub fn sequences(&self) -> Result<Vec<(usize, usize, usize)>, RecurrenceError> {
        let (bsz, t, ..) = dims(self);
        match &self.cu_seqlens {
            None => Ok((0..bsz).map(|b| (b, 0, t)).collect()),
            Some(cu) => {
                if bsz != 1 {
                    return Err(RecurrenceError::CuSeqlens(format!("varlen needs batch 1, got {bsz}")));
                }
                if cu.len() < 2 || cu[0] != 0 || *cu.last().unwrap_or(&0) != t {
                    return Err(RecurrenceError::CuSeqlens(format!("must start at 0 and end at T = {t}, got {cu:?}")));
                }
                if cu.windows(2).any(|w| w[1] <= w[0]) {
                    return Err(RecurrenceError::CuSeqlens(format!("must be strictly increasing, got {cu:?}")));
                }
                Ok(cu.windows(2).map(|w| (0, w[0], w[1])).collect())
            }
        }
    }

    /// Checks every tensor's shape against q and v and the model's gate layout, and that every
    /// value (and `scale`) is finite.
    ///
    /// Errors: [`RecurrenceError::Shape`], [`RecurrenceError::NonFinite`],
    /// [`RecurrenceError::Missing`] (a gate the model needs), [`RecurrenceError::Invalid`] (a gate
    /// it does not take), [`RecurrenceError::CuSeqlens`].
    pub fn validate(&self) -> Result<(), RecurrenceError> {
        if self.q.shape.len() != 4 {
            return Err(RecurrenceError::Shape { name: "q".into(), expected: vec![0, 0, 0, 0], got: self.q.shape.clone() });
        }
        let (bsz, t, hk, kd) = (self.q.shape[0], self.q.shape[1], self.q.shape[2], self.q.shape[3]);
        let vd = self.v.shape.last().copied().unwrap_or(0);
        // Every tensor but q and k has the value heads (GVA: a multiple of q's).
        let h = if self.v.shape.len() == 4 { self.v.shape[2] } else { hk };
        if hk == 0 || h % hk != 0 {
            return Err(RecurrenceError::Invalid(format!("v has {h} heads, not a multiple of q's {hk} (GVA groups value heads over key heads)")));
        }
        let n = self.sequences_count()?;
        let need = |name: &str, x: &Tensor, want: Vec<usize>| -> Result<(), RecurrenceError> {
            if x.shape != want {
                return Err(RecurrenceError::Shape { name: name.into(), expected: want, got: x.shape.clone() });
            }
            if x.data.iter().any(|z| !z.is_finite()) {
                return Err(RecurrenceError::NonFinite { name: name.into() });
            }
            Ok(())
        };
        let opt = |name: &str, x: &Option<Tensor>, want: Option<Vec<usize>>| -> Result<(), RecurrenceError> {
            match (x, want) {
                (Some(x), Some(w)) => need(name, x, w),
                (None, Some(_)) => Err(RecurrenceError::Missing(name.into())),
                (Some(_), None) => Err(RecurrenceError::Invalid(format!("model {} takes no `{name}`", self.model.name()))),
                (None, None) => Ok(()),
            }
        };
        need("q", &self.q, vec![bsz, t, hk, kd])?;
        need("k", &self.k, vec![bsz, t, hk, kd])?;
        need("v", &self.v, vec![bsz, t, h, vd])?;
        need("do", &self.d_o, vec![bsz, t, h, vd])?;
        need("s0", &self.s0, vec![n, h, kd, vd])?;
        need("dst", &self.dst, vec![n, h, kd, vd])?;
        let g_shape = match self.model.gate() {
            Gate::None => None,
            Gate::Scalar => Some(vec![bsz, t, h]),
            Gate::Channel => Some(vec![bsz, t, h, kd]),
        };
        opt("g", &self.g, g_shape)?;
        let general = self.model == Model::General;
        opt("b", &self.b, general.then(|| vec![bsz, t, h, kd]))?;
        opt("w", &self.w, general.then(|| vec![bsz, t, h, vd]))?;
        opt("beta", &self.beta, self.model.has_beta().then(|| vec![bsz, t, h]))?;
        if !self.scale.is_finite() {
            return Err(RecurrenceError::NonFinite { name: "scale".into() });
        }
        Ok(())
    }

    fn sequences_count(&self) -> Result<usize, RecurrenceError> {
        Ok(self.sequences()?.len())
    }

    /// Member inputs of sequence `n`, head `h` (a family model; see [`Problem::sequences`]).
    ///
    /// Errors: bad cu_seqlens, or `n`/`h` out of range ([`RecurrenceError::Invalid`]).
    pub fn member_inputs(&self, n: usize, h: usize) -> Result<MemberInputs, RecurrenceError> {
        let seqs = self.sequences()?;
        let seq = *seqs.get(n).ok_or_else(|| RecurrenceError::Invalid(format!("sequence {n} out of range")))?;
        if h >= value_heads(self) {
            return Err(RecurrenceError::Invalid(format!("head {h} out of range")));
        }
        Ok(self.member(n, seq, h))
    }

    /// General-recurrence inputs of sequence `n`, head `h`: the general model's own tensors, or a
    /// member's gates mapped with [`Model::to_general`].
    ///
    /// Errors: as [`Problem::member_inputs`].
    pub fn general_inputs(&self, n: usize, h: usize) -> Result<HeadInputs, RecurrenceError> {
        let m = self.member_inputs(n, h)?;
        if self.model == Model::General {
            Ok(self.general(n, self.sequences()?[n], h))
        } else {
            Ok(self.model.to_general(&m))
        }
    }

    /// Loss seeds of sequence `n`, head `h`.
    ///
    /// Errors: as [`Problem::member_inputs`].
    pub fn seeds(&self, n: usize, h: usize) -> Result<HeadSeeds, RecurrenceError> {
        let (b, t0, t1) = *self.sequences()?.get(n).ok_or_else(|| RecurrenceError::Invalid(format!("sequence {n} out of range")))?;
        Ok(HeadSeeds { d_o: self.d_o.bthx_slice(b, h, t0, t1), dst: self.dst.state(n, h) })
    }

    /// The key head of value head `h` (GVA; `h` itself without).
    fn key_head(&self, h: usize) -> usize {
        h / (value_heads(self) / dims(self).2).max(1)
    }

    /// Per-head member inputs of sequence `n` = `(b, t0, t1)`, value head `h` (q and k of its
    /// key head).
    fn member(&self, n: usize, (b, t0, t1): (usize, usize, usize), h: usize) -> MemberInputs {
        let hk = self.key_head(h);
        let g = self.g.as_ref().map(|g| match self.model.gate() {
            Gate::Scalar => g.bth_slice(b, h, t0, t1),
            _ => g.bthx_slice(b, h, t0, t1),
        });
        MemberInputs {
            q: self.q.bthx_slice(b, hk, t0, t1),
            k: self.k.bthx_slice(b, hk, t0, t1),
            v: self.v.bthx_slice(b, h, t0, t1),
            g,
            beta: self.beta.as_ref().map(|x| x.bth_slice(b, h, t0, t1)),
            s0: self.s0.state(n, h),
            scale: self.scale,
        }
    }

    /// Per-head general inputs (general model only).
    fn general(&self, n: usize, (b, t0, t1): (usize, usize, usize), h: usize) -> HeadInputs {
        let slice = |x: &Option<Tensor>| x.as_ref().map(|x| x.bthx_slice(b, h, t0, t1)).unwrap_or_else(|| Mat::zeros(0, 0));
        let hk = self.key_head(h);
        HeadInputs {
            q: self.q.bthx_slice(b, hk, t0, t1),
            k: self.k.bthx_slice(b, hk, t0, t1),
            v: self.v.bthx_slice(b, h, t0, t1),
            g: slice(&self.g),
            b: slice(&self.b),
            w: slice(&self.w),
            s0: self.s0.state(n, h),
            scale: self.scale,
        }
    }
}

/// One (sequence, head) result, member-shaped.
struct Piece {
    out: HeadOutputs,
    grads: super::family::MemberGrads,
    db: Option<Mat>,
    dw: Option<Mat>,
}

/// Runs the forward and backward of `p` with `method` (`chunk` is the chunk size for
/// [`Method::Chunk`]; 16, 32 or 64).
///
/// Errors: shape, dtype-free validation, chunk size, cu_seqlens ([`RecurrenceError`]).
pub fn run(p: &Problem, method: Method, chunk_size: usize) -> Result<Results, RecurrenceError> {
    p.validate()?;
    if method == Method::Chunk {
        chunk::check_chunk(chunk_size)?;
    }
    let seqs = p.sequences()?;
    let heads = value_heads(p);
    let tasks: Vec<(usize, usize)> = (0..seqs.len()).flat_map(|n| (0..heads).map(move |h| (n, h))).collect();
    let solve = |&(n, h): &(usize, usize)| -> Result<Piece, RecurrenceError> {
        let seq = seqs[n];
        let (b, t0, t1) = seq;
        let seeds = HeadSeeds { d_o: p.d_o.bthx_slice(b, h, t0, t1), dst: p.dst.state(n, h) };
        if p.model == Model::General {
            let x = p.general(n, seq, h);
            let (out, g) = match method {
                Method::Serial => serial::forward_backward(&x, &seeds)?,
                Method::Chunk => chunk::forward_backward(&x, &seeds, chunk_size)?,
            };
            let (db, dw) = (Some(g.db.clone()), Some(g.dw.clone()));
            return Ok(Piece { out, grads: Model::General.reduce_grads(&g), db, dw });
        }
        let x = p.member(n, seq, h);
        let (out, grads) = match method {
            Method::Serial => p.model.own_forward_backward(&x, &seeds)?,
            Method::Chunk => {
                let (out, g) = chunk::forward_backward(&p.model.to_general(&x), &seeds, chunk_size)?;
                (out, p.model.reduce_grads(&g))
            }
        };
        Ok(Piece { out, grads, db: None, dw: None })
    };
    let pieces = parallel_map(&tasks, solve)?;

    let zeros_like = |x: &Option<Tensor>| x.as_ref().map(|x| Tensor::zeros(&x.shape));
    let mut r = Results {
        o: Tensor::zeros(&p.v.shape),
        st: Tensor::zeros(&p.s0.shape),
        dq: Tensor::zeros(&p.q.shape),
        dk: Tensor::zeros(&p.k.shape),
        dv: Tensor::zeros(&p.v.shape),
        dg: zeros_like(&p.g),
        db: zeros_like(&p.b),
        dw: zeros_like(&p.w),
        dbeta: zeros_like(&p.beta),
        ds0: Tensor::zeros(&p.s0.shape),
    };
    for (&(n, h), piece) in tasks.iter().zip(pieces) {
        let (b, t0, _) = seqs[n];
        r.o.set_bthx_slice(b, h, t0, &piece.out.o);
        r.st.set_state(n, h, &piece.out.st);
        // GVA: a group's value heads sum into their key head (in head order: deterministic).
        let hk = p.key_head(h);
        r.dq.add_bthx_slice(b, hk, t0, &piece.grads.dq);
        r.dk.add_bthx_slice(b, hk, t0, &piece.grads.dk);
        r.dv.set_bthx_slice(b, h, t0, &piece.grads.dv);
        r.ds0.set_state(n, h, &piece.grads.ds0);
        if let (Some(dst), Some(src)) = (r.dg.as_mut(), piece.grads.dg.as_ref()) {
            match p.model.gate() {
                Gate::Scalar => dst.set_bth_slice(b, h, t0, src),
                _ => dst.set_bthx_slice(b, h, t0, src),
            }
        }
        if let (Some(dst), Some(src)) = (r.dbeta.as_mut(), piece.grads.dbeta.as_ref()) {
            dst.set_bth_slice(b, h, t0, src);
        }
        if let (Some(dst), Some(src)) = (r.db.as_mut(), piece.db.as_ref()) {
            dst.set_bthx_slice(b, h, t0, src);
        }
        if let (Some(dst), Some(src)) = (r.dw.as_mut(), piece.dw.as_ref()) {
            dst.set_bthx_slice(b, h, t0, src);
        }
    }
    Ok(r)
}

/// Maps `f` over `items` on up to `available_parallelism` threads, keeping the order.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Result<R, RecurrenceError> + Sync) -> Result<Vec<R>, RecurrenceError> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(items.len().max(1));
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let per = items.len().div_ceil(threads);
    let parts: Vec<Result<Vec<R>, RecurrenceError>> = std::thread::scope(|s| {
        let handles: Vec<_> = items.chunks(per).map(|part| s.spawn(|| part.iter().map(&f).collect::<Result<Vec<R>, _>>())).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(RecurrenceError::Invalid("worker thread panicked".into())))).collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}
