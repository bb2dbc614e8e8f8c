//! Chunkwise fp64 forward and backward of the general recurrence, staged as the GPU pipeline.
//!
//! Source: gdn-math.md §3 (forward) and §4 (backward, stages B0..B6). Chunk size C ∈ {16, 32,
//! 64}; the last chunk of a sequence may be partial. Forward: cumsum → `[L, Ai]` → W, U →
//! state scan → O. Backward: B0 recompute W, U from the saved Ai → B1 recompute the scan →
//! B2 dv_local → B3 K#1 → B4 dq, dk₁, dW, dΓ₁ → B5 K#2 → B6 combine and reverse cumsum.

use super::chunk_bwd::{dqkwg, dv_local};
use super::chunk_fwd::{kkt_solve, output, recompute_w_u, state_scan};
use super::intra::{chunk_local_cumsum, reverse_chunk_local_cumsum};
use super::k1::reverse_state_scan;
use super::k2::wy_backward;
use super::problem::{HeadGrads, HeadInputs, HeadOutputs, HeadSeeds};
use super::RecurrenceError;

/// Chunk sizes fla supports for the gated delta rule.
pub const CHUNK_SIZES: [usize; 3] = [16, 32, 64];

/// What the forward keeps for the backward (as fla's autograd function does).
#[derive(Clone, Debug)]
pub struct Saved {
    /// Chunk-local cumsum of g, `[T, K]`.
    pub gamma: super::tensor::Mat,
    /// The per-chunk inverses `(I+L)^{-1}`, `[T, C]` (fla's `A`).
    pub ai: super::tensor::Mat,
}

/// Errors: [`RecurrenceError::ChunkSize`] unless `chunk` is 16, 32 or 64.
pub fn check_chunk(chunk: usize) -> Result<(), RecurrenceError> {
    if CHUNK_SIZES.contains(&chunk) {
        Ok(())
    } else {
        Err(RecurrenceError::ChunkSize(chunk))
    }
}

/// Chunked forward for one sequence and head. Returns `o` `[T, V]`, `S_T` `[K, V]` and the
/// saved tensors.
///
/// Errors: bad chunk size, shape mismatch or non-finite input.
pub fn forward(x: &HeadInputs, chunk: usize) -> Result<(HeadOutputs, Saved), RecurrenceError> {
    check_chunk(chunk)?;
    x.validate()?;
    let gamma = chunk_local_cumsum(&x.g, chunk);
    let ai = kkt_solve(&x.k, &x.b, &gamma, chunk);
    let (wy_w, wy_u) = recompute_w_u(&ai, &x.k, &x.v, &x.b, &x.w, &gamma, chunk);
    let scan = state_scan(&x.k, &gamma, &wy_w, &wy_u, &x.s0, chunk);
    let o = output(&x.q, &x.k, &gamma, &scan.h, &scan.v_new, x.scale, chunk);
    Ok((HeadOutputs { o, st: scan.st }, Saved { gamma, ai }))
}

/// Chunked forward and backward (B0..B6) for one sequence and head. Gradients are of
/// `L = Σ o⊙do + Σ S_T⊙dst`, as in [`super::serial::forward_backward`].
///
/// Errors: bad chunk size, shape mismatch or non-finite input/seed.
pub fn forward_backward(x: &HeadInputs, seeds: &HeadSeeds, chunk: usize) -> Result<(HeadOutputs, HeadGrads), RecurrenceError> {
    let (out, saved) = forward(x, chunk)?;
    let (t, kd, vd) = x.dims();
    seeds.validate(t, kd, vd)?;
    let Saved { gamma, ai } = saved;
    // B0, B1: recompute W, U and the forward scan (fla does not save them).
    let (wy_w, wy_u) = recompute_w_u(&ai, &x.k, &x.v, &x.b, &x.w, &gamma, chunk);
    let scan = state_scan(&x.k, &gamma, &wy_w, &wy_u, &x.s0, chunk);
    // B2: local dv through P.
    let dvl = dv_local(&x.q, &x.k, &gamma, &seeds.d_o, x.scale, chunk);
    // B3: K#1.
    let k1 = reverse_state_scan(&x.q, &x.k, &wy_w, &gamma, &seeds.d_o, &dvl, &seeds.dst, x.scale, chunk)?;
    // B4: dq, dk₁, dW, dΓ₁.
    let b4 = dqkwg(&x.q, &x.k, &gamma, &scan.h, &k1.dh, &scan.v_new, &seeds.d_o, &k1.dvn, x.scale, chunk);
    // B5: K#2.
    let k2 = wy_backward(&x.k, &x.v, &x.b, &x.w, &gamma, &ai, &b4.d_wy_w, &k1.dvn, chunk)?;
    // B6: combine and undo the cumsum.
    let mut dk = b4.dk;
    dk.add_assign(&k2.dk);
    let mut dgamma = b4.dgamma;
    dgamma.add_assign(&k2.dgamma);
    let grads = HeadGrads {
        dq: b4.dq,
        dk,
        dv: k2.dv,
        dg: reverse_chunk_local_cumsum(&dgamma, chunk),
        db: k2.db,
        dw: k2.dw,
        ds0: k1.dh0,
    };
    Ok((out, grads))
}
