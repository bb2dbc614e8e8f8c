//! The blocked 16x16 triangular inverse (gdn-math.md §3.3).

use kverify::recurrence::chunk_fwd::{build_l, kkt_solve};
use kverify::recurrence::intra::{chunk_local_cumsum, Decay};
use kverify::recurrence::inverse::{blocked_inverse, unblocked_inverse};
use kverify::recurrence::io::{generate, Dims};
use kverify::recurrence::family::Model;
use kverify::recurrence::Mat;

fn l_of(seed: u64, c: usize) -> Mat {
    let p = generate(Model::General, Dims { batch: 1, heads: 1, seq_len: c, dk: 32, dv: 4, value_heads: None }, seed, None, None).unwrap();
    let x = p.general_inputs(0, 0).unwrap();
    let gamma = chunk_local_cumsum(&x.g, 64);
    build_l(&x.k, &x.b, &Decay::new(gamma))
}

#[test]
fn blocked_matches_unblocked_and_inverts() {
    for c in [64, 50, 33, 16, 7, 1] {
        let l = l_of(c as u64, c);
        let a = blocked_inverse(&l);
        let r = unblocked_inverse(&l);
        let diff = a.data.iter().zip(&r.data).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff < 1e-14, "c={c}: blocked vs unblocked {diff:e}");
        // (I + L) Ai = I
        let mut il = l.clone();
        for i in 0..c {
            il[(i, i)] += 1.0;
        }
        let prod = il.matmul(&a);
        let err = prod.data.iter().zip(&Mat::eye(c).data).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(err < 1e-13, "c={c}: (I+L)Ai − I = {err:e}");
        // lower triangular with unit diagonal
        for i in 0..c {
            assert_eq!(a[(i, i)], 1.0);
            for j in (i + 1)..c {
                assert_eq!(a[(i, j)], 0.0);
            }
        }
    }
}

#[test]
fn zero_erase_gives_identity_inverse() {
    let p = generate(Model::General, Dims { batch: 1, heads: 1, seq_len: 100, dk: 8, dv: 4, value_heads: None }, 3, None, None).unwrap();
    let mut x = p.general_inputs(0, 0).unwrap();
    x.b.data.iter_mut().for_each(|z| *z = 0.0);
    let ai = kkt_solve(&x.k, &x.b, &chunk_local_cumsum(&x.g, 64), 64);
    // [T, C] layout: row t holds row t mod 64 of I; the partial chunk's columns past 36 are 0.
    for t in 0..100 {
        for j in 0..64 {
            let want = if j == t % 64 { 1.0 } else { 0.0 };
            assert_eq!(ai[(t, j)], want, "t={t} j={j}");
        }
    }
}
