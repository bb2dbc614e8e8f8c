//! Targets and their limits: one [`TargetInfo`] per architecture, chosen once per build
//! ([`Target::info`], [`lookup`]) and read by the compiler (sema, the planners, the CLI, the back
//! end) and by kverify's RES-02 —
//! instead of `if target == …` tests scattered over the compiler (Cranelift's `isa::lookup` is
//! the model).
//!
//! Sources of the numbers: CUDA C++ Programming Guide, "Technical Specifications per Compute
//! Capability" (9.0 and 10.0: 227 KiB = 232,448 B of shared memory per CTA, 1024 threads per
//! CTA, 228 KiB of shared memory per SM of which 1 KiB is reserved per resident CTA, 255
//! registers per thread, 65,536 registers per SM, grid limits 2³¹−1 × 65,535 × 65,535);
//! PTX ISA 8.8 "Tensor Memory" (512 columns × 128 lanes of 32 bits per CTA on sm_100a) and
//! "Matrix Descriptor" (the 14-bit start-address field holds `addr >> 4`, so a tcgen05 or wgmma
//! operand must lie below 2¹⁸ = 256 KiB of the shared window); blackwell.md §1–§2.

use std::fmt;
use std::str::FromStr;

/// A GPU target tilec generates code for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Blackwell, arch-specific: tcgen05 tensor cores and tensor memory.
    Sm100a,
    /// Hopper, arch-specific: `mma.sync` (runs on the H200).
    Sm90a,
}

/// A target name tilec does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown target `{0}` (expected sm_100a or sm_90a)")]
pub struct UnknownTarget(pub String);

/// Tensor memory of one CTA (PTX ISA "Tensor Memory"; blackwell.md §1.1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TmemInfo {
    /// Columns of 32-bit cells (512).
    pub columns: u32,
    /// Lanes (rows), 128; warp `w` reaches lanes `32·(w mod 4) ..+32`.
    pub lanes: u32,
}

/// The matrix-multiply instructions a target has, fastest first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MmaSet {
    /// `mma.sync.aligned.m16n8k16` (warp-level, registers; sm_80 and later).
    pub mma_sync: bool,
    /// `wgmma.mma_async` (warpgroup-level, shared-memory descriptors; sm_90a only).
    pub wgmma: bool,
    /// `tcgen05.mma` (single-thread issue, TMEM accumulators; sm_100a).
    pub tcgen05: bool,
}

/// Everything the compiler needs to know about one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// Which target.
    pub target: Target,
    /// PTX `.target` and LLVM CPU name.
    pub name: &'static str,
    /// LLVM target features: the PTX ISA version (sm_100a: PTX 8.8, blackwell.md §0; sm_90a:
    /// PTX 8.0 covers everything emitted there).
    pub llvm_features: &'static str,
    /// Most dynamic shared memory one CTA may use, in bytes (opt-in maximum).
    pub smem_per_cta: u32,
    /// Shared memory of one SM, in bytes (228 KiB on 9.0 and 10.0), and what the driver
    /// reserves of it per resident CTA (1 KiB): how many CTAs fit side by side.
    pub smem_per_sm: u32,
    /// Shared memory the system reserves per resident CTA, in bytes.
    pub smem_reserved_per_cta: u32,
    /// Exclusive upper bound of a shared-memory byte address a wgmma/tcgen05 matrix descriptor
    /// can encode. Above `smem_per_cta`, so every plan within the budget is encodable.
    pub smem_descriptor_range: u32,
    /// Tensor memory, when the target has it.
    pub tmem: Option<TmemInfo>,
    /// Most threads per CTA.
    pub max_threads_per_cta: u32,
    /// Most registers per thread.
    pub max_registers_per_thread: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// Most resident threads and CTAs per SM (CUDA C++ Programming Guide, "Compute
    /// Capabilities", technical specifications: 2,048 and 32 for 9.0 and 10.0).
    pub max_threads_per_sm: u32,
    /// Most resident CTAs per SM.
    pub max_ctas_per_sm: u32,
    /// Largest grid extent in x, y, z.
    pub max_grid: [u32; 3],
    /// Matrix-multiply instructions.
    pub mma: MmaSet,
    /// Whether TMA (`cp.async.bulk.tensor`) exists.
    pub tma: bool,
    /// Most bytes of kernel parameters the PTX version emitted for this target allows (PTX ISA
    /// "Kernel parameter size": 4,352 before PTX 8.1, 32,764 from 8.1; sm_90a emits 8.0).
    pub max_param_bytes: u32,
}

const CC9_10_SMEM: u32 = 232_448;
const GRID: [u32; 3] = [i32::MAX as u32, 65_535, 65_535];

impl TargetInfo {
    /// Most CTAs of `threads` threads an SM holds side by side by its resident thread and CTA
    /// limits alone (shared memory, registers and tensor memory aside).
    pub fn most_resident_ctas(&self, threads: u32) -> u32 {
        self.max_ctas_per_sm.min(self.max_threads_per_sm / threads.max(1))
    }
}

static SM100A: TargetInfo = TargetInfo {
    target: Target::Sm100a,
    name: "sm_100a",
    llvm_features: "+ptx88",
    smem_per_cta: CC9_10_SMEM,
    smem_per_sm: 233_472,
    smem_reserved_per_cta: 1024,
    smem_descriptor_range: 1 << 18,
    tmem: Some(TmemInfo { columns: 512, lanes: 128 }),
    max_threads_per_cta: 1024,
    max_registers_per_thread: 255,
    registers_per_sm: 65_536,
    max_threads_per_sm: 2048,
    max_ctas_per_sm: 32,
    max_grid: GRID,
    mma: MmaSet { mma_sync: true, wgmma: false, tcgen05: true },
    tma: true,
    max_param_bytes: 32_764,
};

static SM90A: TargetInfo = TargetInfo {
    target: Target::Sm90a,
    name: "sm_90a",
    llvm_features: "+ptx80",
    smem_per_cta: CC9_10_SMEM,
    smem_per_sm: 233_472,
    smem_reserved_per_cta: 1024,
    smem_descriptor_range: 1 << 18,
    tmem: None,
    max_threads_per_cta: 1024,
    max_registers_per_thread: 255,
    registers_per_sm: 65_536,
    max_threads_per_sm: 2048,
    max_ctas_per_sm: 32,
    max_grid: GRID,
    mma: MmaSet { mma_sync: true, wgmma: true, tcgen05: false },
    tma: true,
    max_param_bytes: 4_352,
};

/// The target named `name` (`sm_100a`, `sm_90a`).
///
/// # Errors
/// [`UnknownTarget`] for any other name.
pub fn lookup(name: &str) -> Result<&'static TargetInfo, UnknownTarget> {
    Target::from_str(name).map(Target::info)
}

impl Target {
    /// Every target, in the order `--target all` builds them.
    pub const ALL: [Target; 2] = [Target::Sm100a, Target::Sm90a];

    /// This target's limits and instruction sets.
    pub fn info(self) -> &'static TargetInfo {
        match self {
            Target::Sm100a => &SM100A,
            Target::Sm90a => &SM90A,
        }
    }

    /// The PTX `.target` / LLVM CPU name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether tcgen05 instructions (and tensor memory) exist on this target.
    pub fn has_tcgen05(self) -> bool {
        self.info().mma.tcgen05
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = UnknownTarget;
    fn from_str(s: &str) -> Result<Target, UnknownTarget> {
        Target::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownTarget(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for t in Target::ALL {
            assert_eq!(lookup(t.name()).map(|i| i.target), Ok(t));
        }
        assert_eq!(lookup("sm_100"), Err(UnknownTarget("sm_100".into())));
    }

    #[test]
    fn tensor_memory_comes_with_tcgen05_and_descriptors_reach_the_whole_budget() {
        for t in Target::ALL {
            let i = t.info();
            assert_eq!(i.tmem.is_some(), i.mma.tcgen05, "{t}");
            assert_eq!(i.smem_per_cta, 227 * 1024, "{t}");
            // The descriptor's 14-bit `addr >> 4` field spans 2^18 B, past the whole budget.
            assert!(i.smem_descriptor_range >= i.smem_per_cta + 1024, "{t}");
        }
        assert_eq!(Target::Sm100a.info().tmem.map(|m| m.columns * m.lanes * 4), Some(256 * 1024)); // 256 KiB of TMEM per SM
        assert_eq!(Target::Sm100a.info().tmem.map(|m| m.columns), Some(512));
    }
}
