//! Shared pieces of the interpreter tests: a seeded generator, host-tensor helpers, IR-building
//! shorthands, and the fp64 references (GEMM, and K#1 of gdn-math.md §4 B3).
#![allow(dead_code)]

use tilec::diag::Span;
use tilec::ir::builder::Builder;
use tilec::ir::{BinOp, Edge, Elem, Kernel, Op, Param, ParamData, ParamKind, SizeExpr, SizeOp, Type, Value};
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA
/// 2014): deterministic inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A tensor of `dtype` with values `scale * uniform(-1, 1)` rounded to `dtype`, and the exact
/// stored values as f64 (what an fp64 reference must start from).
pub fn random_tensor(rng: &mut Rng, dtype: DType, shape: &[usize], scale: f64) -> (HostTensor, Vec<f64>) {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|_| scale * rng.uniform()).collect();
    let t = HostTensor::from_f64(dtype, shape.to_vec(), &vals).expect("shape and count agree");
    let exact = t.to_f64();
    (t, exact)
}

/// Row-major flat index.
pub fn flat(shape: &[usize], idx: &[usize]) -> usize {
    shape.iter().zip(idx).fold(0, |acc, (&n, &i)| acc * n + i)
}

/// Declares the kernel's sizes, in order.
pub fn set_sizes(k: &mut Kernel, names: &[&str]) {
    k.sizes = names.iter().map(|s| s.to_string()).collect();
}
/// The symbolic size `s` of `k` (declared with [`set_sizes`]).
pub fn sym(k: &Kernel, s: &str) -> SizeExpr {
    SizeExpr::Sym(k.size_named(s).unwrap_or_else(|| panic!("size {s} is not declared")))
}
/// The `i`-th size (entity) of a kernel.
pub fn size(i: u32) -> tilec::ir::SizeVar {
    tilec::ir::SizeVar::from_u32(i)
}
pub fn cst(c: i64) -> SizeExpr {
    SizeExpr::Const(c)
}
pub fn bin(op: SizeOp, a: SizeExpr, b: SizeExpr) -> SizeExpr {
    SizeExpr::Bin(op, Box::new(a), Box::new(b))
}

/// Adds a tensor parameter.
pub fn tensor(k: &mut Kernel, name: &str, elem: Elem, shape: Vec<SizeExpr>, output: bool) -> Param {
    k.params.push(ParamData { name: name.into(), kind: ParamKind::Tensor { elem, shape, output }, span: Span::default(), edge: Edge::Zeros })
}

/// Adds a scalar parameter.
pub fn scalar(k: &mut Kernel, name: &str, elem: Elem) -> Param {
    k.params.push(ParamData { name: name.into(), kind: ParamKind::Scalar(elem), span: Span::default(), edge: Edge::Error })
}

pub const I32: Type = Type::Scalar(Elem::I32);
pub const F32: Type = Type::Scalar(Elem::F32);

/// `op(x, y)` with result type `ty`.
pub fn bop(b: &mut Builder, op: BinOp, x: Value, y: Value, ty: Type) -> Value {
    b.value(Op::Binary(op, x, y), ty)
}

/// Relative max-norm error `max|x - y| / max|y|`.
pub fn rel_max_err(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len());
    let num = x.iter().zip(y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let den = y.iter().map(|v| v.abs()).fold(0.0, f64::max);
    num / den.max(f64::MIN_POSITIVE)
}

/// Round an f64 to bf16 (nearest even, one rounding) and back.
pub fn bf16r(x: f64) -> f64 {
    f64::from(tilec_abi::round::f64_to_bf16(x))
}

/// Inputs of K#1 in the layout of `dsl-examples/k1_reverse_scan.tile` (`k1_scan_scalar`), as
/// exact f64 values: q, k, w `[B, T, H, K]`, g `[B, T, H]` (chunk-local cumulative log-gate in
/// log2 units), dout, dv `[B, T, H, V]`, dht `[B, H, K, V]`.
pub struct K1Inputs {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub k: usize,
    pub v: usize,
    pub scale: f64,
    pub q: Vec<f64>,
    pub kk: Vec<f64>,
    pub w: Vec<f64>,
    pub g: Vec<f64>,
    pub dout: Vec<f64>,
    pub dv: Vec<f64>,
    pub dht: Vec<f64>,
}

/// K#1 outputs: dh `[B, NT, H, K, V]`, dh0 `[B, H, K, V]`, dv2 `[B, T, H, V]`.
pub struct K1Outputs {
    pub dh: Vec<f64>,
    pub dh0: Vec<f64>,
    pub dv2: Vec<f64>,
}

/// Random K#1 inputs with the magnitudes of a real GDN backward: unit-norm-ish k and q rows,
/// w = β·k-like rows (β in (0, 1)), per-token log-gates in [-0.1, 0) accumulated per chunk of
/// `c` rows (times log2 e), unit-scale gradients. Also returns the host tensors by name.
pub fn k1_inputs(seed: u64, b: usize, t: usize, h: usize, k: usize, v: usize, c: usize) -> (K1Inputs, tilec::interp::Inputs) {
    let mut rng = Rng(seed);
    let mut m = tilec::interp::Inputs::new();
    let kn = 1.0 / (k as f64).sqrt();
    let mut put = |rng: &mut Rng, name: &str, dt: DType, shape: &[usize], scale: f64| {
        let (tt, x) = random_tensor(rng, dt, shape, scale);
        m.insert(name.to_string(), tt);
        x
    };
    let q = put(&mut rng, "q", DType::Bf16, &[b, t, h, k], kn * 1.7);
    let kk = put(&mut rng, "k", DType::Bf16, &[b, t, h, k], kn * 1.7);
    let w = put(&mut rng, "w", DType::Bf16, &[b, t, h, k], kn * 0.8);
    let dout = put(&mut rng, "dout", DType::Bf16, &[b, t, h, v], 1.0);
    let dv = put(&mut rng, "dv", DType::Bf16, &[b, t, h, v], 1.0);
    let dht = put(&mut rng, "dht", DType::F32, &[b, h, k, v], 1.0);
    // Chunk-local cumulative gate in log2 units.
    let mut g = vec![0.0f64; b * t * h];
    for bi in 0..b {
        for hi in 0..h {
            let mut acc = 0.0;
            for ti in 0..t {
                if ti % c == 0 {
                    acc = 0.0;
                }
                acc += -0.05 * (1.0 + rng.uniform()) * std::f64::consts::LOG2_E;
                g[flat(&[b, t, h], &[bi, ti, hi])] = acc;
            }
        }
    }
    let gt = HostTensor::from_f64(DType::F32, vec![b, t, h], &g).expect("g shape");
    let g = gt.to_f64();
    m.insert("g".into(), gt);
    let scale = kn;
    m.insert("scale".into(), HostTensor::from_f64(DType::F32, vec![], &[scale]).expect("scalar"));
    let scale = f64::from(scale as f32);
    (K1Inputs { b, t, h, k, v, scale, q, kk, w, g, dout, dv, dht }, m)
}

/// K#1 in fp64 (gdn-math.md §4 B3, GDN scalar gate). For chunk n = N-1 down to 0, with rows
/// r < c valid and Γ_last the gate of the last valid row:
///
/// ```text
/// dh[n] = D
/// dv2   = (K ⊙ 2^(Γ_last − Γ_r)) · D + dv_local
/// D     = 2^Γ_last · D + scale · (Q ⊙ 2^Γ)ᵀ dO − Wᵀ dv2
/// dh0   = D
/// ```
///
/// With `mirror`, the bf16 rounding points of the kernel are applied (k̃, bf16(D) as an MMA
/// operand, q̃, bf16(dv2) as an operand, and the bf16 stores of dh and dv2), everything else
/// in fp64; without it the math is exact.
pub fn k1_reference(x: &K1Inputs, c: usize, mirror: bool) -> K1Outputs {
    let (b, t, h, k, v) = (x.b, x.t, x.h, x.k, x.v);
    let nt = t.div_ceil(c);
    let r = |y: f64| if mirror { bf16r(y) } else { y };
    let mut dh = vec![0.0; b * nt * h * k * v];
    let mut dh0 = vec![0.0; b * h * k * v];
    let mut dv2 = vec![0.0; b * t * h * v];
    for bi in 0..b {
        for hi in 0..h {
            let mut d: Vec<f64> = (0..k * v).map(|i| x.dht[flat(&[b, h, k * v], &[bi, hi, i])]).collect();
            for n in (0..nt).rev() {
                let t0 = n * c;
                let rows = (t - t0).min(c);
                let gat = |ti: usize| x.g[flat(&[b, t, h], &[bi, ti, hi])];
                let glast = gat(t0 + rows - 1);
                for i in 0..k * v {
                    dh[flat(&[b, nt, h, k * v], &[bi, n, hi, i])] = r(d[i]);
                }
                let db: Vec<f64> = d.iter().map(|&y| r(y)).collect();
                // dv2 rows
                let mut dvn = vec![0.0; rows * v];
                for rr in 0..rows {
                    let ti = t0 + rr;
                    let decay = (glast - gat(ti)).exp2();
                    let kt: Vec<f64> = (0..k).map(|j| r(x.kk[flat(&[b, t, h, k], &[bi, ti, hi, j])] * decay)).collect();
                    for vi in 0..v {
                        let s: f64 = (0..k).map(|j| kt[j] * db[j * v + vi]).sum();
                        let y = s + x.dv[flat(&[b, t, h, v], &[bi, ti, hi, vi])];
                        dvn[rr * v + vi] = y;
                        dv2[flat(&[b, t, h, v], &[bi, ti, hi, vi])] = r(y);
                    }
                }
                // D update
                let e = glast.exp2();
                let mut nd: Vec<f64> = d.iter().map(|&y| y * e).collect();
                for rr in 0..rows {
                    let ti = t0 + rr;
                    let qg = gat(ti).exp2() * x.scale;
                    for j in 0..k {
                        let qv = r(x.q[flat(&[b, t, h, k], &[bi, ti, hi, j])] * qg);
                        let wv = x.w[flat(&[b, t, h, k], &[bi, ti, hi, j])];
                        for vi in 0..v {
                            let dov = x.dout[flat(&[b, t, h, v], &[bi, ti, hi, vi])];
                            nd[j * v + vi] += qv * dov - wv * r(dvn[rr * v + vi]);
                        }
                    }
                }
                d = nd;
            }
            for i in 0..k * v {
                dh0[flat(&[b, h, k * v], &[bi, hi, i])] = d[i];
            }
        }
    }
    K1Outputs { dh, dh0, dv2 }
}

/// `C = A · B` in fp64, A `[m, kd]`, B `[kd, n]` row-major, plus `S = |A| · |B|` (the scale of
/// the rounding-error bound).
pub fn matmul_f64(a: &[f64], b: &[f64], m: usize, kd: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; m * n];
    let mut s = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..kd {
                c[i * n + j] += a[i * kd + p] * b[p * n + j];
                s[i * n + j] += (a[i * kd + p] * b[p * n + j]).abs();
            }
        }
    }
    (c, s)
}

/// γ_n = n·u / (1 − n·u) with u = 2^-24 (Higham, *Accuracy and Stability of Numerical
/// Algorithms*, 2nd ed., §3.1): the relative bound of n sequential fp32 roundings.
pub fn gamma_f32(n: usize) -> f64 {
    let nu = n as f64 * 2f64.powi(-24);
    nu / (1.0 - nu)
}

/// The sequence tables of a dense call over `t` tokens in chunks of `c` (what gdn.tile's
/// `chunk_table` of sequences.tile makes for cu = [0, T]): `cu` = [0, T], `co` = [0, cdiv(T, C)] and `ct` with
/// row n = (n·C, T).
pub fn dense_tables(t: usize, c: usize) -> [(String, HostTensor); 3] {
    let n = t.div_ceil(c);
    let i32t = |shape: Vec<usize>, v: Vec<f64>| HostTensor::from_f64(DType::I32, shape, &v).expect("shape and count agree");
    [
        ("cu".to_string(), i32t(vec![2], vec![0.0, t as f64])),
        ("co".to_string(), i32t(vec![2], vec![0.0, n as f64])),
        ("ct".to_string(), i32t(vec![n, 2], (0..n).flat_map(|i| [(i * c) as f64, t as f64]).collect())),
    ]
}

/// `inputs` with the dense sequence tables ([`dense_tables`]) added for each table parameter
/// (`cu`, `co`, `ct`) that kernel `k` declares.
pub fn with_dense_tables(k: &Kernel, mut inputs: tilec::interp::Inputs, t: usize, c: usize) -> tilec::interp::Inputs {
    for (name, table) in dense_tables(t, c) {
        if k.params.values().any(|p| p.name == name) {
            inputs.insert(name, table);
        }
    }
    inputs
}
