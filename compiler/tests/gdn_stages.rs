//! `dsl-examples/gdn.tile` on the interpreter against kverify's fp64 chunkwise references
//! (gdn-math.md §3.1, §3.2–3.3, §4 B6): the chunk-local gate cumsum, the blocked triangular
//! inverse `Ai = (I + L)⁻¹` written with views, and the reverse cumsum dΓ → dg.
//!
//! Bounds are derived, not fitted: sequential f32 sums of n terms err by at most
//! `γ_n Σ|x|` (γ_n = n·u/(1 − n·u), u = 2⁻²⁴; Higham, *Accuracy and Stability of Numerical
//! Algorithms*, 2nd ed., §3.1); a triangular inverse computed by substitution in f32 errs by at
//! most `γ_n |Ai| |I + L| |Ai|` elementwise (Higham Thm 8.5 and §14.2), where L's own f32 dot
//! products are covered by using `β_i Σ_c |k_ic k_jc| e^(Γ_i−Γ_j)` in place of |L|; the bf16
//! store adds half an ulp, at most 2⁻⁸|Ai|, and gradual underflow an absolute half step per
//! operation.

mod interp_common;

use std::collections::BTreeMap;

use interp_common::*;
use kverify::recurrence::intra::{chunk_local_cumsum, reverse_chunk_local_cumsum};
use kverify::recurrence::inverse::blocked_inverse;
use kverify::recurrence::tensor::Mat;
use tilec::interp::{run_kernel_with, Options};
use tilec::ir::Kernel;
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

const C: usize = 64;
const KD: usize = 128;
const U32: f64 = 1.0 / (1u64 << 24) as f64;

fn gamma(n: usize) -> f64 {
    n as f64 * U32 / (1.0 - n as f64 * U32)
}

fn kernel(name: &str) -> Kernel {
    let path = std::path::PathBuf::from(format!("{}/../dsl-examples/gdn.tile", env!("CARGO_MANIFEST_DIR")));
    let (_, checked) = tilec::frontend::check_file(&path, &tilec::frontend::Options::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(checked.ok(), "gdn.tile does not compile");
    checked.module.kernels.into_iter().find(|k| k.name == name).unwrap_or_else(|| panic!("no kernel {name}"))
}

/// Runs a stage kernel as a dense call: T is the second extent of the first input, and the
/// chunk table is the one `chunk_table` (sequences.tile) makes for cu = [0, T].
fn run(name: &str, inputs: BTreeMap<String, HostTensor>) -> BTreeMap<String, HostTensor> {
    let k = kernel(name);
    let t = inputs.values().next().expect("an input").shape[1];
    let inputs = with_dense_tables(&k, inputs, t, C);
    run_kernel_with(&k, &inputs, &Options::default()).unwrap_or_else(|e| panic!("{name}: {e}")).outputs
}

/// Per-token natural-log gates `[B, T, H]` in `(lo, 0]`.
fn gates(rng: &mut Rng, n: usize, lo: f64) -> Vec<f64> {
    (0..n).map(|_| lo * 0.5 * (1.0 + rng.uniform())).collect()
}

/// Column `(b, ·, h)` of a `[B, T, H]` tensor as a `[T, 1]` matrix.
fn column(x: &[f64], t: usize, h: usize, b: usize, hi: usize) -> Mat {
    Mat::from_vec(t, 1, (0..t).map(|ti| x[(b * t + ti) * h + hi]).collect())
}

#[test]
fn gate_cumsum_and_its_reverse_match_fp64() {
    let (b, t, h) = (2, 100, 3); // chunk 1 full, chunk 2 partial (36 rows)
    let mut rng = Rng(11);
    for lo in [-0.1, -25.0] {
        let g = gates(&mut rng, b * t * h, lo);
        let gt = HostTensor::from_f64(DType::F32, vec![b, t, h], &g).unwrap();
        let g = gt.to_f64();
        let gc = run("gate_cumsum", BTreeMap::from([("g".to_string(), gt.clone())]))["gc"].to_f64();
        // combine: dg = rev_cumsum(Σ_kb dg1[.., kb] + dg2), and dk = dk1 + dk2 is checked below.
        // dg1's two key blocks (dqkwg's BKQ = 64 of K = 128) hold c and −c, which sum to an
        // exact 0: a block left out of the sum leaves ±c in dg.
        let c: Vec<f64> = (0..b * t * h).map(|_| rng.uniform() * 4.0 - 2.0).collect();
        let blocks: Vec<f64> = c.iter().flat_map(|&x| [x, -x]).collect();
        let dg1 = HostTensor::from_f64(DType::F32, vec![b, t, h, 2], &blocks).unwrap();
        let ks = vec![b, t, h, KD];
        let (dk1, dk1v) = random_tensor(&mut rng, DType::F32, &ks, 1.0);
        let (dk2, dk2v) = random_tensor(&mut rng, DType::F32, &ks, 1.0);
        let (dq1, dq1v) = random_tensor(&mut rng, DType::F32, &ks, 1.0);
        // dq and dk passed (zeros) give H; G = 1: no GVA, each sum has one term.
        let z = HostTensor::zeros(DType::F32, ks.clone()).unwrap();
        let out = run("combine", BTreeMap::from([("dg1".to_string(), dg1), ("dg2".to_string(), gt), ("dq1".to_string(), dq1), ("dk1".to_string(), dk1), ("dk2".to_string(), dk2), ("dq".to_string(), z.clone()), ("dk".to_string(), z)]));
        let dg = out["dg"].to_f64();
        assert_eq!(out["dq"].to_f64(), dq1v, "dq: the one value head's dq");
        // One f32 addition: the correctly rounded sum.
        for ((got, a), b2) in out["dk"].to_f64().iter().zip(&dk1v).zip(&dk2v) {
            assert_eq!(*got, f64::from((*a as f32) + (*b2 as f32)));
        }
        for bi in 0..b {
            for hi in 0..h {
                let x = column(&g, t, h, bi, hi);
                let fwd = chunk_local_cumsum(&x, C);
                let rev = reverse_chunk_local_cumsum(&x, C);
                for ti in 0..t {
                    let (s, e) = (ti / C * C, (ti / C * C + C).min(t));
                    let fwd_abs: f64 = (s..=ti).map(|r| x[(r, 0)].abs()).sum();
                    let rev_abs: f64 = (ti..e).map(|r| x[(r, 0)].abs()).sum();
                    let at = (bi * t + ti) * h + hi;
                    let want = fwd[(ti, 0)] * std::f64::consts::LOG2_E;
                    // n − 1 additions, then one multiply by log2 e (rounded to f32 once more).
                    let bound = gamma(ti - s + 2) * fwd_abs * std::f64::consts::LOG2_E;
                    assert!((gc[at] - want).abs() <= bound, "gc[{bi},{ti},{hi}] = {} vs {want} (bound {bound:e})", gc[at]);
                    let bound = gamma(e - ti) * rev_abs;
                    assert!((dg[at] - rev[(ti, 0)]).abs() <= bound, "dg[{bi},{ti},{hi}] = {} vs {} (bound {bound:e})", dg[at], rev[(ti, 0)]);
                }
            }
        }
    }
}

/// A bound on the error of one computed quantity, first order (Higham §3.3): `abs` dominates
/// |value| elementwise and `err` bounds |computed − exact|, both from the fp64 exact inputs.
struct Tracked {
    abs: Mat,
    err: Mat,
}

/// Per-product error constants of solve_tril's split-bf16 products (gdn.tile, §3.3):
/// a = a_h + a_l leaves |a − a_h − a_l| ≤ 2⁻¹⁸|a|, and the dropped a_l b_l ≤ 2⁻¹⁸|a||b|, so each
/// product term errs by at most 3·2⁻¹⁸|a||b|; three chained MMAs of four K = 16 steps round the
/// accumulator 12 times (γ₁₂ of Σ|terms|), and the following f32 add or subtract once more.
/// Below 2⁻¹²⁶ each bf16 split rounds by up to half a subnormal step, 2⁻¹³⁴, twice per operand.
const SPLIT_EPS: f64 = 3.0 / (1u64 << 18) as f64;

fn subnormal_split() -> f64 {
    2f64.powi(-133)
}

fn eps_product() -> f64 {
    SPLIT_EPS + gamma(13)
}

fn abs_mat(m: &Mat) -> Mat {
    Mat::from_vec(m.rows, m.cols, m.data.iter().map(|x| x.abs()).collect())
}

fn plus(a: &Mat, b: &Mat) -> Mat {
    let mut s = a.clone();
    s.add_assign(b);
    s
}

/// Error of the computed product `a·b` (split-bf16 operands, f32 accumulation) given the
/// errors already in `a` and `b`: |δa||b| + |a||δb| + ε|a||b| + the subnormal splitting, which
/// adds 2·2⁻¹³⁴ per operand element times the other operand's row or column sum.
fn product(a: &Tracked, b: &Tracked) -> Tracked {
    let abs = a.abs.matmul(&b.abs);
    let mut err = a.err.matmul(&b.abs);
    err.add_assign(&a.abs.matmul(&b.err));
    err.add_assign(&abs.scaled(eps_product()));
    let row_a = a.abs.row_sums().into_iter().fold(0.0, f64::max);
    let col_b = b.abs.t().row_sums().into_iter().fold(0.0, f64::max);
    err.add_assign(&Mat::filled(abs.rows, abs.cols, subnormal_split() * (row_a + col_b)));
    Tracked { abs, err }
}

/// The error bound of solve_tril's Ai = (I − X)(I + X²) N from exact L = L_d + L_o (and the
/// magnitude bound `labs` of the kernel's own L, which carries kkt's dot-product error).
/// N = (I + L_d)⁻¹ by substitution: (I + L_d + ΔL_d) N̂ = I with |ΔL_d| ≤ ε(I + |L_d|) per row
/// (each row one split product and one subtraction), so |N̂ − N| ≤ ε |N| (I + |L_d|) |N|
/// (Higham Thm 8.5), plus the subnormal splitting as an absolute right-hand-side error; then
/// each product of the merge by `product`, each f32 add by `u` of the sum's magnitude.
fn solve_tril_error(inv: &Mat, labs: &Mat) -> Mat {
    let c = inv.rows;
    let blk = |i: usize, j: usize| i / 16 == j / 16;
    let part = |m: &Mat, diag: bool| Mat::from_vec(c, c, (0..c * c).map(|x| if blk(x / c, x % c) == diag { m.data[x] } else { 0.0 }).collect());
    let n_abs = abs_mat(&part(inv, true));
    let (ld_abs, lo_abs) = (part(labs, true), part(labs, false));
    let ld_off = plus(&ld_abs, &Mat::eye(c).scaled(-1.0)); // labs has a unit diagonal
    let row_n = n_abs.row_sums().into_iter().fold(0.0, f64::max);
    let mut n_err = n_abs.matmul(&plus(&Mat::eye(c), &ld_off)).matmul(&n_abs).scaled(eps_product());
    n_err.add_assign(&Mat::filled(c, c, subnormal_split() * 2.0 * row_n * c as f64));
    let n = Tracked { abs: n_abs, err: n_err };
    let lo = Tracked { abs: lo_abs, err: Mat::zeros(c, c) };
    let x = product(&n, &lo);
    let x2 = product(&x, &x);
    let x2n = product(&x2, &n);
    let u = U32;
    let sum = |a: &Tracked, b: &Tracked| {
        let abs = plus(&a.abs, &b.abs);
        let err = plus(&plus(&a.err, &b.err), &abs.scaled(u));
        Tracked { abs, err }
    };
    let y = sum(&n, &x2n);
    let xy = product(&x, &y);
    sum(&y, &xy).err
}

/// The blocked inverse of the kernel against kverify's fp64 `blocked_inverse` of the fp64 L
/// built from the same (bf16 / f32) inputs, for a full and a partial chunk, weak and strong
/// decay, and keys all pointing one way with no decay (L's entries near β: the inverse's
/// entries alternate in sign and stay small while any power of L grows combinatorially).
#[test]
fn kkt_and_solve_tril_inverse_matches_fp64() {
    let (b, t, h) = (1, 100, 2);
    let mut rng = Rng(5);
    for (lo, aligned) in [(-0.1, false), (-4.0, false), (0.0, true)] {
        // Unit-norm keys (as l2norm gives them), rounded to bf16; β in (0, 1).
        let mut kv = vec![0.0; b * t * h * KD];
        for row in kv.chunks_mut(KD) {
            let r: Vec<f64> = (0..KD).map(|_| if aligned { 1.0 + 0.1 * rng.uniform() } else { rng.uniform() }).collect();
            let n = r.iter().map(|x| x * x).sum::<f64>().sqrt();
            for (o, x) in row.iter_mut().zip(r) {
                *o = x / n;
            }
        }
        let kt = HostTensor::from_f64(DType::Bf16, vec![b, t, h, KD], &kv).unwrap();
        let kv = kt.to_f64();
        let beta: Vec<f64> = (0..b * t * h).map(|_| 0.5 * (1.0 + rng.uniform())).collect();
        let bt = HostTensor::from_f64(DType::Bf16, vec![b, t, h], &beta).unwrap();
        let beta = bt.to_f64();
        let g = gates(&mut rng, b * t * h, lo);
        let gc_t = run("gate_cumsum", BTreeMap::from([("g".to_string(), HostTensor::from_f64(DType::F32, vec![b, t, h], &g).unwrap())]))["gc"].clone();
        let gc = gc_t.to_f64();
        // kkt builds L, solve_tril inverts it (the two stages gdn_bwd launches).
        let lm = run("kkt", BTreeMap::from([("k".to_string(), kt), ("beta".to_string(), bt), ("gc".to_string(), gc_t)]))["l"].clone();
        let out = run("solve_tril", BTreeMap::from([("lt".to_string(), lm)]));
        let ai = out["ai"].to_f64();
        assert_eq!(out["ai"].shape, [b, t, h, C]);
        let (mut worst, mut biggest) = (0.0f64, 0.0f64);
        for hi in 0..h {
            for s in (0..t).step_by(C) {
                let e = (s + C).min(t);
                let c = e - s;
                // L and its magnitude bound in fp64 from the kernel's own inputs: the decay
                // from the stored Γ2 (log2 units) exactly as the kernel reads it. A partial
                // chunk is padded with zero rows, as the kernel pads it.
                let at = |ti: usize| ti * h + hi;
                let mut l = Mat::zeros(C, C);
                let mut labs = Mat::eye(C);
                for i in 0..c {
                    for j in 0..i {
                        let (ki, kj) = (&kv[at(s + i) * KD..][..KD], &kv[at(s + j) * KD..][..KD]);
                        let dec = (gc[at(s + i)] - gc[at(s + j)]).exp2();
                        l[(i, j)] = beta[at(s + i)] * ki.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>() * dec;
                        labs[(i, j)] = beta[at(s + i)] * ki.iter().zip(kj).map(|(x, y)| (x * y).abs()).sum::<f64>() * dec;
                    }
                }
                let inv = blocked_inverse(&l);
                let abs_inv = abs_mat(&inv);
                // kkt's f32 dot products (K terms, the exp2 a few ulp) perturb L by at most
                // γ_{K+4}·labs, which moves the inverse by |Ai| |ΔL| |Ai| (first order).
                let from_l = abs_inv.matmul(&labs).matmul(&abs_inv).scaled(gamma(KD + 4));
                let from_solve = solve_tril_error(&inv, &labs);
                for i in 0..c {
                    for j in 0..C {
                        let got = ai[at(s + i) * C + j];
                        let want = inv[(i, j)];
                        // The bf16 store: half an ulp, 2⁻⁹ relative (2⁻⁸ allowed), or half a
                        // subnormal step, 2⁻¹³⁴ (Higham §2.1, the η term).
                        let bound = from_l[(i, j)] + from_solve[(i, j)] + want.abs() / 256.0 + 2f64.powi(-134);
                        assert!((got - want).abs() <= bound, "decay {lo}, aligned {aligned}: Ai[{}][{i},{j}] = {got} vs {want} (bound {bound:e})", s / C);
                        worst = worst.max((got - want).abs());
                        biggest = biggest.max(want.abs());
                    }
                }
            }
        }
        eprintln!("decay {lo}, aligned keys {aligned}: max |Ai − Ai_fp64| = {worst:.3e} (max |Ai| {biggest:.3e})");
    }
}

/// W = Ai X_k and U = Ai X_v (gdn-math.md §3.4) from a saved bf16 Ai, against fp64 products of
/// the same stored inputs. Bound per element: the bf16 rounding of X (2⁻⁸ relative), the f32
/// products and K-steps of the MMA (γ_{C+4}, the exp2 included), both against |Ai|·|X|; the
/// bf16 store, 2⁻⁸|W|; gradual underflow as above.
#[test]
fn recompute_w_u_matches_fp64() {
    let (b, t, h, vd) = (1, 100, 2, 128);
    let mut rng = Rng(9);
    let put = |rng: &mut Rng, dt: DType, shape: &[usize], scale: f64| random_tensor(rng, dt, shape, scale);
    let (kt, kv) = put(&mut rng, DType::Bf16, &[b, t, h, KD], 1.0 / (KD as f64).sqrt());
    let (vt, vv) = put(&mut rng, DType::Bf16, &[b, t, h, vd], 1.0);
    let beta: Vec<f64> = (0..b * t * h).map(|_| 0.5 * (1.0 + rng.uniform())).collect();
    let bt = HostTensor::from_f64(DType::Bf16, vec![b, t, h], &beta).unwrap();
    let beta = bt.to_f64();
    // A chunk-local Γ2 (log2 units) that decreases within each chunk.
    let mut gc = vec![0.0; b * t * h];
    for hi in 0..h {
        let mut acc = 0.0;
        for ti in 0..t {
            acc = if ti % C == 0 { 0.0 } else { acc } - 0.2 * (1.0 + rng.uniform());
            gc[ti * h + hi] = acc;
        }
    }
    let gt = HostTensor::from_f64(DType::F32, vec![b, t, h], &gc).unwrap();
    let gc = gt.to_f64();
    // A saved inverse: unit lower triangular with small entries below the diagonal, rows of a
    // partial chunk only up to its length (what solve_tril stores).
    let mut ai = vec![0.0; b * t * h * C];
    for hi in 0..h {
        for ti in 0..t {
            let (r, c_len) = (ti % C, (t - ti / C * C).min(C));
            for j in 0..c_len.min(r + 1) {
                ai[(ti * h + hi) * C + j] = if j == r { 1.0 } else { 0.3 * rng.uniform() };
            }
        }
    }
    let ait = HostTensor::from_f64(DType::Bf16, vec![b, t, h, C], &ai).unwrap();
    let ai = ait.to_f64();
    let inputs = BTreeMap::from([("k".to_string(), kt), ("v".to_string(), vt), ("beta".to_string(), bt), ("gc".to_string(), gt), ("ai".to_string(), ait)]);
    let out = run("recompute_w_u", inputs);
    let underflow = (KD + C) as f64 * 2f64.powi(-150) + 2f64.powi(-134);
    for (name, x_of, n) in [("w", &kv, KD), ("u", &vv, vd)] {
        let got = out[name].to_f64();
        let mut worst = 0.0f64;
        for hi in 0..h {
            for ti in 0..t {
                let s = ti / C * C;
                for col in 0..n {
                    let (mut want, mut env) = (0.0, 0.0);
                    for j in 0..C.min(t - s) {
                        let tj = s + j;
                        let scale = beta[tj * h + hi] * if name == "w" { gc[tj * h + hi].exp2() } else { 1.0 };
                        let x = scale * x_of[(tj * h + hi) * n + col];
                        want += ai[(ti * h + hi) * C + j] * x;
                        env += (ai[(ti * h + hi) * C + j] * x).abs();
                    }
                    let bound = (1.0 / 256.0 + gamma(C + 4)) * env + want.abs() / 256.0 + underflow;
                    let g = got[(ti * h + hi) * n + col];
                    assert!((g - want).abs() <= bound, "{name}[{ti},{hi},{col}] = {g} vs {want} (bound {bound:e})");
                    worst = worst.max((g - want).abs());
                }
            }
        }
        eprintln!("{name}: max |err| = {worst:.3e}");
    }
}

/// scores_channel's diagonal 16-row blocks keep the sign of zero a sum from +0 gives: its
/// distance loop gathers each P[i, j] back into the block (paired steps), and a gathered value
/// keeps a −0 that the former sum `+0 + p` turned into +0 (a breaker's find). At scale ±0 every
/// P[i, j] with j ≤ i in i's block is then exactly ±0 — the product of a row sum and the scale —
/// and must be stored as +0, for row sums of either sign. The blocks' other entries and the
/// rows' sums are covered by the operator tests.
#[test]
fn scores_channel_stores_plus_zero_in_its_diagonal_blocks() {
    let (b, t, h) = (1, 64, 1);
    let mut rng = Rng(9);
    let (q, _) = random_tensor(&mut rng, DType::Bf16, &[b, t, h, KD], 1.0);
    let (k, _) = random_tensor(&mut rng, DType::Bf16, &[b, t, h, KD], 1.0);
    // Γ (log2 units) falling down each column, as gate_cumsum_channel makes it.
    let gc: Vec<f64> = (0..t * KD).map(|x| -0.05 * (x / KD) as f64 * (1.0 + rng.uniform().abs())).collect();
    // The test bites only if some row sum is negative (a negative sum times +0 is −0).
    let (qv, kv) = (q.to_f64(), k.to_f64());
    let negative_sums = (0..t)
        .flat_map(|i| ((i / 16) * 16..=i).map(move |j| (i, j)))
        .filter(|&(i, j)| (0..KD).map(|c| qv[i * KD + c] * kv[j * KD + c] * (gc[i * KD + c] - gc[j * KD + c]).exp2()).sum::<f64>() < 0.0)
        .count();
    assert!(negative_sums > 0, "no negative row sum: the inputs cannot tell +0 from −0");
    for scale in [0.0f64, -0.0] {
        let inputs = BTreeMap::from([
            ("q".to_string(), q.clone()),
            ("k".to_string(), k.clone()),
            ("gc".to_string(), HostTensor::from_f64(DType::F32, vec![b, t, h, KD], &gc).unwrap()),
            ("scale".to_string(), HostTensor::from_f64(DType::F32, vec![], &[scale]).unwrap()),
        ]);
        let pt = run("scores_channel", inputs)["pt"].clone();
        assert_eq!(pt.shape, [b, t, h, C]);
        let bits = pt.to_f64();
        // pt[b, j, h, i] = P[i, j]: the diagonal blocks' lower triangles.
        for i in 0..t {
            for j in (i / 16) * 16..=i {
                let p = bits[j * C + i];
                assert!(p == 0.0 && p.is_sign_positive(), "P[{i}, {j}] at scale {scale:?} is {p:?}, not +0");
            }
        }
    }
}
