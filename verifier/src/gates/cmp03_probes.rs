//! CMP-03's probes beyond the conventional shapes (issue 12, items 3 and 4).
//!
//! * **Past every power of two**: each changeable dim at 2^k + 1 for every k >= 1 with
//!   2^k + 1 <= its envelope maximum, the other changeable dims at their minimum (a kernel whose
//!   tiling or block count goes wrong just past a power of two is caught at the first such size).
//! * **Past the envelope**: the same dim at the next 2^k + 1 above its maximum and at 65,537
//!   (just past 2^16, the largest envelope), judged against the reference with that dim's range
//!   widened. The candidate may decline there (it is outside the contract: listed, not failed);
//!   an answer must be right. A shape whose f64 tensors would need more than
//!   [`PAST_ENVELOPE_BYTES`] is skipped with the reason printed in the gate's detail.
//! * **Layouts** (candidates that receive arrays: [`crate::candidate::Candidate::supports_layouts`]):
//!   at the base shape, every input once as a transposed view (last two axes column-major), once
//!   as a view at a storage offset behind NaN, once as a stride-0 (expanded) view along its first
//!   axis of extent > 1, the values made constant along that axis on both sides first. Same
//!   reference, same deterministic bound as the other shapes.

use super::{inputs, inputs::gate_seed, inputs::Dist, Ctx, Probe};
use crate::candidate::Layout;
use crate::error_model::BoundKind;
use crate::references::{DimKind, Dims, Op};
use crate::tensor::{numel, Tensor};

/// Memory budget of one past-envelope probe: the f64 bytes of its inputs and outputs, times 4
/// (reference copy, candidate copy, the candidate's output, the comparison).
pub const PAST_ENVELOPE_BYTES: usize = 1 << 30;

/// Just past 2^16: the largest envelope of any dim.
pub const PAST_65536: usize = 65_537;

/// One extra CMP-03 shape.
#[derive(Debug, Clone)]
pub struct SizeProbe {
    /// Label (`N=1025 (past 2^10)`).
    pub label: String,
    /// The dims.
    pub dims: Dims,
    /// The dim the probe moved (the one widened when it is past the envelope).
    pub dim: &'static str,
    /// Beyond the op's envelope: judged with the widened op, a refusal is not a failure.
    pub past_envelope: bool,
}

/// The op with the range of `dim` widened to `max` (for the reference past the envelope).
pub fn widened(op: &Op, dim: &str, max: usize) -> Op {
    let mut w = op.clone();
    for d in w.dims.iter_mut().filter(|d| d.name == dim) {
        d.max = d.max.max(max);
    }
    w
}

/// Bytes a probe at `dims` holds, as [`PAST_ENVELOPE_BYTES`] counts them.
pub fn probe_bytes(op: &Op, dims: &Dims) -> usize {
    let n: usize = op.input_shapes(dims).iter().chain(op.output_shapes(dims).iter()).map(|s| numel(s)).sum();
    n.saturating_mul(8 * 4)
}

/// The past-power-of-two and past-envelope shapes of `op` (base excluded) and the labels of
/// skipped ones with the reason; `cap` bytes bound a past-envelope probe.
pub fn size_set(op: &Op, base: &Dims, cap: usize) -> (Vec<SizeProbe>, Vec<String>) {
    let changeable: Vec<_> = op.dims.iter().filter(|d| d.kind != DimKind::Fixed).collect();
    let mut out: Vec<SizeProbe> = Vec::new();
    let mut skipped = Vec::new();
    for s in &changeable {
        let mut at_min = base.clone();
        for o in &changeable {
            at_min = at_min.with(o.name, o.min.max(1));
        }
        let mut sizes: Vec<(usize, String, bool)> = Vec::new();
        let mut p = 2usize;
        while p < s.max {
            sizes.push((p + 1, format!("past 2^{}", p.trailing_zeros()), false));
            p *= 2;
        }
        sizes.push((p + 1, format!("past 2^{}, past the envelope {}", p.trailing_zeros(), s.max), true));
        if PAST_65536 > p + 1 {
            sizes.push((PAST_65536, format!("past 2^16, past the envelope {}", s.max), true));
        }
        for (v, why, past) in sizes {
            if v < s.min {
                continue;
            }
            let d = at_min.with(s.name, v);
            let label = format!("{}={v} ({why})", s.name);
            if &d == base || out.iter().any(|x| x.dims == d) {
                continue;
            }
            let legal = if past { widened(op, s.name, v).check_dims(&d) } else { op.check_dims(&d) };
            if let Err(e) = legal {
                skipped.push(format!("{label} ({e})"));
                continue;
            }
            let bytes = probe_bytes(op, &d);
            if past && bytes > cap {
                skipped.push(format!("{label} (needs {} MiB > {} MiB memory budget)", bytes >> 20, cap >> 20));
                continue;
            }
            out.push(SizeProbe { label, dims: d, dim: s.name, past_envelope: past });
        }
    }
    (out, skipped)
}

/// The three layout probes: (label, per-input layouts) for inputs of the given shapes.
pub fn layout_set(shapes: &[Vec<usize>]) -> Vec<(&'static str, Vec<Layout>)> {
    let per = |f: &dyn Fn(&Vec<usize>) -> Layout| shapes.iter().map(f).collect::<Vec<_>>();
    vec![
        ("transposed views", per(&|s| if s.len() >= 2 && s[s.len() - 1] * s[s.len() - 2] > 1 { Layout::Transposed } else { Layout::Contiguous })),
        ("offset views", per(&|_| Layout::Offset)),
        ("expanded (stride-0) views", per(&|s| if s.iter().any(|&n| n > 1) { Layout::Expanded } else { Layout::Contiguous })),
    ]
}

/// `t` with every slice along its first axis of extent > 1 replaced by the first one (the
/// values a stride-0 view along that axis shows).
pub fn constant_along_first_axis(t: &Tensor) -> Tensor {
    let Some(ax) = t.shape.iter().position(|&n| n > 1) else { return t.clone() };
    let inner: usize = t.shape[ax + 1..].iter().product();
    let n = t.shape[ax];
    let v = t.to_f64_vec();
    let mut w = v.clone();
    for (i, x) in w.iter_mut().enumerate() {
        let outer = i / (inner * n);
        *x = v[outer * inner * n + i % inner];
    }
    Tensor::from_f64(t.shape.clone(), &w, t.dtype())
}

/// Run one layout probe at the base shape. `None` when the candidate did not confirm the
/// layouts (a worker that ignores the `layouts` field: nothing about layouts was tested).
pub fn layout_probe(ctx: &Ctx, gate: &str, index: u64, layouts: &[Layout]) -> Option<Probe> {
    let d = &ctx.dims;
    let mut inp = inputs::generate(ctx.op, d, Dist::Normal, gate_seed(gate, 1000 + index), ctx.precision.input);
    if layouts.contains(&Layout::Expanded) {
        for (i, l) in layouts.iter().enumerate() {
            if *l == Layout::Expanded {
                inp.reference[i] = constant_along_first_axis(&inp.reference[i]);
                inp.candidate[i] = constant_along_first_axis(&inp.candidate[i]);
            }
        }
    }
    let r = match ctx.op.forward(d, &inp.reference) {
        Ok(r) => r,
        Err(e) => return Some(Probe::NotApplicable(e.to_string())),
    };
    let call = ctx.harness.forward_layout(gate, d, inp.candidate, layouts.to_vec());
    Some(match call.outcome {
        Err(e) if e.is_runtime_failure() => Probe::Runtime(e),
        Err(e) => Probe::Refused(e.to_string()),
        Ok(_) if !call.layouts_applied => return None,
        Ok(outs) => Probe::Values(super::compare::compare(&r, &outs, &ctx.precision, BoundKind::Deterministic)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::references::op_by_id;

    #[test]
    fn sizes_are_past_every_power_of_two_and_past_the_envelope() {
        let op = op_by_id("sum").expect("sum");
        let (set, skipped) = size_set(&op, &op.native(), PAST_ENVELOPE_BYTES);
        let n: Vec<usize> = set.iter().filter(|p| p.dims.get("R") == 1).map(|p| p.dims.get("N")).collect();
        // N in [1, 65536]: 3, 5, ..., 32769 inside, 65537 past (the minimum R = 1 beside it).
        let want: Vec<usize> = (1..16).map(|k| (1usize << k) + 1).chain([65_537]).collect();
        assert_eq!(n, want);
        assert!(set.iter().all(|p| p.past_envelope == (p.dims.get("N") > 65_536 || p.dims.get("R") > 65_536)));
        assert!(skipped.is_empty(), "{skipped:?}");
        // matmul's M (envelope 4096) is probed at 4097 and 65537, both past the envelope.
        let mm = op_by_id("matmul").expect("matmul");
        let (set, _) = size_set(&mm, &mm.native(), PAST_ENVELOPE_BYTES);
        let m: Vec<(usize, bool)> = set.iter().filter(|p| p.dims.get("M") > 4096).map(|p| (p.dims.get("M"), p.past_envelope)).collect();
        assert_eq!(m, vec![(4097, true), (65_537, true)]);
    }

    #[test]
    fn a_past_envelope_shape_over_the_budget_is_skipped_with_its_reason() {
        let op = op_by_id("sum").expect("sum");
        let d = op.native().with("R", 1).with("N", 65_537);
        let bytes = probe_bytes(&op, &d);
        assert_eq!(bytes, (65_537 + 1) * 32);
        let (set, skipped) = size_set(&op, &op.native(), bytes - 1);
        assert!(!set.iter().any(|p| p.dims == d));
        assert!(skipped.iter().any(|s| s.starts_with("N=65537") && s.contains("memory budget")), "{skipped:?}");
        let (set, _) = size_set(&op, &op.native(), bytes);
        assert!(set.iter().any(|p| p.dims == d));
    }

    #[test]
    fn constant_along_first_axis_copies_the_first_slice() {
        let t = Tensor::f32(vec![1, 3, 2], vec![1., 2., 3., 4., 5., 6.]);
        assert_eq!(constant_along_first_axis(&t).to_f64_vec(), vec![1., 2., 1., 2., 1., 2.]);
        let t = Tensor::f32(vec![2, 2], vec![1., 2., 3., 4.]);
        assert_eq!(constant_along_first_axis(&t).to_f64_vec(), vec![1., 2., 1., 2.]);
    }
}
