//! Isolation of independent sub-problems in one call, judged bitwise.
//!
//! **Packed sequences** (varlen operators) are separate problems, so the outputs of one sequence
//! must not depend on the inputs of another — *bitwise*, since every chunk reads only its own
//! sequence's rows (rows past a sequence's end are masked to 0, and adding or multiplying those
//! zeros changes no bit). Redrawing the inputs of the odd-numbered sequences must leave every
//! output element of the even-numbered ones unchanged, and the other way round; a leak from a
//! neighbour (a chunk reading rows past its end, an offset off by one) is caught at any size,
//! where the value bound (`λ √R κu`, loose by design) can let a small one through.
//!
//! **Key-head groups** (GVA: H key heads, H·G value heads, value head h reading key head h / G)
//! are separate problems the same way: group j is key head j with its value heads jG … jG + G − 1,
//! and nothing sums across groups (combine sums dq and dk within a group), so redrawing the odd
//! groups' inputs must leave every output bit of the even groups unchanged. A stage that maps a
//! value head to the wrong key head moves another group's outputs and is caught whatever the
//! size of the error — kda_bwd's kkt_channel reading key head h % H moved its gradients by
//! 1.6e-2 … 5.2e-2 of max|ref|, inside bounds of 0.10 … 0.18 (docs/results.md, 2026-12-04).

use std::collections::BTreeMap;
use std::ops::Range;

use kverify::recurrence::batch::Problem;
use kverify::recurrence::tensor::Tensor;
use tilec_abi::tensor::HostTensor;

use super::Judgement;

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

/// How a case's tensors split into independent sub-problems.
#[derive(Clone, Copy, Debug)]
pub enum Partition<'a> {
    /// Packed sequences at offsets `cu` ([`sequence_ranges`]).
    Sequences(&'a [usize]),
    /// Key-head groups: token-major tensors `[B, T, heads or value_heads, …]` (T = `tokens`)
    /// and state tensors `[states, value_heads, K, V]`; element of head `h` belongs to group `h`
    /// of a key-head tensor and `h / (value_heads / heads)` of a value-head one.
    HeadGroups {
        /// T, the second extent of a token-major tensor.
        tokens: usize,
        /// N, the first extent of a state tensor (B, or the number of packed sequences).
        states: usize,
        /// H, the key heads (one group each).
        heads: usize,
        /// H·G, the value heads.
        value_heads: usize,
    },
}

impl Partition<'_> {
    /// The part (sequence or group) of every element of a row-major tensor of `shape`, or
    /// `None` when the tensor is not laid out by parts (it is then neither spliced nor judged:
    /// no vacuous pass).
    pub fn parts(&self, shape: &[usize]) -> Option<Vec<usize>> {
        let n: usize = shape.iter().product();
        match *self {
            Partition::Sequences(cu) => {
                let ranges = sequence_ranges(shape, cu);
                if ranges.is_empty() {
                    return None;
                }
                let mut part = vec![usize::MAX; n];
                for (i, r) in ranges.into_iter().enumerate() {
                    part[r].fill(i);
                }
                Some(part)
            }
            Partition::HeadGroups { tokens, states, heads, value_heads } => {
                // The head dimension: the third of a token-major tensor, the second of a state.
                let dim = match shape {
                    [_, t, _, ..] if *t == tokens => 2,
                    [s, _, _, _] if *s == states => 1,
                    _ => return None,
                };
                let g = match shape[dim] {
                    e if e == heads => 1,
                    e if e == value_heads && heads > 0 && value_heads % heads == 0 => value_heads / heads,
                    _ => return None,
                };
                let inner: usize = shape[dim + 1..].iter().product();
                Some((0..n).map(|i| (i / inner) % shape[dim] / g).collect())
            }
        }
    }
}

/// `p` with the inputs of every part `i` for which `redraw(i)` taken from `other` (a problem
/// of the same dims and offsets): q, k, v, the gates, s0 and the loss seeds.
pub fn splice(p: &Problem, other: &Problem, parts: Partition<'_>, redraw: impl Fn(usize) -> bool) -> Problem {
    let mut out = p.clone();
    let copy = |dst: &mut Tensor, src: &Tensor| {
        if let Some(part) = parts.parts(&dst.shape) {
            for (e, &i) in part.iter().enumerate() {
                if i != usize::MAX && redraw(i) {
                    dst.data[e] = src.data[e];
                }
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

/// One judgement per output laid out by parts: `max|a − b|` over the elements of the parts
/// `kept(i)` (whose inputs were not redrawn) between the outputs `a` of the original and `b`
/// of the spliced problem; the bound is 0 (bitwise). `case` names the case and what was
/// redrawn.
pub fn judge(case: &str, a: &BTreeMap<String, HostTensor>, b: &BTreeMap<String, HostTensor>, parts: Partition<'_>, kept: impl Fn(usize) -> bool) -> Vec<Judgement> {
    let mut out = vec![];
    for (name, ta) in a {
        let Some(tb) = b.get(name) else { continue };
        let Some(part) = parts.parts(&ta.shape) else { continue };
        let (x, y) = (ta.to_f64(), tb.to_f64());
        let mut error: f64 = 0.0;
        for ((u, v), &i) in x.iter().zip(&y).zip(&part) {
            // Bitwise: a zero changing sign moves too (counted as the smallest normal).
            if i != usize::MAX && kept(i) && u.to_bits() != v.to_bits() {
                let e = (u - v).abs();
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
        assert!(judge("c", &base, &moved, Partition::Sequences(&cu), |i| i % 2 == 0).iter().all(Judgement::ok));
        let j = judge("c", &base, &moved, Partition::Sequences(&cu), |i| i % 2 == 1);
        assert_eq!((j.len(), j[0].error, j[0].ok()), (1, 0.5, false));
        // −0 for +0 in a kept sequence: no difference in value, still a changed bit.
        let j = judge("c", &base, &t(&[1.0, 2.0, -0.0, 4.0]), Partition::Sequences(&cu), |i| i == 1);
        assert!(!j[0].ok() && j[0].error > 0.0);
    }

    /// Key-head groups: value head h of H·G belongs to group h / G, key head j to group j;
    /// states split by their value-head row; other shapes are not judged.
    #[test]
    fn head_groups_follow_the_gva_mapping() {
        let p = Partition::HeadGroups { tokens: 3, states: 1, heads: 2, value_heads: 4 };
        // Key-head tensor [1, T = 3, H = 2, K = 2]: heads alternate every 2 elements.
        assert_eq!(p.parts(&[1, 3, 2, 2]), Some(vec![0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]));
        // Value-head gate [1, T = 3, HV = 4]: heads 0, 1 -> group 0; 2, 3 -> group 1.
        assert_eq!(p.parts(&[1, 3, 4]), Some(vec![0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]));
        // State [N = 1, HV = 4, K = 1, V = 2].
        assert_eq!(p.parts(&[1, 4, 1, 2]), Some(vec![0, 0, 0, 0, 1, 1, 1, 1]));
        // A head extent that is neither H nor HV, or an unknown layout: no parts.
        assert_eq!(p.parts(&[1, 3, 3]), None);
        assert_eq!(p.parts(&[5, 5]), None);
        // Only the kept group's elements count.
        use tilec_abi::meta::DType;
        let t = |v: &[f64]| BTreeMap::from([("dv".to_string(), HostTensor::from_f64(DType::F32, vec![1, 1, 4], v).unwrap())]);
        let p = Partition::HeadGroups { tokens: 1, states: 1, heads: 2, value_heads: 4 };
        let (base, moved) = (t(&[1.0, 2.0, 3.0, 4.0]), t(&[1.0, 2.0, 3.0, 4.5]));
        assert!(judge("c", &base, &moved, p, |g| g == 0).iter().all(Judgement::ok));
        assert!(!judge("c", &base, &moved, p, |g| g == 1)[0].ok());
    }
}
