//! Thread ↔ element index maps of the hardware layouts, as pure functions that the back end
//! calls to emit its address arithmetic and that tests check against the layouts the PTX ISA
//! documents — so a swapped fragment register or a wrong lane quarter fails a test without a GPU.
//!
//! Each map is written once over [`IndexArith`]: evaluated on `u32` ([`Eval`]) in tests and
//! planners, and on LLVM values by the code generator (`backend::emit`), which implements the
//! trait by emitting the same operations in the same order.
//!
//! * [`bank`] — shared-memory bank conflicts of a warp's access, and the padded row pitch of a
//!   tile read in a wgmma fragment's order.
//! * [`mma_sync`] — `mma.sync.aligned.m16n8k16` A/B/C fragments (PTX ISA 9.7.14.5.8).
//! * [`tmem`] — tensor-memory lane quarters and addresses of `tcgen05.ld/st.32x32b` (PTX ISA
//!   "Tensor Memory", "Access restrictions").
//! * [`staging`] — the SWIZZLE_NONE K-major canonical layout tcgen05 and wgmma descriptors read
//!   (PTX ISA "Shared memory matrix layout"), and the staging buffers of an MMA.
//! * [`swizzle`] — the 32/64/128-byte swizzled tiles TMA writes and wgmma descriptors read.
//! * [`wgmma`] — the `wgmma` m64nNk16 accumulator fragment and its spread over warpgroups.
//! * [`reduction`] — the lanes and the fold order of a row reduction (`row_sum`, `row_max`).
//! * [`quad_transpose`] — the 4 × 4 word transpose across a quad that turns fragment pairs into
//!   16-byte row segments for vector stores.

pub mod bank;
pub mod mma_sync;
pub mod quad_transpose;
pub mod reduction;
pub mod ring;
pub mod staging;
pub mod swizzle;
pub mod tmem;
pub mod wgmma;

/// Integer index arithmetic on some value type: `u32` for evaluation, LLVM `i32` values for code
/// generation. Every method is one operation, so a map emits exactly what it says.
pub trait IndexArith {
    /// The value type.
    type V: Copy;
    /// The error of an emitting implementation.
    type E;
    /// The constant `c`.
    fn c(&self, c: u32) -> Self::V;
    /// `a + b`.
    fn add(&self, a: Self::V, b: Self::V) -> Result<Self::V, Self::E>;
    /// `a * b`.
    fn mul(&self, a: Self::V, b: Self::V) -> Result<Self::V, Self::E>;
    /// `a & mask`.
    fn and(&self, a: Self::V, mask: u32) -> Result<Self::V, Self::E>;
    /// `a << s`.
    fn shl(&self, a: Self::V, s: u32) -> Result<Self::V, Self::E>;
    /// `a >> s` (logical).
    fn shr(&self, a: Self::V, s: u32) -> Result<Self::V, Self::E>;
    /// `a ^ b`.
    fn xor(&self, a: Self::V, b: Self::V) -> Result<Self::V, Self::E>;
    /// `a / d` (unsigned, `d` > 0).
    fn udiv(&self, a: Self::V, d: u32) -> Result<Self::V, Self::E>;
    /// `a % d` (unsigned, `d` > 0).
    fn urem(&self, a: Self::V, d: u32) -> Result<Self::V, Self::E>;
}

/// Evaluation on `u32` (wrapping, as the 32-bit hardware arithmetic).
#[derive(Copy, Clone, Debug, Default)]
pub struct Eval;

impl IndexArith for Eval {
    type V = u32;
    type E = std::convert::Infallible;
    fn c(&self, c: u32) -> u32 {
        c
    }
    fn add(&self, a: u32, b: u32) -> Result<u32, Self::E> {
        Ok(a.wrapping_add(b))
    }
    fn mul(&self, a: u32, b: u32) -> Result<u32, Self::E> {
        Ok(a.wrapping_mul(b))
    }
    fn and(&self, a: u32, mask: u32) -> Result<u32, Self::E> {
        Ok(a & mask)
    }
    fn shl(&self, a: u32, s: u32) -> Result<u32, Self::E> {
        Ok(a.wrapping_shl(s))
    }
    fn shr(&self, a: u32, s: u32) -> Result<u32, Self::E> {
        Ok(a.wrapping_shr(s))
    }
    fn xor(&self, a: u32, b: u32) -> Result<u32, Self::E> {
        Ok(a ^ b)
    }
    fn udiv(&self, a: u32, d: u32) -> Result<u32, Self::E> {
        Ok(a / d)
    }
    fn urem(&self, a: u32, d: u32) -> Result<u32, Self::E> {
        Ok(a % d)
    }
}

/// Evaluates a map on `u32` (infallible).
pub fn eval<T>(r: Result<T, std::convert::Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => match e {},
    }
}
