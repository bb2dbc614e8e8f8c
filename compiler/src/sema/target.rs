//! Target rules the front end enforces before any code is generated.
//!
//! tcgen05 MMA shapes (blackwell.md §2.2; PTX ISA "tcgen05.mma" shape table): for `kind::f16`
//! with `cta_group::1`, M ∈ {64, 128}, N a multiple of 8 up to 256 and K = 16 per instruction.
//! The language accepts a tile-level MMA of `M x N x K` and splits it into instructions: N above
//! 256 into 256-column pieces and K into steps of 16. We require N to be a multiple of 16 (legal
//! in every variant, including an A operand in TMEM) and N ≤ 512 (the TMEM width).

use crate::ir::Elem;

/// Legal accumulator row counts (`M`).
pub const MMA_M: [u32; 2] = [64, 128];
/// `N` must be a multiple of this.
pub const MMA_N_STEP: u32 = 16;
/// Largest tile-level `N` (the TMEM width; split into ≤ 256-column instructions).
pub const MMA_N_MAX: u32 = 512;
/// `K` must be a multiple of this for 16-bit operands.
pub const MMA_K_STEP: u32 = 16;

/// Checks an MMA shape and operand types. Returns a list of problems (empty when legal).
pub fn check_mma(m: u32, n: u32, k: u32, a: Elem, b: Elem, d: Elem) -> Vec<String> {
    let mut errs = vec![];
    if !MMA_M.contains(&m) {
        errs.push(format!("M = {m} rows, but tcgen05.mma (cta_group::1) needs M ∈ {{64, 128}}"));
    }
    if n == 0 || n % MMA_N_STEP != 0 || n > MMA_N_MAX {
        errs.push(format!("N = {n} columns, but N must be a multiple of {MMA_N_STEP} in {MMA_N_STEP}..={MMA_N_MAX}"));
    }
    if k == 0 || k % MMA_K_STEP != 0 {
        errs.push(format!("K = {k}, but K must be a multiple of {MMA_K_STEP} for bf16/f16 operands"));
    }
    if !matches!(a, Elem::Bf16 | Elem::F16) || a != b {
        errs.push(format!("operands are {a} and {b}; kind::f16 needs both bf16 or both f16 (round with bf16(...))"));
    }
    if d != Elem::F32 {
        errs.push(format!("accumulator is {d}; it must be f32"));
    }
    errs
}

/// Largest tile extent the language accepts in one dimension (keeps register/shared tiles sane).
pub const MAX_TILE_EXTENT: i64 = 1024;
