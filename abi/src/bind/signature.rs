//! The part of a kernel's metadata that binding reads, as a borrowed view.
//!
//! The runtime binds against a loaded `*.meta.json` ([`KernelMeta`]); the interpreter binds
//! against a kernel that was never built, so it has no files, ptxas report or TMEM plan. Both
//! describe their parameters with the schema's own [`ParamMeta`] and hand the binder this
//! view, so there is one binder and it cannot drift between the two.

use crate::meta::{KernelMeta, ParamMeta, SizeBound};

/// What [`super::bind`] needs to know about a kernel. Field meanings are those of the same
/// fields of [`KernelMeta`] (`docs/metadata.md`).
#[derive(Debug, Clone, Copy)]
pub struct Signature<'m> {
    /// Kernel name (for error messages).
    pub kernel: &'m str,
    /// Symbolic size names.
    pub sizes: &'m [String],
    /// Parameters in order; tensors have a non-empty shape of size expressions.
    pub params: &'m [ParamMeta],
    /// Grid (x, y, z) as size expressions.
    pub grid: &'m [String; 3],
    /// Threads per CTA.
    pub block_threads: u32,
    /// Dynamic shared memory per CTA, in bytes.
    pub dynamic_smem_bytes: u32,
    /// Legal ranges of sizes (sizes not listed are unconstrained).
    pub envelope: &'m [SizeBound],
    /// Input tensors the caller may leave out: bound like a missing output (no data, extents
    /// from the other parameters), so the executor allocates them zero-filled (an operator's
    /// `optional(zeros)`, [`crate::plan::OperatorPlan::optional`]). Empty for a kernel.
    pub optional: &'m [String],
}

impl<'m> From<&'m KernelMeta> for Signature<'m> {
    fn from(m: &'m KernelMeta) -> Signature<'m> {
        Signature {
            kernel: &m.kernel,
            sizes: &m.sizes,
            params: &m.params,
            grid: &m.launch.grid,
            block_threads: m.launch.block_threads,
            dynamic_smem_bytes: m.launch.dynamic_smem_bytes,
            envelope: &m.contract.envelope,
            optional: &[],
        }
    }
}

impl Signature<'_> {
    /// Index of the parameter called `name`, if any.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}
