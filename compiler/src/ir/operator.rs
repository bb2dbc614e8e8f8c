//! Multi-kernel operators: a fixed sequence of kernel launches over the operator's parameters and
//! intermediate buffers (issue 10, `docs/language.md` "Operators"). Sema checks every launch
//! against the kernel's signature; `tilec build` writes the operator as
//! `<operator>.<target>.plan.json` ([`tilec_abi::plan`]) and `tilec run --interp` executes it.

use cranelift_entity::PrimaryMap;

use super::{Elem, ParamData, SizeExpr, SizeVar};
use crate::diag::Span;

/// An operator of a module.
#[derive(Clone, Debug)]
pub struct Operator {
    /// Its name (the plan's file name stem).
    pub name: String,
    /// Span of its name.
    pub span: Span,
    /// Symbolic sizes, in order of first appearance in parameter shapes.
    pub sizes: PrimaryMap<SizeVar, String>,
    /// Parameters in order, as a kernel's ([`ParamData`]).
    pub params: Vec<ParamData>,
    /// Intermediate buffers, allocated (zeroed) once per call.
    pub buffers: Vec<Buffer>,
    /// Launches in order.
    pub launches: Vec<Launch>,
    /// The recurrence member whose oracle judges the operator (`contract(gdn)`), if declared.
    pub contract: Option<kverify::recurrence::family::Model>,
    /// Parameter dimensions written as a size parameter's bare name (`k: bf16[B, T, H, K]`):
    /// (size parameter, parameter, dimension index). The plan records them so that a caller's
    /// tensor of another size is refused naming the size parameter and the sizes built.
    pub size_param_dims: Vec<(String, String, usize)>,
    /// Offset tables (`cu_seqlens: i32[NP] offsets(T)`): (parameter, the size they index).
    pub offsets: Vec<(String, String)>,
    /// Inputs the caller may leave out, zero-filled then (`s0: f32[B, H, K, V] optional(zeros)`).
    pub optional: Vec<String>,
}

/// A kernel's `contract(class)`: the kverify operator class (`kverify::references::op_by_id`)
/// its parameters bind to (sema checked the class and the binding, `verify::contract::bind`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelContract {
    /// The class id, e.g. `matmul`.
    pub class: String,
    /// The `contract(..)` clause.
    pub span: Span,
}

/// An intermediate buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Its name.
    pub name: String,
    /// Element type.
    pub elem: Elem,
    /// Shape over the operator's sizes.
    pub shape: Vec<SizeExpr>,
    /// Declaration span.
    pub span: Span,
}

/// One launch: the kernel and, per kernel parameter in order, the operator parameter or buffer
/// bound to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The kernel's name (a kernel of the module).
    pub kernel: String,
    /// `(kernel parameter, operator parameter or buffer)` pairs in the kernel's parameter order.
    pub args: Vec<(String, String)>,
    /// The launch statement.
    pub span: Span,
}

impl Operator {
    /// The text of a size expression with this operator's size names (the metadata syntax).
    pub fn size_text(&self, e: &SizeExpr) -> String {
        e.display(&self.sizes).to_string()
    }
}
