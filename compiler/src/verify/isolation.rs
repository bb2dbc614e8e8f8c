//! Sequence isolation of varlen operators: packed sequences are separate problems, so the
//! outputs of one sequence must not depend on the inputs of another — *bitwise*, since every
//! chunk reads only its own sequence's rows (rows past a sequence's end are masked to 0, and
//! adding or multiplying those zeros changes no bit). Redrawing the inputs of the odd-numbered
//! sequences must leave every output element of the even-numbered ones unchanged, and the other
//! way round; a leak from a neighbour (a chunk reading rows past its end, an offset off by one)
//! is caught at any size, where the value bound (`λ √R κu`, loose by design) can let a small one
//! through.

use std::collections::BTreeMap;
use std::ops::Range;

use kverify::recurrence::batch::Problem;
use kverify::recurrence::tensor::Tensor;
use tilec_abi::tensor::HostTensor;

use super::{max_abs_diff, Judgement};

/// The element ranges of each packed sequence in a row-major tensor of `shape`: token-major
/// ones `[1, T, …]` (T = the last offset of `cu`) split at the offsets, per-sequence ones
/// `[N, …]` (states; N = `cu.len() − 1`) by rows; any other shape has none.
pub fn sequence_ranges(shape: &[usize], cu: &[usize]) -> Vec<Range<usize>> {
    let n = cu.len().saturating_sub(1);
    let inner = |from: usize| shape[from..].iter().product::<usize>();
    match shape {
        [1, t, ..] if Some(t) == cu.last() => cu.windows(2).map(|w| w[0] * inner(2)..w[1] * inner(2)).collect(),
        [rows, ..] if *rows == n => (0..n).map(|i| i * inner(1)..(i + 1) * inner(1)).collect(),
        _ => vec![],
    }
}

/// `p` with the inputs of every sequence `i` for which `redraw(i)` taken from `other` (a
/// problem of the same dims and offsets): q, k, v, the gates, s0 and the loss seeds.
pub fn splice(p: &Problem, other: &Problem, cu: &[usize], redraw: impl Fn(usize) -> bool) -> Problem {
    let mut out = p.clone();
    let copy = |dst: &mut Tensor, src: &Tensor| {
        for (i, r) in sequence_ranges(&dst.shape, cu).into_iter().enumerate() {
            if redraw(i) {
                dst.data[r.clone()].copy_from_slice(&src.data[r]);
            }
        }
    };
    for (dst, src) in [(&mut out.q, &other.q), (&mut out.k, &other.k), (&mut out.v, &other.v), (&mut out.s0, &other.s0), (&mut out.d_o, &other.d_o), (&mut out.dst, &other.dst)] {
        copy(dst, src);
    }
    for (dst, src) in [(&mut out.g, &other.g), (&mut out.b, &other.b), (&mut out.w, &other.w), (&mut out.beta, &other.beta)] {
        if let (Some(d), Some(s)) = (dst.as_mut(), src.as_ref()) {
            copy(d, s);
        }
    }
    out
}

/// One judgement per output laid out by sequence: `max|a − b|` over the elements of the sequences `kept(i)` (whose
/// inputs were not redrawn) between the outputs `a` of the original and `b` of the spliced
/// problem; the bound is 0 (bitwise). `case` names the case and what was redrawn.
pub fn judge(case: &str, a: &BTreeMap<String, HostTensor>, b: &BTreeMap<String, HostTensor>, cu: &[usize], kept: impl Fn(usize) -> bool) -> Vec<Judgement> {
    let mut out = vec![];
    for (name, ta) in a {
        let Some(tb) = b.get(name) else { continue };
        let ranges = sequence_ranges(&ta.shape, cu);
        if ranges.is_empty() {
            continue; // not laid out by sequence: nothing to judge (no vacuous pass)
        }
        let (x, y) = (ta.to_f64(), tb.to_f64());
        let mut error: f64 = 0.0;
        for r in ranges.into_iter().enumerate().filter(|(i, _)| kept(*i)).map(|(_, r)| r) {
            // Bitwise: a zero changing sign moves too (counted as the smallest normal).
            if x[r.clone()].iter().zip(&y[r.clone()]).any(|(u, v)| u.to_bits() != v.to_bits()) {
                let e = max_abs_diff(&x[r.clone()], &y[r]);
                error = if e.is_nan() || error.is_nan() { f64::NAN } else { error.max(e.max(f64::MIN_POSITIVE)) };
            }
        }
        out.push(Judgement { case: case.to_string(), output: name.clone(), sequence: None, error, reference_max: 0.0, bound: 0.0, roundings: 0, unit: 0.0, sensitivity: 0.0 });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_sequences_are_split_by_tokens_or_by_state_rows() {
        // [1, T = 10, H = 2, K = 3] at offsets 0, 4, 10: 6 elements per token.
        assert_eq!(sequence_ranges(&[1, 10, 2, 3], &[0, 4, 10]), vec![0..24, 24..60]);
        // States [N = 2, H = 2, K = 3, V = 3]: 18 elements per sequence.
        assert_eq!(sequence_ranges(&[2, 2, 3, 3], &[0, 4, 10]), vec![0..18, 18..36]);
        // One sequence: its state row and all its tokens; a shape of neither kind: none.
        assert_eq!(sequence_ranges(&[1, 2, 3], &[0, 7]), vec![0..6]);
        assert_eq!(sequence_ranges(&[1, 7, 3], &[0, 7]), vec![0..21]);
        assert!(sequence_ranges(&[3, 5], &[0, 4, 10]).is_empty());
    }

    /// Only the kept sequences' elements count, and a zero changing sign is a change.
    #[test]
    fn a_kept_sequence_must_keep_its_bits() {
        use tilec_abi::meta::DType;
        let t = |v: &[f64]| BTreeMap::from([("o".to_string(), HostTensor::from_f64(DType::F32, vec![1, 4], v).unwrap())]);
        let cu = [0, 1, 3, 4]; // three sequences: tokens 0 | 1, 2 | 3
        let base = t(&[1.0, 2.0, 0.0, 4.0]);
        // Sequence 1 (odd) moved: invisible when the odd ones were redrawn, a violation otherwise.
        let moved = t(&[1.0, 2.5, 0.0, 4.0]);
        assert!(judge("c", &base, &moved, &cu, |i| i % 2 == 0).iter().all(Judgement::ok));
        let j = judge("c", &base, &moved, &cu, |i| i % 2 == 1);
        assert_eq!((j.len(), j[0].error, j[0].ok()), (1, 0.5, false));
        // −0 for +0 in a kept sequence: no difference in value, still a changed bit.
        let j = judge("c", &base, &t(&[1.0, 2.0, -0.0, 4.0]), &cu, |i| i == 1);
        assert!(!j[0].ok() && j[0].error > 0.0);
    }
}
