//! In-process Rust candidates: a name, a declared precision and closures.

use super::{Candidate, CandidateError, CandidateOutput};
use crate::error_model::Precision;
use crate::references::{Dims, Op};
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

/// Forward closure of an in-process candidate.
pub type FwdFn = Arc<dyn Fn(&Dims, &mut [Tensor]) -> Result<CandidateOutput, CandidateError> + Send + Sync>;
/// Backward closure (inputs, output gradients) -> input gradients.
pub type BwdFn = Arc<dyn Fn(&Dims, &mut [Tensor], &[Tensor]) -> Result<CandidateOutput, CandidateError> + Send + Sync>;

/// A candidate made of closures.
#[derive(Clone)]
pub struct InProcess {
    /// Display name.
    pub name: String,
    /// Operator class id.
    pub op_id: String,
    /// Declared precision.
    pub precision: Precision,
    /// Forward.
    pub fwd: FwdFn,
    /// Backward, if any.
    pub bwd: Option<BwdFn>,
}

impl Candidate for InProcess {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn op_id(&self) -> String {
        self.op_id.clone()
    }
    fn precision(&self) -> Precision {
        self.precision
    }
    fn kind(&self) -> &'static str {
        "in-process"
    }
    fn has_backward(&self) -> bool {
        self.bwd.is_some()
    }
    fn forward(&self, dims: &Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError> {
        (self.fwd)(dims, inputs)
    }
    fn backward(&self, dims: &Dims, inputs: &mut [Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        match &self.bwd {
            Some(b) => b(dims, inputs, grads),
            None => Err(CandidateError::NoBackward),
        }
    }
}

/// Widen any supported tensor to f32 values (exact for bf16 / f16 / f32; f64 is rounded).
pub fn to_f32_vec(t: &Tensor) -> Vec<f32> {
    match t.as_f32() {
        Some(v) => v.to_vec(),
        None => t.to_f64_vec().into_iter().map(|x| x as f32).collect(),
    }
}

/// Write f32 results as a tensor of `dtype` (rounding to nearest even).
pub fn from_f32(shape: Vec<usize>, v: Vec<f32>, dtype: DType) -> Tensor {
    match dtype.storage() {
        DType::F32 => Tensor::f32(shape, v),
        d => Tensor::from_f64(shape, &v.iter().map(|&x| x as f64).collect::<Vec<_>>(), d),
    }
}

/// The honest mirror of `op`: the reference's own algorithm instantiated at f32, fed the
/// candidate's inputs widened to f32 (exact for bf16/f16) and writing the declared output dtype.
/// Errors: [`CandidateError::Refused`] when a shape does not match `dims`, or when the declared
/// accumulator is not f32 (the mirror accumulates in f32 and must not claim otherwise).
pub fn honest(op: &Op, precision: Precision) -> InProcess {
    let fop = op.clone();
    let out_dtype = precision.output;
    let fwd: FwdFn = Arc::new(move |dims, inputs| {
        if fop.check_dims(dims).is_err() {
            return Err(CandidateError::Refused(format!("illegal dims {dims}")));
        }
        let vals: Vec<Vec<f32>> = inputs.iter().map(to_f32_vec).collect();
        for (v, s) in vals.iter().zip(fop.input_shapes(dims)) {
            if v.len() != s.iter().product::<usize>() {
                return Err(CandidateError::Refused("input size does not match dims".into()));
            }
        }
        let refs: Vec<&[f32]> = vals.iter().map(|v| v.as_slice()).collect();
        let outs = (fop.k32)(dims, &refs);
        let shapes = fop.output_shapes(dims);
        Ok(CandidateOutput {
            outputs: outs.into_iter().zip(shapes).map(|(v, s)| from_f32(s, v, out_dtype)).collect(),
            ..Default::default()
        })
    });
    let bwd: Option<BwdFn> = op.backward.as_ref().map(|bw| {
        let bw = bw.clone();
        let bop = op.clone();
        let f: BwdFn = Arc::new(move |dims, inputs, grads| {
            let vals: Vec<Vec<f32>> = inputs.iter().map(to_f32_vec).collect();
            let gv: Vec<Vec<f32>> = grads.iter().map(to_f32_vec).collect();
            let refs: Vec<&[f32]> = vals.iter().map(|v| v.as_slice()).collect();
            let grefs: Vec<&[f32]> = gv.iter().map(|v| v.as_slice()).collect();
            let outs = (bw.k32)(dims, &refs, &grefs);
            let shapes = bop.input_shapes(dims);
            Ok(CandidateOutput {
                outputs: outs.into_iter().zip(shapes).map(|(v, s)| from_f32(s, v, out_dtype)).collect(),
                ..Default::default()
            })
        });
        f
    });
    InProcess { name: format!("honest-{}", op.id), op_id: op.id.to_string(), precision, fwd, bwd }
}
