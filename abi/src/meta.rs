//! The artifact metadata schema: `<kernel>.<target>.meta.json`, written by `tilec build`,
//! read by the runtime (argument binding, launch configuration), by the interpreter's binder
//! (through [`crate::bind::Signature`]) and by `kverify` (RES-02).
//!
//! Versioned: [`SCHEMA_VERSION`] is bumped on any incompatible change; readers refuse other
//! versions with an error. The field-by-field documentation is `docs/metadata.md`.

use serde::{Deserialize, Serialize};

mod load;
pub use load::{MetaError, MAX_BLOCK_THREADS};

/// Version of the metadata schema this crate writes. Version 2 added [`KernelMeta::tensor_maps`];
/// version-1 files are still read (as kernels without tensor maps: [`OLDEST_READ_VERSION`]).
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest schema version this crate reads.
pub const OLDEST_READ_VERSION: u32 = 1;

/// Metadata of one compiled kernel for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelMeta {
    /// Always [`SCHEMA_VERSION`] for files this crate writes.
    pub schema_version: u32,
    /// Kernel name, also the PTX entry symbol.
    pub kernel: String,
    /// `sm_100a` or `sm_90a`.
    pub target: String,
    /// Compiler name and version that produced the artifact.
    pub compiler: CompilerInfo,
    /// Source file and its content hash.
    pub source: SourceInfo,
    /// Symbolic sizes (e.g. `B`, `T`, `H`, `K`, `V`) that shapes and the grid refer to.
    pub sizes: Vec<String>,
    /// Kernel parameters in PTX parameter order.
    pub params: Vec<ParamMeta>,
    /// Launch configuration.
    pub launch: LaunchMeta,
    /// Tensor-memory plan; `None` when the kernel uses no TMEM.
    pub tmem: Option<TmemMeta>,
    /// Static shared memory the kernel needs, in bytes (the compiler's shared-memory plan).
    pub smem_bytes: u32,
    /// What `ptxas -v` reported, when ptxas ran.
    pub ptxas: Option<PtxasInfo>,
    /// The kernel's declared contract (what verify-on-compile and RES-02 check against).
    pub contract: Contract,
    /// Files of this artifact, relative to the metadata file's folder.
    pub files: ArtifactFiles,
    /// TMA tensor maps the kernel takes after its size arguments, in order (schema v2; absent
    /// and empty in v1 files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_maps: Vec<TensorMapMeta>,
}

/// Most dimensions of a tensor map (`cuTensorMapEncodeTiled`'s `tensorRank`).
pub const TENSOR_MAP_MAX_RANK: usize = 5;
/// Largest box extent of a tensor map in any dimension.
pub const TENSOR_MAP_MAX_BOX: u32 = 256;
/// Alignment in bytes of a mapped tensor's base address and of every stride but the innermost.
pub const TENSOR_MAP_ALIGN: u64 = 16;
/// Strides must lie below this many bytes.
pub const TENSOR_MAP_STRIDE_LIMIT: u64 = 1 << 40;
/// Extents must lie in `1..=TENSOR_MAP_MAX_EXTENT`.
pub const TENSOR_MAP_MAX_EXTENT: u64 = 1 << 32;

/// One `CUtensorMap` a kernel takes as a 128-byte, 64-byte-aligned `__grid_constant__`
/// parameter, which the launcher encodes with `cuTensorMapEncodeTiled` from the named tensor's
/// device pointer and bound shape (dense row-major: global dimensions are the shape reversed,
/// global strides the row-major byte strides). The launcher encodes it only when the tensor's
/// base is 16-byte aligned, every stride but the innermost is a multiple of 16 bytes and every
/// extent lies in 1..=2³²; otherwise it passes 128 zero bytes, and the kernel, which tests the
/// same conditions, does not use the map (it copies element by element instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorMapMeta {
    /// The tensor parameter the map describes (one of [`KernelMeta::params`]).
    pub tensor: String,
    /// Box extent per tensor dimension, outermost first (the same order as the shape), each in
    /// 1..=256; the innermost times the element size is at most the swizzle width.
    #[serde(rename = "box")]
    pub box_dims: Vec<u32>,
    /// Element strides per dimension, outermost first (1: every element of the box).
    pub element_strides: Vec<u32>,
    /// Shared-memory swizzle of the box: `none`, `32B`, `64B` or `128B`
    /// (`CU_TENSOR_MAP_SWIZZLE_*`).
    pub swizzle: String,
    /// What out-of-bounds box elements read as: `zero` (`CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`,
    /// which fills zeros).
    pub oob_fill: String,
}

impl TensorMapMeta {
    /// The swizzle width in bytes (0 for `none`), or `None` for an unknown name.
    pub fn swizzle_bytes(&self) -> Option<u32> {
        match self.swizzle.as_str() {
            "none" => Some(0),
            "32B" => Some(32),
            "64B" => Some(64),
            "128B" => Some(128),
            _ => None,
        }
    }
}

/// Which compiler produced an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompilerInfo {
    /// `tilec`.
    pub name: String,
    /// Crate version of the compiler.
    pub version: String,
}

/// Source of an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceInfo {
    /// Path as given on the command line.
    pub path: String,
    /// FNV-1a 64-bit hash of the source bytes ([`crate::hash::fnv1a64_hex`]), as 16 lowercase
    /// hex digits.
    pub hash: String,
}

/// Element type of a tensor or scalar parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE binary32.
    F32,
    /// 32-bit signed integer.
    I32,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }
}

/// Whether a parameter is read, written or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read only.
    Input,
    /// Written (and possibly read).
    Output,
    /// Read and written.
    Inout,
}

/// One kernel parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamMeta {
    /// Parameter name in the source.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape as expressions over [`KernelMeta::sizes`] (e.g. `["B", "T", "H", "K"]`);
    /// empty for a scalar parameter. Tensors are dense and row-major (last index fastest).
    pub shape: Vec<String>,
    /// Input / output role.
    pub role: Role,
}

/// Launch configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchMeta {
    /// Grid (x, y, z) as expressions over the sizes, e.g. `"cdiv(V, 64)"`; missing dims are `"1"`.
    pub grid: [String; 3],
    /// Threads per CTA.
    pub block_threads: u32,
    /// Dynamic shared memory per CTA in bytes.
    pub dynamic_smem_bytes: u32,
}

/// The TMEM plan of a kernel (see `docs/tmem-planner.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmemMeta {
    /// Columns passed to the single `tcgen05.alloc` (power of two, 32..=512).
    pub alloc_columns: u32,
    /// Peak of simultaneously live columns.
    pub peak_columns: u32,
    /// Every TMEM buffer with its placement.
    pub buffers: Vec<TmemBufferMeta>,
    /// How many alloc / relinquish / dealloc instructions each CTA executes.
    pub lifecycle: Lifecycle,
}

/// One planned TMEM buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmemBufferMeta {
    /// Source name (or a compiler-made name for temporaries).
    pub name: String,
    /// Lanes used (64 or 128).
    pub lanes: u32,
    /// Columns used (32-bit cells per lane).
    pub columns: u32,
    /// First column, relative to the allocation's base.
    pub offset: u32,
    /// Live range as `[first, last]` program points (inclusive).
    pub live: [u32; 2],
}

/// Counts of TMEM lifecycle instructions per CTA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    /// `tcgen05.alloc` count.
    pub alloc: u32,
    /// `tcgen05.relinquish_alloc_permit` count.
    pub relinquish: u32,
    /// `tcgen05.dealloc` count.
    pub dealloc: u32,
}

/// Resource usage reported by `ptxas -v`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtxasInfo {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of spill stores.
    pub spill_store_bytes: u32,
    /// Bytes of spill loads.
    pub spill_load_bytes: u32,
    /// Shared memory per CTA in bytes as ptxas counts it.
    pub shared_bytes: u32,
    /// Stack frame bytes.
    pub stack_bytes: u32,
}

/// The declared contract of a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Whether local-memory spills are forbidden.
    pub no_spill: bool,
    /// Accumulator precision the kernel declares (e.g. `f32`).
    pub accumulator: DType,
    /// Name of the reference operator the kernel implements (e.g. `gemm`,
    /// `gdn.bwd.dhu`), which `kverify` maps to its fp64 reference; absent when undeclared.
    /// Optional since schema v1 (files without it stay valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The shape envelope: the legal range of each symbolic size. Sizes not listed are
    /// unconstrained (any value ≥ 1). Optional since schema v1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub envelope: Vec<SizeBound>,
}

/// The legal values of one symbolic size: `min ≤ value ≤ max` and `value % multiple_of == 0`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeBound {
    /// The size name (one of [`KernelMeta::sizes`]).
    pub size: String,
    /// Smallest legal value (default 1).
    #[serde(default = "one")]
    pub min: u64,
    /// Largest legal value; `None` means no upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// The value must be a multiple of this (default 1).
    #[serde(default = "one")]
    pub multiple_of: u64,
}

fn one() -> u64 {
    1
}

impl SizeBound {
    /// Whether `value` lies inside this bound.
    // `u64::is_multiple_of` needs Rust 1.87; the workspace promises 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    pub fn admits(&self, value: u64) -> bool {
        value >= self.min
            && self.max.is_none_or(|m| value <= m)
            && (self.multiple_of == 0 || value % self.multiple_of == 0)
    }
}

/// Files belonging to an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactFiles {
    /// PTX file name.
    pub ptx: String,
    /// Cubin file name, when ptxas was available.
    pub cubin: Option<String>,
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Hand-written metadata shared by the unit tests.
    use super::*;

    /// The `axpb` smoke-test kernel: `y[i] = a * x[i] + b` for `i < N`, one thread per element.
    /// Must match `runtime/tests/fixtures/axpb.meta.json` (checked by a test in `bind`).
    pub(crate) fn axpb_meta() -> KernelMeta {
        let p = |name: &str, dtype, shape: &[&str], role| ParamMeta {
            name: name.into(),
            dtype,
            shape: shape.iter().map(|s| s.to_string()).collect(),
            role,
        };
        KernelMeta {
            schema_version: SCHEMA_VERSION,
            kernel: "axpb".into(),
            target: "sm_90a".into(),
            compiler: CompilerInfo { name: "hand-written".into(), version: "0".into() },
            source: SourceInfo { path: "runtime/tests/fixtures/axpb.ptx".into(), hash: "0000000000000000".into() },
            sizes: vec!["N".into()],
            params: vec![
                p("a", DType::F32, &[], Role::Input),
                p("x", DType::F32, &["N"], Role::Input),
                p("y", DType::F32, &["N"], Role::Output),
                p("b", DType::F32, &[], Role::Input),
                p("N", DType::I32, &[], Role::Input),
            ],
            launch: LaunchMeta {
                grid: ["cdiv(N, 128)".into(), "1".into(), "1".into()],
                block_threads: 128,
                dynamic_smem_bytes: 0,
            },
            tmem: None,
            smem_bytes: 0,
            ptxas: None,
            contract: Contract {
                no_spill: true,
                accumulator: DType::F32,
                reference: Some("axpb".into()),
                envelope: vec![SizeBound { size: "N".into(), min: 1, max: Some(1 << 30), multiple_of: 1 }],
            },
            files: ArtifactFiles { ptx: "axpb.ptx".into(), cubin: None },
            tensor_maps: vec![],
        }
    }
}
