//! Chunkwise (B0..B6, K#1, K#2) against the token-serial oracle, general recurrence.

use kverify::recurrence::batch::{run, Method, Problem, Results};
use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, Dims};
use kverify::recurrence::Tensor;

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape, b.shape);
    let num = a.data.iter().zip(&b.data).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    let den = b.data.iter().fold(0.0f64, |m, y| m.max(y.abs()));
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Every output and gradient, by name.
fn fields(r: &Results) -> Vec<(&'static str, &Tensor)> {
    let mut v = vec![("o", &r.o), ("st", &r.st), ("dq", &r.dq), ("dk", &r.dk), ("dv", &r.dv), ("ds0", &r.ds0)];
    for (n, t) in [("dg", &r.dg), ("db", &r.db), ("dw", &r.dw), ("dbeta", &r.dbeta)] {
        if let Some(t) = t {
            v.push((n, t));
        }
    }
    v
}

fn assert_chunk_matches_serial(p: &Problem, chunk: usize, tol: f64) {
    let s = run(p, Method::Serial, chunk).expect("serial");
    let c = run(p, Method::Chunk, chunk).expect("chunk");
    for ((name, a), (_, b)) in fields(&c).into_iter().zip(fields(&s)) {
        let e = rel(a, b);
        assert!(e <= tol, "{} C={chunk}: chunk vs serial rel err {e:e} on {name}", p.model.name());
        assert!(b.data.iter().any(|x| *x != 0.0), "{name} is all zero: the test would be vacuous");
    }
}

fn dims(b: usize, h: usize, t: usize, k: usize, v: usize) -> Dims {
    Dims { batch: b, heads: h, seq_len: t, dk: k, dv: v, value_heads: None }
}

#[test]
fn general_partial_last_chunk_c64() {
    let p = generate(Model::General, dims(1, 2, 150, 16, 8), 1, None, None).unwrap();
    assert_chunk_matches_serial(&p, 64, 1e-12);
}

#[test]
fn general_c16_and_c32() {
    let p = generate(Model::General, dims(2, 1, 129, 12, 10), 2, None, None).unwrap();
    assert_chunk_matches_serial(&p, 16, 1e-12);
    assert_chunk_matches_serial(&p, 32, 1e-12);
}

#[test]
fn general_single_token() {
    let p = generate(Model::General, dims(1, 1, 1, 8, 4), 3, None, None).unwrap();
    assert_chunk_matches_serial(&p, 64, 1e-12);
}

#[test]
fn general_zero_gate() {
    let mut p = generate(Model::General, dims(1, 1, 70, 8, 6), 4, None, None).unwrap();
    p.g.as_mut().unwrap().data.iter_mut().for_each(|x| *x = 0.0);
    assert_chunk_matches_serial(&p, 64, 1e-12);
}

#[test]
fn general_zero_erase_is_gla_like() {
    // b = 0: L = 0, Ai = I, W = 0, v_new = U = w⊙V (db is still non-zero).
    let mut p = generate(Model::General, dims(1, 1, 100, 8, 6), 5, None, None).unwrap();
    p.b.as_mut().unwrap().data.iter_mut().for_each(|x| *x = 0.0);
    assert_chunk_matches_serial(&p, 32, 1e-12);
}

#[test]
fn general_varlen() {
    let p = generate(Model::General, dims(1, 2, 200, 8, 6), 6, None, Some(vec![0, 15, 100, 200])).unwrap();
    assert_chunk_matches_serial(&p, 64, 1e-12);
    assert_chunk_matches_serial(&p, 16, 1e-12);
}

#[test]
fn members_chunk_matches_their_own_serial() {
    for model in [Model::La, Model::Gla, Model::Ssd, Model::Kda, Model::Gdn] {
        let p = generate(model, dims(1, 2, 130, 16, 8), 7, None, None).unwrap();
        assert_chunk_matches_serial(&p, 64, 1e-12);
    }
}

#[test]
fn strong_decay_uses_safe_exponentials() {
    // Gates around −30 per token make |Γ| exceed the factorised-exponential limit inside a chunk;
    // the chunk path must then take exp of differences and still agree.
    for model in [Model::Gla, Model::Kda, Model::Gdn] {
        let mut p = generate(model, dims(1, 1, 80, 8, 4), 8, None, None).unwrap();
        p.g.as_mut().unwrap().data.iter_mut().for_each(|x| *x = *x * 10.0 - 25.0);
        assert_chunk_matches_serial(&p, 64, 1e-12);
    }
}
