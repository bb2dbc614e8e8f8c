//! The forward's saved scores `Pᵀ` (`chunk_fwd::scores_t`, fla's `Aqk` key-major): the backward's local
//! dv (`dv_local = Pᵀ dO`, built there from its own `P`) must equal `Pᵀ dO` formed from them,
//! chunk by chunk, and the entries above each chunk's diagonal and past a partial chunk are 0.

use kverify::recurrence::chunk::forward;
use kverify::recurrence::chunk_bwd::dv_local;
use kverify::recurrence::chunk_fwd::scores_t;
use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, Dims};

#[test]
fn saved_scores_give_the_backwards_local_dv() {
    for model in [Model::Kda, Model::Gla, Model::Gdn] {
        // 100 tokens: one whole chunk of 64 and a partial one of 36.
        let p = generate(model, Dims { batch: 1, heads: 1, seq_len: 100, dk: 8, dv: 5, value_heads: None }, 3, Some(0.7), None).unwrap();
        let (x, seeds) = (p.general_inputs(0, 0).unwrap(), p.seeds(0, 0).unwrap());
        let (_, saved) = forward(&x, 64).unwrap();
        let pt = scores_t(&x.q, &x.k, &saved.gamma, x.scale, 64);
        assert_eq!((pt.rows, pt.cols), (100, 64));
        let want = dv_local(&x.q, &x.k, &saved.gamma, &seeds.d_o, x.scale, 64);
        let mut worst = 0.0f64;
        for (s, e) in [(0, 64), (64, 100)] {
            for j in s..e {
                for c in 0..seeds.d_o.cols {
                    let got: f64 = (s..e).map(|i| pt[(j, i - s)] * seeds.d_o[(i, c)]).sum();
                    worst = worst.max((got - want[(j, c)]).abs());
                }
                // Key row j: query rows i < j and columns past the chunk are 0.
                for col in 0..64 {
                    if col < j - s || col >= e - s {
                        assert_eq!(pt[(j, col)], 0.0, "{model:?}: pt[{j}, {col}]");
                    }
                }
            }
        }
        assert!(worst <= 1e-12 * want.max_abs().max(1.0), "{model:?}: Pᵀ dO off by {worst:e}");
        assert!(pt.max_abs() > 0.0);
    }
}
