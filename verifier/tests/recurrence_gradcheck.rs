//! Analytic gradients of the token-serial oracle (general and each member's own reference)
//! against central finite differences of `L = Σ o⊙do + Σ S_T⊙dst`.

use kverify::recurrence::family::{MemberInputs, Model};
use kverify::recurrence::io::{generate, Dims};
use kverify::recurrence::{serial, HeadInputs, HeadOutputs, HeadSeeds, Mat};

const STEP: f64 = 1e-6;

fn loss(out: &HeadOutputs, s: &HeadSeeds) -> f64 {
    let a: f64 = out.o.data.iter().zip(&s.d_o.data).map(|(x, y)| x * y).sum();
    let b: f64 = out.st.data.iter().zip(&s.dst.data).map(|(x, y)| x * y).sum();
    a + b
}

/// Central differences of `f` w.r.t. every element of the matrix selected by `pick`, compared with
/// `grad` relative to the gradient's largest element.
fn check<X: Clone>(name: &str, x: &X, grad: &Mat, pick: fn(&mut X) -> &mut Mat, f: &dyn Fn(&X) -> f64) {
    let scale = grad.max_abs().max(1e-3);
    let n = grad.data.len();
    for idx in 0..n {
        let mut xp = x.clone();
        pick(&mut xp).data[idx] += STEP;
        let mut xm = x.clone();
        pick(&mut xm).data[idx] -= STEP;
        let fd = (f(&xp) - f(&xm)) / (2.0 * STEP);
        let err = (fd - grad.data[idx]).abs() / scale;
        assert!(err < 2e-7, "{name}[{idx}]: fd {fd:e} vs analytic {:e} (rel {err:e})", grad.data[idx]);
    }
}

fn small(model: Model, seed: u64) -> (HeadInputs, MemberInputs, HeadSeeds) {
    let p = generate(model, Dims { batch: 1, heads: 1, seq_len: 6, dk: 4, dv: 3, value_heads: None }, seed, Some(0.8), None).unwrap();
    (p.general_inputs(0, 0).unwrap(), p.member_inputs(0, 0).unwrap(), p.seeds(0, 0).unwrap())
}

#[test]
fn general_serial_gradients_match_finite_differences() {
    let (x, _, s) = small(Model::General, 21);
    let (_, g) = serial::forward_backward(&x, &s).unwrap();
    let f = |x: &HeadInputs| loss(&serial::forward(x).unwrap(), &s);
    check("dq", &x, &g.dq, |x| &mut x.q, &f);
    check("dk", &x, &g.dk, |x| &mut x.k, &f);
    check("dv", &x, &g.dv, |x| &mut x.v, &f);
    check("dg", &x, &g.dg, |x| &mut x.g, &f);
    check("db", &x, &g.db, |x| &mut x.b, &f);
    check("dw", &x, &g.dw, |x| &mut x.w, &f);
    check("ds0", &x, &g.ds0, |x| &mut x.s0, &f);
}

#[test]
fn member_gradients_match_finite_differences() {
    for model in [Model::La, Model::Gla, Model::Ssd, Model::Kda, Model::Gdn] {
        let (_, m, s) = small(model, 22);
        let (_, g) = model.own_forward_backward(&m, &s).unwrap();
        let f = move |x: &MemberInputs| loss(&model.own_forward_backward(x, &s).unwrap().0, &s);
        check("dq", &m, &g.dq, |x| &mut x.q, &f);
        check("dk", &m, &g.dk, |x| &mut x.k, &f);
        check("dv", &m, &g.dv, |x| &mut x.v, &f);
        check("ds0", &m, &g.ds0, |x| &mut x.s0, &f);
        if let Some(dg) = &g.dg {
            check("dg", &m, dg, |x| x.g.as_mut().unwrap(), &f);
        }
        if let Some(db) = &g.dbeta {
            check("dbeta", &m, db, |x| x.beta.as_mut().unwrap(), &f);
        }
    }
}
