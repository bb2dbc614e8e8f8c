//! 1-D and 2-D convolution (cross-correlation as in PyTorch), stride 1, no padding ("valid").
//!
//! Each output is a dot product of length Cin*Kw (Cin*Kh*Kw), so the profile is
//! scale = sum |x| |w| over the window, depth = that length (Higham eq. 3.4).

use super::{DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

fn conv1d_generic<T: Float + Copy>(d: &Dims, x: &[T], w: &[T], abs: bool) -> Vec<T> {
    let (b, ci, co, l, kw) = (d.get("Bt"), d.get("Cin"), d.get("Cout"), d.get("L"), d.get("Kw"));
    let lo = (l + 1).saturating_sub(kw);
    let mut out = vec![T::zero(); b * co * lo];
    for bi in 0..b {
        for o in 0..co {
            for p in 0..lo {
                let mut acc = T::zero();
                for c in 0..ci {
                    for k in 0..kw {
                        let xv = x[(bi * ci + c) * l + p + k];
                        let wv = w[(o * ci + c) * kw + k];
                        acc = acc + if abs { xv.abs() * wv.abs() } else { xv * wv };
                    }
                }
                out[(bi * co + o) * lo + p] = acc;
            }
        }
    }
    out
}

fn conv2d_generic<T: Float + Copy>(d: &Dims, x: &[T], w: &[T], abs: bool) -> Vec<T> {
    let (b, ci, co) = (d.get("Bt"), d.get("Cin"), d.get("Cout"));
    let (h, wd, kh, kw) = (d.get("H"), d.get("W"), d.get("Kh"), d.get("Kw"));
    let (ho, wo) = ((h + 1).saturating_sub(kh), (wd + 1).saturating_sub(kw));
    let mut out = vec![T::zero(); b * co * ho * wo];
    for bi in 0..b {
        for o in 0..co {
            for py in 0..ho {
                for px in 0..wo {
                    let mut acc = T::zero();
                    for c in 0..ci {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let xv = x[((bi * ci + c) * h + py + ky) * wd + px + kx];
                                let wv = w[((o * ci + c) * kh + ky) * kw + kx];
                                acc = acc + if abs { xv.abs() * wv.abs() } else { xv * wv };
                            }
                        }
                    }
                    out[((bi * co + o) * ho + py) * wo + px] = acc;
                }
            }
        }
    }
    out
}

fn conv1d_ok(d: &Dims) -> Result<(), String> {
    if d.get("L") < d.get("Kw") {
        return Err(format!("L={} < Kw={}", d.get("L"), d.get("Kw")));
    }
    Ok(())
}

fn conv2d_ok(d: &Dims) -> Result<(), String> {
    if d.get("H") < d.get("Kh") || d.get("W") < d.get("Kw") {
        return Err("kernel larger than image".into());
    }
    Ok(())
}

/// `conv1d`: y[Bt,Cout,L-Kw+1] = sum_{c,k} x[Bt,c,l+k] w[Cout,c,k].
pub fn conv1d() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "conv1d",
        summary: "y[Bt,Cout,L-Kw+1] = conv1d(x[Bt,Cin,L], w[Cout,Cin,Kw]), stride 1, valid",
        dims: vec![
            DimSpec { name: "Bt", native: 2, min: 1, max: 64, kind: DimKind::Batch },
            DimSpec { name: "Cin", native: 16, min: 1, max: 1024, kind: DimKind::Reduction },
            DimSpec { name: "Cout", native: 16, min: 1, max: 1024, kind: DimKind::Free },
            DimSpec { name: "L", native: 64, min: 4, max: 8192, kind: DimKind::Free },
            DimSpec { name: "Kw", native: 4, min: 1, max: 4, kind: DimKind::Fixed },
        ],
        constraint: conv1d_ok,
        inputs: vec![
            InputSpec { name: "x", shape: |d| vec![d.get("Bt"), d.get("Cin"), d.get("L")], reduction_axis: Some(1), data: true },
            InputSpec { name: "w", shape: |d| vec![d.get("Cout"), d.get("Cin"), d.get("Kw")], reduction_axis: None, data: true },
        ],
        // Saturating: `output_shapes` may be asked at dims the constraint refuses (L < Kw), and
        // says an empty extent there rather than panicking (`forward` checks the constraint).
        outputs: vec![|d| vec![d.get("Bt"), d.get("Cout"), (d.get("L") + 1).saturating_sub(d.get("Kw"))]],
        k64: Arc::new(|d, x| vec![conv1d_generic(d, x[0], x[1], false)]),
        k32: Arc::new(|d, x| vec![conv1d_generic(d, x[0], x[1], false)]),
        profile: Arc::new(|d, x, _| {
            vec![ErrorProfile { depth: d.get("Cin") * d.get("Kw"), scale: conv1d_generic(d, x[0], x[1], true) }]
        }),
        backward: Some(super::conv_bwd::conv1d()),
    }
}

/// `conv2d`: y[Bt,Cout,H-Kh+1,W-Kw+1] = sum_{c,ky,kx} x[Bt,c,y+ky,x+kx] w[Cout,c,ky,kx].
pub fn conv2d() -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: "conv2d",
        summary: "y = conv2d(x[Bt,Cin,H,W], w[Cout,Cin,Kh,Kw]), stride 1, valid",
        dims: vec![
            DimSpec { name: "Bt", native: 2, min: 1, max: 32, kind: DimKind::Batch },
            DimSpec { name: "Cin", native: 8, min: 1, max: 512, kind: DimKind::Reduction },
            DimSpec { name: "Cout", native: 8, min: 1, max: 512, kind: DimKind::Free },
            DimSpec { name: "H", native: 16, min: 3, max: 512, kind: DimKind::Free },
            DimSpec { name: "W", native: 16, min: 3, max: 512, kind: DimKind::Free },
            DimSpec { name: "Kh", native: 3, min: 1, max: 3, kind: DimKind::Fixed },
            DimSpec { name: "Kw", native: 3, min: 1, max: 3, kind: DimKind::Fixed },
        ],
        constraint: conv2d_ok,
        inputs: vec![
            InputSpec {
                name: "x",
                shape: |d| vec![d.get("Bt"), d.get("Cin"), d.get("H"), d.get("W")],
                reduction_axis: Some(1),
                data: true,
            },
            InputSpec {
                name: "w",
                shape: |d| vec![d.get("Cout"), d.get("Cin"), d.get("Kh"), d.get("Kw")],
                reduction_axis: None,
                data: true,
            },
        ],
        // Saturating, as conv1d's.
        outputs: vec![|d| vec![d.get("Bt"), d.get("Cout"), (d.get("H") + 1).saturating_sub(d.get("Kh")), (d.get("W") + 1).saturating_sub(d.get("Kw"))]],
        k64: Arc::new(|d, x| vec![conv2d_generic(d, x[0], x[1], false)]),
        k32: Arc::new(|d, x| vec![conv2d_generic(d, x[0], x[1], false)]),
        profile: Arc::new(|d, x, _| {
            vec![ErrorProfile {
                depth: d.get("Cin") * d.get("Kh") * d.get("Kw"),
                scale: conv2d_generic(d, x[0], x[1], true),
            }]
        }),
        backward: Some(super::conv_bwd::conv2d()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn conv1d_small() {
        let d = Dims(vec![("Bt".into(), 1), ("Cin".into(), 1), ("Cout".into(), 1), ("L".into(), 4), ("Kw".into(), 2)]);
        let x = Tensor::f64(vec![1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let w = Tensor::f64(vec![1, 1, 2], vec![1.0, -1.0]);
        let y = conv1d().forward(&d, &[x, w]).unwrap().outputs[0].to_f64_vec();
        assert_eq!(y, vec![-1.0, -1.0, -1.0]);
    }

    #[test]
    fn a_window_wider_than_the_input_is_an_error_not_a_panic() {
        let d = Dims(vec![("Bt".into(), 1), ("Cin".into(), 1), ("Cout".into(), 1), ("L".into(), 1120), ("Kw".into(), 1157)]);
        assert_eq!(conv1d().output_shapes(&d), vec![vec![1, 1, 0]]);
        let (x, w) = (Tensor::f64(vec![1, 1, 1120], vec![0.0; 1120]), Tensor::f64(vec![1, 1, 1157], vec![0.0; 1157]));
        assert!(conv1d().forward(&d, &[x, w]).is_err());
        assert_eq!((conv1d().constraint)(&d), Err("L=1120 < Kw=1157".to_string()));
        let d2 = Dims(["Bt", "Cin", "Cout", "H", "W", "Kh", "Kw"].iter().zip([1, 1, 1, 3, 5, 4, 2]).map(|(n, v)| (n.to_string(), v)).collect());
        assert_eq!(conv2d().output_shapes(&d2), vec![vec![1, 1, 0, 4]]);
    }

    #[test]
    fn conv2d_identity_kernel() {
        let d = Dims(vec![
            ("Bt".into(), 1),
            ("Cin".into(), 1),
            ("Cout".into(), 1),
            ("H".into(), 3),
            ("W".into(), 3),
            ("Kh".into(), 1),
            ("Kw".into(), 1),
        ]);
        let xs: Vec<f64> = (0..9).map(|v| v as f64).collect();
        let y = conv2d()
            .forward(&d, &[Tensor::f64(vec![1, 1, 3, 3], xs.clone()), Tensor::f64(vec![1, 1, 1, 1], vec![2.0])])
            .unwrap();
        assert_eq!(y.outputs[0].to_f64_vec(), xs.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    }
}
