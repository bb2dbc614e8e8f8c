//! Scaled dot-product attention, causal (top-left aligned, key j visible to query i iff j <= i,
//! as PyTorch's `is_causal`) or not: o = softmax(q k^T / sqrt(D)) v.
//!
//! Profile: each logit s_j carries an error of about gamma(D+1) a_j with a_j = sum_d |q||k| /
//! sqrt(D); softmax turns logit errors into relative errors of p; the output sum adds
//! gamma(Lk) sum p |v|. Charged as scale = (sum_j p_j |v_j|) (2 max_j a_j + 2 max_j |s_j - m| + 8),
//! depth = D + Lk + 8, which dominates each of those terms.

use super::{nan_max, DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

fn sdpa_kernel<T: Float>(d: &Dims, x: &[&[T]], causal: bool) -> Vec<Vec<T>> {
    let (b, lq, lk, dd, dv) = (d.get("Bt"), d.get("Lq"), d.get("Lk"), d.get("D"), d.get("Dv"));
    let scale = T::one() / T::from(dd as f64).unwrap_or_else(T::nan).sqrt();
    let mut out = vec![T::zero(); b * lq * dv];
    let mut s = vec![T::zero(); lk];
    for bi in 0..b {
        for i in 0..lq {
            let q = &x[0][(bi * lq + i) * dd..(bi * lq + i + 1) * dd];
            let visible = if causal { (i + 1).min(lk) } else { lk };
            let mut m = T::neg_infinity();
            for j in 0..visible {
                let k = &x[1][(bi * lk + j) * dd..(bi * lk + j + 1) * dd];
                let mut acc = T::zero();
                for t in 0..dd {
                    acc = acc + q[t] * k[t];
                }
                s[j] = acc * scale;
                m = nan_max(m, s[j]);
            }
            let mut denom = T::zero();
            for sj in s.iter_mut().take(visible) {
                *sj = (*sj - m).exp();
                denom = denom + *sj;
            }
            let o = &mut out[(bi * lq + i) * dv..(bi * lq + i + 1) * dv];
            for j in 0..visible {
                let p = s[j] / denom;
                let v = &x[2][(bi * lk + j) * dv..(bi * lk + j + 1) * dv];
                for t in 0..dv {
                    o[t] = o[t] + p * v[t];
                }
            }
        }
    }
    vec![out]
}

fn sdpa_profile(d: &Dims, x: &[&[f64]], causal: bool) -> Vec<ErrorProfile> {
    let (b, lq, lk, dd, dv) = (d.get("Bt"), d.get("Lq"), d.get("Lk"), d.get("D"), d.get("Dv"));
    let c = 1.0 / (dd as f64).sqrt();
    let mut scale = vec![0.0; b * lq * dv];
    for bi in 0..b {
        for i in 0..lq {
            let q = &x[0][(bi * lq + i) * dd..(bi * lq + i + 1) * dd];
            let visible = if causal { (i + 1).min(lk) } else { lk };
            let mut s = Vec::with_capacity(visible);
            let mut amax: f64 = 0.0;
            for j in 0..visible {
                let k = &x[1][(bi * lk + j) * dd..(bi * lk + j + 1) * dd];
                s.push(q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * c);
                amax = amax.max(q.iter().zip(k).map(|(a, b)| (a * b).abs()).sum::<f64>() * c);
            }
            let m = s.iter().fold(f64::NEG_INFINITY, |a, &v| nan_max(a, v));
            let spread = s.iter().map(|v| (v - m).abs()).fold(0.0, f64::max);
            let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
            let den: f64 = e.iter().sum();
            for t in 0..dv {
                let mut pv = 0.0;
                for j in 0..visible {
                    pv += e[j] / den * x[2][(bi * lk + j) * dv + t].abs();
                }
                scale[(bi * lq + i) * dv + t] = pv * (2.0 * amax + 2.0 * spread + 8.0);
            }
        }
    }
    vec![ErrorProfile { depth: dd + lk + 8, scale }]
}

fn causal_ok(d: &Dims) -> Result<(), String> {
    if d.get("Lq") != d.get("Lk") {
        return Err(format!("causal attention needs Lq == Lk (got {} and {})", d.get("Lq"), d.get("Lk")));
    }
    Ok(())
}

fn any_ok(_: &Dims) -> Result<(), String> {
    Ok(())
}

/// `sdpa` / `sdpa_causal`: o[Bt,Lq,Dv] from q[Bt,Lq,D], k[Bt,Lk,D], v[Bt,Lk,Dv].
/// The causal variant ties Lk to Lq (CMP-03 changes both together through the constraint).
pub fn sdpa(causal: bool) -> Op {
    let lk_kind = DimKind::Reduction;
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: if causal { "sdpa_causal" } else { "sdpa" },
        summary: if causal {
            "o = softmax(q k^T / sqrt(D) + causal mask) v"
        } else {
            "o = softmax(q k^T / sqrt(D)) v"
        },
        dims: vec![
            DimSpec { name: "Bt", native: 2, min: 1, max: 64, kind: DimKind::Batch },
            DimSpec { name: "Lq", native: 64, min: 1, max: 4096, kind: if causal { DimKind::Reduction } else { DimKind::Free } },
            DimSpec { name: "Lk", native: 64, min: 1, max: 4096, kind: lk_kind },
            DimSpec { name: "D", native: 32, min: 1, max: 256, kind: DimKind::Fixed },
            DimSpec { name: "Dv", native: 32, min: 1, max: 256, kind: DimKind::Fixed },
        ],
        constraint: if causal { causal_ok } else { any_ok },
        inputs: vec![
            InputSpec { name: "q", shape: |d| vec![d.get("Bt"), d.get("Lq"), d.get("D")], reduction_axis: Some(2), data: true },
            InputSpec { name: "k", shape: |d| vec![d.get("Bt"), d.get("Lk"), d.get("D")], reduction_axis: Some(2), data: true },
            InputSpec { name: "v", shape: |d| vec![d.get("Bt"), d.get("Lk"), d.get("Dv")], reduction_axis: Some(1), data: true },
        ],
        outputs: vec![|d| vec![d.get("Bt"), d.get("Lq"), d.get("Dv")]],
        k64: Arc::new(move |d, x| sdpa_kernel::<f64>(d, x, causal)),
        k32: Arc::new(move |d, x| sdpa_kernel::<f32>(d, x, causal)),
        profile: Arc::new(move |d, x, _| sdpa_profile(d, x, causal)),
        backward: Some(super::attention_bwd::sdpa(causal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn causal_first_query_sees_only_first_key() {
        let d = Dims(vec![("Bt".into(), 1), ("Lq".into(), 2), ("Lk".into(), 2), ("D".into(), 1), ("Dv".into(), 1)]);
        let q = Tensor::f64(vec![1, 2, 1], vec![1.0, 1.0]);
        let k = Tensor::f64(vec![1, 2, 1], vec![0.0, 0.0]);
        let v = Tensor::f64(vec![1, 2, 1], vec![3.0, 5.0]);
        let o = sdpa(true).forward(&d, &[q.clone(), k.clone(), v.clone()]).unwrap().outputs[0].to_f64_vec();
        assert_eq!(o, vec![3.0, 4.0]);
        let o2 = sdpa(false).forward(&d, &[q, k, v]).unwrap().outputs[0].to_f64_vec();
        assert_eq!(o2, vec![4.0, 4.0]);
    }
}
