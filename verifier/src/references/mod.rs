//! fp64 references: the ground truth every gate compares against.
//!
//! Each operator class is one [`Op`]: a kernel written once, generic over the float type
//! (`num_traits::Float`), instantiated at f64 for the reference and at f32 for the honest
//! in-process mirror candidate; an error profile (see [`crate::error_model`]) computed in f64
//! from the reference's own magnitudes; and fixed shape conventions (fairness rule 6).
//! [`Op::forward`] refuses any input that is not f64 (fairness rule 12): it never upcasts.
//! Everything runs in plain Rust f64 on the CPU, so no TF32 or other reduced mode can creep
//! in (fairness rule 11).

pub mod attention;
pub mod attention_bwd;
pub mod conv;
pub mod conv_bwd;
pub mod elementwise;
pub mod index;
pub mod linear;
pub mod linear_bwd;
pub mod normalize;
pub mod normalize_bwd;
pub mod recurrence;
pub mod recurrence_profile;
pub mod reduce;
pub mod reduce_bwd;
pub mod registry;

use crate::error_model::ErrorProfile;
use crate::tensor::{DType, Tensor};
use serde::Serialize;
use std::sync::Arc;

pub use registry::{all_ops, op_by_id, op_hint};

/// Errors a reference can raise.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum RefError {
    /// An input was not f64 (the reference never upcasts).
    #[error("reference {op}: input {input} has dtype {dtype:?}; references accept f64 only")]
    NotF64 {
        /// Operator id.
        op: String,
        /// Input index.
        input: usize,
        /// Offending dtype.
        dtype: DType,
    },
    /// Wrong number of inputs or a shape that does not match the dims.
    #[error("reference {op}: {msg}")]
    Shape {
        /// Operator id.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// The dims violate the operator's conventions.
    #[error("reference {op}: illegal dims: {msg}")]
    Illegal {
        /// Operator id.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// An input value lies outside the reference's domain (e.g. a non-finite value for the
    /// recurrence classes, whose oracle refuses NaN and ±Inf): never charged (rule 1).
    #[error("reference {op}: input outside the reference's domain: {msg}")]
    Domain {
        /// Operator id.
        op: String,
        /// What is outside the domain.
        msg: String,
    },
    /// The operator has no backward.
    #[error("reference {op}: no backward")]
    NoBackward {
        /// Operator id.
        op: String,
    },
}

/// Role of a dimension in the shape conventions (what CMP-03 may do with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DimKind {
    /// Independent batch-like extent: CMP-03 tries 1.
    Batch,
    /// Free output extent: CMP-03 tries odd sizes.
    Free,
    /// Reduction / sequence length: CMP-03 tries 2x and 4x.
    Reduction,
    /// Fixed: CMP-03 never changes it.
    Fixed,
}

/// One named dimension and its legal range.
#[derive(Debug, Clone, Serialize)]
pub struct DimSpec {
    /// Name (e.g. `M`).
    pub name: &'static str,
    /// Native size (used by CMP-01 and most gates).
    pub native: usize,
    /// Smallest legal size.
    pub min: usize,
    /// Largest legal size (the envelope).
    pub max: usize,
    /// Role.
    pub kind: DimKind,
}

/// Concrete sizes of every dimension, in the order of the op's [`DimSpec`]s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dims(pub Vec<(String, usize)>);

impl Dims {
    /// `(R, N)`: the rows and the row length of the row-wise classes (reductions, normalisations).
    pub fn rows(&self) -> (usize, usize) {
        (self.get("R"), self.get("N"))
    }

    /// Size of the named dimension (0 when absent, which conventions never produce).
    pub fn get(&self, name: &str) -> usize {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or(0)
    }
    /// A copy with one dimension changed.
    pub fn with(&self, name: &str, v: usize) -> Dims {
        Dims(self.0.iter().map(|(n, x)| (n.clone(), if n == name { v } else { *x })).collect())
    }
}

impl std::fmt::Display for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, v)| format!("{n}={v}")).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// One input of an operator.
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// Name.
    pub name: &'static str,
    /// Shape as a function of the dims.
    pub shape: fn(&Dims) -> Vec<usize>,
    /// Axis along which this input is reduced (drives the PRC-02 probe), if any.
    pub reduction_axis: Option<usize>,
    /// Whether this input carries the "data" that EXC-01/EXC-02 probes poison (weights and
    /// biases of norms do not).
    pub data: bool,
}

/// Slices of f64 / f32 values of all inputs.
pub type Kernel<T> = Arc<dyn Fn(&Dims, &[&[T]]) -> Vec<Vec<T>> + Send + Sync>;
/// Error profile per output, from dims, f64 inputs and f64 outputs.
pub type ProfileFn = Arc<dyn Fn(&Dims, &[&[f64]], &[Vec<f64>]) -> Vec<ErrorProfile> + Send + Sync>;
/// Backward: dims, inputs, output grads -> input grads.
pub type BackwardKernel<T> = Arc<dyn Fn(&Dims, &[&[T]], &[&[T]]) -> Vec<Vec<T>> + Send + Sync>;
/// Backward profile: dims, inputs, output grads, input grads.
pub type BackwardProfileFn = Arc<dyn Fn(&Dims, &[&[f64]], &[&[f64]], &[Vec<f64>]) -> Vec<ErrorProfile> + Send + Sync>;

/// The input structure of a class whose inputs are not free reals (the recurrence family:
/// unit-norm keys, log-decays ≤ 0, gates in (0, 1)), applied by every input generator of the
/// gates, and the values its reference refuses.
#[derive(Clone, Copy)]
pub struct InputRule {
    /// Maps raw generated values (one `Vec` per input, in input order, at `Dims`) onto the
    /// class's domain in place, before they are rounded to the declared input dtype.
    pub condition: fn(&Dims, &mut [Vec<f64>]),
    /// `Err(why)` for f64 inputs outside the reference's domain ([`RefError::Domain`]).
    pub admit: fn(&Dims, &[&[f64]]) -> Result<(), String>,
}

/// Backward of an operator (input gradients given output gradients).
#[derive(Clone)]
pub struct Backward {
    /// f64 instantiation (the reference gradient).
    pub k64: BackwardKernel<f64>,
    /// f32 instantiation (the honest mirror).
    pub k32: BackwardKernel<f32>,
    /// Error profile of each input gradient.
    pub profile: BackwardProfileFn,
}

/// An operator class with its fp64 reference.
#[derive(Clone)]
pub struct Op {
    /// Stable id (`matmul`, `softmax`, ...).
    pub id: &'static str,
    /// One-line description including the formula.
    pub summary: &'static str,
    /// Dimensions and their legal ranges.
    pub dims: Vec<DimSpec>,
    /// Extra legality rule across dims (e.g. conv needs L >= Kw).
    pub constraint: fn(&Dims) -> Result<(), String>,
    /// Inputs.
    pub inputs: Vec<InputSpec>,
    /// Output shapes as functions of dims.
    pub outputs: Vec<fn(&Dims) -> Vec<usize>>,
    /// f64 instantiation.
    pub k64: Kernel<f64>,
    /// f32 instantiation (honest mirror).
    pub k32: Kernel<f32>,
    /// Error profile.
    pub profile: ProfileFn,
    /// Backward, when defined.
    pub backward: Option<Backward>,
    /// Input structure and domain, for classes whose inputs are not free reals (`None`: any
    /// real input, non-finite values included).
    pub input_rule: Option<InputRule>,
    /// Outputs a candidate may return in f32 whatever its declared output dtype (a recurrence's
    /// final state, as fla returns it): RES-01 accepts either dtype for them.
    pub wide_outputs: &'static [usize],
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Op({})", self.id)
    }
}

/// A reference answer: f64 outputs with their error profiles.
#[derive(Debug, Clone)]
pub struct RefOutput {
    /// One f64 tensor per output.
    pub outputs: Vec<Tensor>,
    /// One profile per output.
    pub profiles: Vec<ErrorProfile>,
}

impl Op {
    /// The native dims.
    pub fn native(&self) -> Dims {
        Dims(self.dims.iter().map(|d| (d.name.to_string(), d.native)).collect())
    }

    /// Check that `dims` names every dimension within its legal range and meets the constraint.
    pub fn check_dims(&self, dims: &Dims) -> Result<(), RefError> {
        for spec in &self.dims {
            let v = dims.get(spec.name);
            if v < spec.min || v > spec.max {
                return Err(RefError::Illegal {
                    op: self.id.into(),
                    msg: format!("{}={} outside [{}, {}]", spec.name, v, spec.min, spec.max),
                });
            }
        }
        (self.constraint)(dims).map_err(|msg| RefError::Illegal { op: self.id.into(), msg })
    }

    /// True for the classes whose reference refuses non-finite inputs (the recurrence family):
    /// EXC-01's injected and row probes are `n/a` for them, only its poison-then-partial
    /// sequence is judged.
    pub fn finite_domain(&self) -> bool {
        self.input_rule.is_some()
    }

    /// True for the classes whose outputs are integer indices (argmax, argmin): a candidate
    /// declares an integer output dtype and every compared index must be equal.
    pub fn index_output(&self) -> bool {
        index::INDEX_CLASSES.contains(&self.id)
    }

    /// Shapes of the inputs at `dims`.
    pub fn input_shapes(&self, dims: &Dims) -> Vec<Vec<usize>> {
        self.inputs.iter().map(|i| (i.shape)(dims)).collect()
    }

    /// Shapes of the outputs at `dims`.
    pub fn output_shapes(&self, dims: &Dims) -> Vec<Vec<usize>> {
        self.outputs.iter().map(|f| f(dims)).collect()
    }

    fn check_inputs<'a>(&self, dims: &Dims, inputs: &'a [Tensor]) -> Result<Vec<&'a [f64]>, RefError> {
        self.check_dims(dims)?;
        if inputs.len() != self.inputs.len() {
            return Err(RefError::Shape {
                op: self.id.into(),
                msg: format!("expected {} inputs, got {}", self.inputs.len(), inputs.len()),
            });
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (i, (t, spec)) in inputs.iter().zip(&self.inputs).enumerate() {
            let v = t.as_f64().ok_or(RefError::NotF64 { op: self.id.into(), input: i, dtype: t.dtype() })?;
            let want = (spec.shape)(dims);
            if t.shape != want {
                return Err(RefError::Shape {
                    op: self.id.into(),
                    msg: format!("input {} `{}` has shape {:?}, expected {:?}", i, spec.name, t.shape, want),
                });
            }
            out.push(v);
        }
        if let Some(rule) = &self.input_rule {
            (rule.admit)(dims, &out).map_err(|msg| RefError::Domain { op: self.id.into(), msg })?;
        }
        Ok(out)
    }

    /// Run the fp64 reference. Errors: [`RefError::NotF64`] for any non-f64 input,
    /// [`RefError::Shape`] / [`RefError::Illegal`] for shapes outside the conventions,
    /// [`RefError::Domain`] for values the class's [`InputRule`] refuses.
    pub fn forward(&self, dims: &Dims, inputs: &[Tensor]) -> Result<RefOutput, RefError> {
        let xs = self.check_inputs(dims, inputs)?;
        let outs = (self.k64)(dims, &xs);
        let profiles = (self.profile)(dims, &xs, &outs);
        let shapes = self.output_shapes(dims);
        Ok(RefOutput {
            outputs: outs.into_iter().zip(shapes).map(|(v, s)| Tensor::f64(s, v)).collect(),
            profiles,
        })
    }

    /// Run the fp64 reference backward: gradients of every input given `grads` (one per
    /// output, f64, output shapes). Same errors as [`Op::forward`], plus
    /// [`RefError::NoBackward`].
    pub fn backward(&self, dims: &Dims, inputs: &[Tensor], grads: &[Tensor]) -> Result<RefOutput, RefError> {
        let bw = self.backward.as_ref().ok_or(RefError::NoBackward { op: self.id.into() })?;
        let xs = self.check_inputs(dims, inputs)?;
        let mut gs = Vec::new();
        for (i, g) in grads.iter().enumerate() {
            gs.push(g.as_f64().ok_or(RefError::NotF64 { op: self.id.into(), input: xs.len() + i, dtype: g.dtype() })?);
        }
        let outs = (bw.k64)(dims, &xs, &gs);
        let profiles = (bw.profile)(dims, &xs, &gs, &outs);
        let shapes = self.input_shapes(dims);
        Ok(RefOutput {
            outputs: outs.into_iter().zip(shapes).map(|(v, s)| Tensor::f64(s, v)).collect(),
            profiles,
        })
    }
}

/// NaN-propagating maximum (IEEE `maximum`, as torch.max): NaN if either operand is NaN.
pub fn nan_max<T: num_traits::Float>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a >= b {
        a
    } else {
        b
    }
}

/// Convert an f64 constant into the kernel's float type.
pub fn c<T: num_traits::Float>(x: f64) -> T {
    T::from(x).unwrap_or_else(T::nan)
}

/// `sum_k |a_ik| |b_kj|` for row-major a[m,k], b[k,n]: the magnitude scale of a matmul.
pub fn abs_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p].abs();
            let row = &b[p * n..(p + 1) * n];
            let o = &mut out[i * n..(i + 1) * n];
            for j in 0..n {
                o[j] += x * row[j].abs();
            }
        }
    }
    out
}
