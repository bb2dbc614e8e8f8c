//! The IR interpreter: runs a kernel's tile IR on the CPU, over the whole grid, with the
//! numerics of tilec's own GPU lowering for one target ([`Options::target`]: sm_90a by
//! default, or sm_100a). It is the executable specification of the IR and what CI uses to run
//! DSL programs without a GPU (`tilec run --interp [--target sm_90a|sm_100a]`).
//!
//! Numerics (issue 3, part 4; issue 8, item 6):
//! * Storage: bf16/f16 values are rounded to nearest even whenever a result, a variable or a
//!   store has a 16-bit type; loads widen exactly.
//! * Arithmetic: done in f32 and rounded to the result's element type; `exp2`, `exp`
//!   (= `exp2(x·log2 e)`), `log2`, `sqrt` in f32; integers are checked (no wrap-around).
//!   Reductions sum sequentially from index 0 in f32.
//! * MMA (`Op::Mma`), in K steps of 16 like both lowerings (`mma.rs` has the details):
//!   - sm_90a (`backend/sm90/mma_sync.rs`, `mma.sync`): the steps accumulate from +0, then one f32
//!     operation with the old accumulator: `D_old ± (s₁ + s₂ + …)`.
//!   - sm_100a (`backend/sm100/mma.rs`, `tcgen05.mma`): a TMEM accumulator seeds the first step
//!     and every step rounds into it, `-=` negating the products: `(D_old ± s₁) ± s₂ …`. An
//!     accumulator outside TMEM takes `mma.sync` on sm_100a too, so the sm_90a order.
//!   - One step is its exact products summed with the incoming accumulator (in f64) and
//!     rounded once to f32. The tensor core's order, alignment and rounding inside one step
//!     are not specified by NVIDIA and not modelled, so results may differ from a GPU in the
//!     last bits of a step; the association across steps and with the old accumulator is the
//!     lowering's.
//! * Memory: past the edge of a tensor declared `edge(zeros)` loads read 0 and stores are dropped
//!   (masked partial tiles); past any other tensor's edge the run stops (`ExecError::PastEdge`).
//!
//! CTAs run one after another in grid order (x fastest, then y, then z); each is a single
//! logical thread over whole tiles, with its variables empty at the start.
//!
//! ```no_run
//! # fn demo(kernel: &tilec::ir::Kernel, inputs: &tilec::interp::Inputs) -> Result<(), tilec::interp::InterpError> {
//! let outputs = tilec::interp::run_kernel(kernel, inputs)?;
//! for (name, t) in &outputs {
//!     println!("{name}: {:?} {:?}", t.dtype, t.shape);
//! }
//! # Ok(()) }
//! ```

pub mod bind;
mod dump;
mod elementwise;
mod error;
mod eval;
mod mma;
pub mod operator;
mod value;

use std::collections::BTreeMap;

use tilec_abi::tensor::HostTensor;

pub use error::{ExecError, InterpError};
pub use operator::{run_operator, LaunchFailure};

use crate::backend::Target;
use crate::ir::{validate, Kernel, ParamKind};

/// Input tensors by parameter name. Scalar parameters are rank-0 (or `[1]`) tensors; output
/// tensors may be given too (their initial contents), otherwise they start as zeros.
pub type Inputs = BTreeMap<String, HostTensor>;

/// Output tensors (every parameter declared `out`) by name, after the whole grid has run.
pub type Outputs = BTreeMap<String, HostTensor>;

/// Limits and explicit sizes for a run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Instruction budget over the whole grid: one step per executed instruction and per loop
    /// iteration. Exceeding it is [`InterpError::StepLimit`], so a runaway loop fails instead of
    /// hanging.
    pub max_steps: u64,
    /// Largest tensor, tile or grid, in elements (guards against allocating absurd sizes).
    pub max_elements: u64,
    /// Symbolic sizes fixed by the caller; others are inferred from the input shapes.
    pub sizes: BTreeMap<String, i64>,
    /// Whose MMA accumulation order to follow: the lowering for this target (sm_90a by
    /// default; see the module docs).
    pub target: Target,
    /// Wall-clock limit of the whole run (`None`: only the step budget), checked every 64
    /// steps. A runaway loop stops with [`ExecError::TimeLimit`] at the instruction it was
    /// executing.
    pub time_limit: Option<std::time::Duration>,
    /// Names of `let` bindings or variables whose every value in CTA [`Options::dump_cta`] is
    /// recorded into [`Run::dumps`] (`tilec run --interp --dump NAME`; see the `dump` module),
    /// at most [`Options::max_elements`] elements in all.
    pub dump: Vec<String>,
    /// The CTA (`program_id` x, y, z) whose values [`Options::dump`] records.
    pub dump_cta: [i64; 3],
}

impl Default for Options {
    fn default() -> Self {
        Options { max_steps: 50_000_000, max_elements: 1 << 28, sizes: BTreeMap::new(), target: Target::Sm90a, time_limit: None, dump: vec![], dump_cta: [0; 3] }
    }
}

/// TMEM lifecycle instructions one CTA executed. They are no-ops for the interpreter; the
/// counts let tests check the planner's one alloc / relinquish / dealloc per CTA.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TmemCounts {
    /// `tcgen05.alloc`
    pub alloc: u32,
    /// `tcgen05.relinquish_alloc_permit`
    pub relinquish: u32,
    /// `tcgen05.dealloc`
    pub dealloc: u32,
}

/// Per-CTA facts of a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CtaStats {
    /// `program_id` (x, y, z).
    pub pid: [i64; 3],
    /// TMEM lifecycle counts.
    pub tmem: TmemCounts,
}

/// The result of [`run_kernel_with`].
#[derive(Clone, Debug)]
pub struct Run {
    /// Output tensors by name.
    pub outputs: Outputs,
    /// Values of [`Kernel::sizes`] used, in order.
    pub sizes: Vec<i64>,
    /// Grid (x, y, z).
    pub grid: [i64; 3],
    /// One entry per CTA, in execution order.
    pub ctas: Vec<CtaStats>,
    /// Steps taken (see [`Options::max_steps`]).
    pub steps: u64,
    /// The values [`Options::dump`] asked for: `dump.NAME`, shape `[records, rows, cols]`.
    pub dumps: BTreeMap<String, HostTensor>,
}

/// Runs `kernel` over its whole grid with default [`Options`] and returns the output tensors.
///
/// # Errors
/// See [`run_kernel_with`].
pub fn run_kernel(kernel: &Kernel, inputs: &Inputs) -> Result<Outputs, InterpError> {
    run_kernel_with(kernel, inputs, &Options::default()).map(|r| r.outputs)
}

/// Runs `kernel` over its whole grid.
///
/// The kernel must pass [`crate::ir::validate::validate`]. Sizes are bound from the input
/// shapes (plus `opts.sizes`), the grid is evaluated from [`Kernel::grid`], and every CTA runs.
///
/// # Errors
/// [`InterpError::Invalid`] for IR the validator rejects; input errors (missing, unknown,
/// dtype, rank, extent, unbound size); [`InterpError::StepLimit`]; and
/// [`InterpError::Exec`] for a failing instruction (read before write, integer division by
/// zero or overflow, invalid float-to-int conversion), with the CTA and instruction.
pub fn run_kernel_with(kernel: &Kernel, inputs: &Inputs, opts: &Options) -> Result<Run, InterpError> {
    let valid = validate::validate(kernel).map_err(|errors| InterpError::Invalid { kernel: kernel.name.clone(), errors })?;
    let mut bound = bind::bind(kernel, inputs, &opts.sizes, opts.max_elements)?;
    let deadline = opts.time_limit.map(|d| (std::time::Instant::now() + d, d));
    let mut budget = eval::Budget { used: 0, limit: opts.max_steps, deadline };
    let grid = bound.grid;
    let mut watch = dump::Watch::new(kernel, &opts.dump, opts.max_elements)?;
    let roles = crate::passes::var_roles::VarRoles::compute(kernel, opts.target.info());
    if !watch.is_empty() && (0..3).any(|a| !(0..grid[a]).contains(&opts.dump_cta[a])) {
        return Err(InterpError::DumpCtaOutsideGrid { cta: opts.dump_cta, grid });
    }
    let mut ctas = Vec::new();
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let pid = [x, y, z];
                let mut cta = eval::Cta::new(&valid, &mut bound, pid, &mut budget, opts.max_elements, opts.target, &roles);
                if pid == opts.dump_cta && !watch.is_empty() {
                    cta.watch = Some(&mut watch);
                }
                match cta.run() {
                    Ok(()) => ctas.push(CtaStats { pid, tmem: cta.tmem }),
                    Err((_, ExecError::StepLimit { limit })) => return Err(InterpError::StepLimit { limit }),
                    Err((inst, source)) => {
                        return Err(InterpError::Exec { kernel: kernel.name.clone(), cta: pid, inst, source });
                    }
                }
            }
        }
    }
    let mut outputs = Outputs::new();
    for (p, d) in kernel.params.iter() {
        if let (ParamKind::Tensor { output: true, .. }, Some(Some(g))) = (&d.kind, bound.tensors.get(p)) {
            outputs.insert(d.name.clone(), bind::to_host(&d.name, g)?);
        }
    }
    Ok(Run { outputs, sizes: bound.sizes, grid, ctas, steps: budget.used, dumps: watch.into_tensors()? })
}
