//! Backward of the stride-1 "valid" convolutions, given g = dy:
//!
//! ```text
//!   conv1d: dx[b,c,l] = sum_{o,k: 0 <= l-k < Lo} g[b,o,l-k] w[o,c,k]
//!           dw[o,c,k] = sum_{b,p} g[b,o,p] x[b,c,p+k]
//!   conv2d: the same over (ky, kx) and (py, px)
//! ```
//! Each gradient element is a dot product, so its profile is that of the forward (Higham
//! eq. 3.4): scale = the same sum over absolute values, depth = its length (dx: Cout Kw, resp.
//! Cout Kh Kw; dw: Bt Lo, resp. Bt Ho Wo). Checked against central finite differences in
//! `tests/backward_gradcheck.rs`.

use super::{Backward, Dims};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

fn term<T: Float>(a: T, b: T, abs: bool) -> T {
    if abs {
        a.abs() * b.abs()
    } else {
        a * b
    }
}

fn conv1d_bwd<T: Float>(d: &Dims, x: &[T], w: &[T], g: &[T], abs: bool) -> Vec<Vec<T>> {
    let (bt, ci, co, l, kw) = (d.get("Bt"), d.get("Cin"), d.get("Cout"), d.get("L"), d.get("Kw"));
    let lo = l + 1 - kw;
    let mut dx = vec![T::zero(); bt * ci * l];
    let mut dw = vec![T::zero(); co * ci * kw];
    for b in 0..bt {
        for c in 0..ci {
            for p in 0..l {
                let mut acc = T::zero();
                for o in 0..co {
                    for k in 0..kw {
                        if p >= k && p - k < lo {
                            acc = acc + term(g[(b * co + o) * lo + p - k], w[(o * ci + c) * kw + k], abs);
                        }
                    }
                }
                dx[(b * ci + c) * l + p] = acc;
            }
        }
    }
    for o in 0..co {
        for c in 0..ci {
            for k in 0..kw {
                let mut acc = T::zero();
                for b in 0..bt {
                    for p in 0..lo {
                        acc = acc + term(g[(b * co + o) * lo + p], x[(b * ci + c) * l + p + k], abs);
                    }
                }
                dw[(o * ci + c) * kw + k] = acc;
            }
        }
    }
    vec![dx, dw]
}

fn conv2d_bwd<T: Float>(d: &Dims, x: &[T], w: &[T], g: &[T], abs: bool) -> Vec<Vec<T>> {
    let (bt, ci, co) = (d.get("Bt"), d.get("Cin"), d.get("Cout"));
    let (h, wd, kh, kw) = (d.get("H"), d.get("W"), d.get("Kh"), d.get("Kw"));
    let (ho, wo) = (h + 1 - kh, wd + 1 - kw);
    let gi = |b: usize, o: usize, y: usize, xx: usize| ((b * co + o) * ho + y) * wo + xx;
    let wi = |o: usize, c: usize, ky: usize, kx: usize| ((o * ci + c) * kh + ky) * kw + kx;
    let xi = |b: usize, c: usize, y: usize, xx: usize| ((b * ci + c) * h + y) * wd + xx;
    let mut dx = vec![T::zero(); bt * ci * h * wd];
    let mut dw = vec![T::zero(); co * ci * kh * kw];
    for b in 0..bt {
        for c in 0..ci {
            for y in 0..h {
                for xx in 0..wd {
                    let mut acc = T::zero();
                    for o in 0..co {
                        for ky in 0..kh.min(y + 1) {
                            for kx in 0..kw.min(xx + 1) {
                                if y - ky < ho && xx - kx < wo {
                                    acc = acc + term(g[gi(b, o, y - ky, xx - kx)], w[wi(o, c, ky, kx)], abs);
                                }
                            }
                        }
                    }
                    dx[xi(b, c, y, xx)] = acc;
                }
            }
        }
    }
    for o in 0..co {
        for c in 0..ci {
            for ky in 0..kh {
                for kx in 0..kw {
                    let mut acc = T::zero();
                    for b in 0..bt {
                        for y in 0..ho {
                            for xx in 0..wo {
                                acc = acc + term(g[gi(b, o, y, xx)], x[xi(b, c, y + ky, xx + kx)], abs);
                            }
                        }
                    }
                    dw[wi(o, c, ky, kx)] = acc;
                }
            }
        }
    }
    vec![dx, dw]
}

/// Backward of `conv1d`: gradients of x and w.
pub fn conv1d() -> Backward {
    Backward {
        k64: Arc::new(|d, x, g| conv1d_bwd::<f64>(d, x[0], x[1], g[0], false)),
        k32: Arc::new(|d, x, g| conv1d_bwd::<f32>(d, x[0], x[1], g[0], false)),
        profile: Arc::new(|d, x, g, _| {
            let s = conv1d_bwd::<f64>(d, x[0], x[1], g[0], true);
            let lo = d.get("L") + 1 - d.get("Kw");
            let mut it = s.into_iter();
            vec![
                ErrorProfile { depth: d.get("Cout") * d.get("Kw"), scale: it.next().unwrap_or_default() },
                ErrorProfile { depth: d.get("Bt") * lo, scale: it.next().unwrap_or_default() },
            ]
        }),
    }
}

/// Backward of `conv2d`: gradients of x and w.
pub fn conv2d() -> Backward {
    Backward {
        k64: Arc::new(|d, x, g| conv2d_bwd::<f64>(d, x[0], x[1], g[0], false)),
        k32: Arc::new(|d, x, g| conv2d_bwd::<f32>(d, x[0], x[1], g[0], false)),
        profile: Arc::new(|d, x, g, _| {
            let s = conv2d_bwd::<f64>(d, x[0], x[1], g[0], true);
            let (ho, wo) = (d.get("H") + 1 - d.get("Kh"), d.get("W") + 1 - d.get("Kw"));
            let mut it = s.into_iter();
            vec![
                ErrorProfile { depth: d.get("Cout") * d.get("Kh") * d.get("Kw"), scale: it.next().unwrap_or_default() },
                ErrorProfile { depth: d.get("Bt") * ho * wo, scale: it.next().unwrap_or_default() },
            ]
        }),
    }
}
