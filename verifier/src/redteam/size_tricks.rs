//! Red-team tricks for CMP-03's sizes past every power of two and past the envelope, and the
//! NumPy-only layout trick (issue 12, items 3 and 4). Each sum trick has a NumPy twin of the
//! same name in `verifier/python/redteam/tricks.py`; their honest twins are `honest-chunked-sum` and
//! `honest-exp`.

use super::tricks::Trick;
use crate::candidate::inprocess::{to_f32_vec, FwdFn, InProcess};
use crate::candidate::CandidateOutput;
use crate::error_model::Precision;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Block width of [`tail_block_overwrites`] once a row no longer fits one block.
pub const MAX_BLOCK: usize = 1024;

fn tail_block_overwrites() -> InProcess {
    // One masked block of next_power_of_2(N) while N <= 1024; above, 1024-wide blocks whose
    // partial last block *stores* its sum into the accumulator instead of adding it (`=` for
    // `+=`). Right at every N <= 1024 and at every multiple of 1024 (65536, the envelope,
    // included); at N = 1025 the answer is x[1024] alone.
    let fwd: FwdFn = Arc::new(|d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        let out: Vec<f32> = (0..r)
            .map(|i| {
                let row = &v[i * n..(i + 1) * n];
                if n <= MAX_BLOCK {
                    return row.iter().sum();
                }
                let mut acc = 0f32;
                for blk in row.chunks(MAX_BLOCK) {
                    let s: f32 = blk.iter().sum();
                    acc = if blk.len() < MAX_BLOCK { s } else { acc + s };
                }
                acc
            })
            .collect();
        Ok(CandidateOutput { outputs: vec![Tensor::f32(vec![r], out)], ..Default::default() })
    });
    InProcess { name: "tail_block_overwrites".into(), op_id: "sum".into(), precision: Precision::F32, fwd, bwd: None }
}

fn u16_index_wrap() -> InProcess {
    // exp over x[R,N] with the column offset kept in 16 bits: right up to N = 65536, column
    // 65536 reads column 0 at N = 65537 (past the envelope of N, 16384).
    let fwd: FwdFn = Arc::new(|d, x| {
        let (r, n) = (d.get("R"), d.get("N"));
        let v = to_f32_vec(&x[0]);
        let out: Vec<f32> = (0..r * n).map(|k| v[k / n * n + (k % n) % 65_536].exp()).collect();
        Ok(CandidateOutput { outputs: vec![Tensor::f32(vec![r, n], out)], ..Default::default() })
    });
    InProcess { name: "u16_index_wrap".into(), op_id: "exp".into(), precision: Precision::F32, fwd, bwd: None }
}

/// The in-process tricks of this module.
pub fn tricks() -> Vec<Trick> {
    vec![
        Trick { name: "tail_block_overwrites", gate: "CMP-03", op: "sum", what: "sum whose partial last 1024-block stores instead of adding (wrong at N = 1025)", build: tail_block_overwrites },
        Trick { name: "u16_index_wrap", gate: "CMP-03", op: "exp", what: "exp with 16-bit column offsets (wrong past the envelope, N = 65537)", build: u16_index_wrap },
    ]
}

/// A trick that only an external worker can play (in-process candidates get dense tensors).
#[derive(Debug, Clone, Copy)]
pub struct ExternalTrick {
    /// Manifest name in `verifier/python/redteam/`.
    pub name: &'static str,
    /// Gate meant to catch it.
    pub gate: &'static str,
    /// Operator class.
    pub op: &'static str,
    /// What it does.
    pub what: &'static str,
}

/// The external-only tricks.
pub fn external_only_tricks() -> Vec<ExternalTrick> {
    vec![ExternalTrick {
        name: "reads_memory_order",
        gate: "CMP-03",
        op: "matmul",
        what: "reads each input in memory order as if contiguous (ignores strides)",
    }]
}
