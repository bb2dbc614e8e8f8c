//! Each family member's own token-serial reference against the general recurrence at the
//! member's gate setting (gdn-math.md §1 table), and b = w = β reducing the general path to KDA.

use kverify::recurrence::family::{MemberGrads, Model};
use kverify::recurrence::io::{generate, Dims};
use kverify::recurrence::{serial, Mat};

fn rel(a: &Mat, b: &Mat) -> f64 {
    assert_eq!((a.rows, a.cols), (b.rows, b.cols));
    let num = a.data.iter().zip(&b.data).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    num / b.max_abs().max(f64::MIN_POSITIVE)
}

fn compare(model: Model, tol: f64) {
    let p = generate(model, Dims { batch: 1, heads: 2, seq_len: 37, dk: 8, dv: 5, value_heads: None }, 11, Some(0.7), None).unwrap();
    for h in 0..2 {
        let m = p.member_inputs(0, h).unwrap();
        let seeds = p.seeds(0, h).unwrap();
        let (own_out, own) = model.own_forward_backward(&m, &seeds).unwrap();
        let (gen_out, gen) = serial::forward_backward(&model.to_general(&m), &seeds).unwrap();
        let red: MemberGrads = model.reduce_grads(&gen);
        let pairs = [
            ("o", &own_out.o, &gen_out.o),
            ("st", &own_out.st, &gen_out.st),
            ("dq", &own.dq, &red.dq),
            ("dk", &own.dk, &red.dk),
            ("dv", &own.dv, &red.dv),
            ("ds0", &own.ds0, &red.ds0),
        ];
        for (name, a, b) in pairs {
            let e = rel(a, b);
            assert!(e < tol, "{}: {name} member vs general rel err {e:e}", model.name());
        }
        assert_eq!(own.dg.is_some(), red.dg.is_some());
        if let (Some(a), Some(b)) = (&own.dg, &red.dg) {
            assert!(rel(a, b) < tol, "{}: dg rel err {:e}", model.name(), rel(a, b));
        }
        assert_eq!(own.dbeta.is_some(), red.dbeta.is_some());
        if let (Some(a), Some(b)) = (&own.dbeta, &red.dbeta) {
            assert!(rel(a, b) < tol, "{}: dbeta rel err {:e}", model.name(), rel(a, b));
        }
    }
}

#[test]
fn la_equals_general_with_g0_b0_w1() {
    compare(Model::La, 1e-13);
}

#[test]
fn gla_equals_general_with_b0_w1() {
    compare(Model::Gla, 1e-13);
}

#[test]
fn ssd_equals_general_with_broadcast_scalar_gate() {
    compare(Model::Ssd, 1e-13);
}

#[test]
fn kda_equals_general_with_b_w_beta() {
    // b = w = β·1 reduces the general path to KDA at machine precision.
    compare(Model::Kda, 1e-13);
}

#[test]
fn gdn_equals_general_with_scalar_gate_and_beta() {
    compare(Model::Gdn, 1e-13);
}

#[test]
fn member_refuses_missing_gate() {
    let p = generate(Model::Gdn, Dims { batch: 1, heads: 1, seq_len: 4, dk: 4, dv: 4, value_heads: None }, 1, None, None).unwrap();
    let mut m = p.member_inputs(0, 0).unwrap();
    m.beta = None;
    let err = Model::Gdn.own_forward_backward(&m, &p.seeds(0, 0).unwrap()).unwrap_err();
    assert!(err.to_string().contains("beta"), "{err}");
}
