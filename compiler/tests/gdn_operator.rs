//! The `gdn_bwd` operator of `dsl-examples/gdn.tile` on the interpreter against kverify's fp64
//! recurrence oracle (the GDN member's own token-serial definition, gdn-math.md §1–2).

use std::collections::BTreeMap;

use kverify::recurrence::batch::{run, Method, Problem};
use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, Dims};
use kverify::recurrence::tensor::Tensor;
use tilec::interp::{run_operator, Options};
use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

fn checked() -> tilec::frontend::Checked {
    let path = std::path::PathBuf::from(format!("{}/../dsl-examples/gdn.tile", env!("CARGO_MANIFEST_DIR")));
    let (_, c) = tilec::frontend::check_file(&path, &tilec::frontend::Options::default()).expect("read gdn.tile");
    assert!(c.ok(), "gdn.tile does not compile");
    c
}

/// Rounds `t` to `dt` in place and returns it as a host tensor (the operator sees exactly the
/// values the oracle gets).
fn host(t: &mut Tensor, dt: DType) -> HostTensor {
    let h = HostTensor::from_f64(dt, t.shape.clone(), &t.data).unwrap();
    t.data = h.to_f64();
    h
}

fn inputs(p: &mut Problem) -> BTreeMap<String, HostTensor> {
    let mut m = BTreeMap::new();
    m.insert("q".into(), host(&mut p.q, DType::Bf16));
    m.insert("k".into(), host(&mut p.k, DType::Bf16));
    m.insert("v".into(), host(&mut p.v, DType::Bf16));
    m.insert("g".into(), host(p.g.as_mut().unwrap(), DType::F32));
    m.insert("beta".into(), host(p.beta.as_mut().unwrap(), DType::Bf16));
    m.insert("s0".into(), host(&mut p.s0, DType::F32));
    m.insert("do".into(), host(&mut p.d_o, DType::Bf16));
    m.insert("dht".into(), host(&mut p.dst, DType::F32));
    let scale = HostTensor::from_f64(DType::F32, vec![], &[p.scale]).unwrap();
    p.scale = scale.to_f64()[0];
    m.insert("scale".into(), scale);
    m
}

#[test]
fn gdn_bwd_matches_the_oracle() {
    let c = checked();
    let op = c.module.operators.iter().find(|o| o.name == "gdn_bwd").expect("gdn_bwd");
    let mut p = generate(Model::Gdn, Dims { batch: 1, heads: 2, seq_len: 100, dk: 128, dv: 128 }, 7, None, None).unwrap();
    let ins = inputs(&mut p);
    let t0 = std::time::Instant::now();
    let out = run_operator(&c.module, op, ins, &Options::default()).map_err(|e| e.0.to_string()).unwrap();
    eprintln!("interpreter: {:.1} s", t0.elapsed().as_secs_f64());
    let r = run(&p, Method::Serial, 64).unwrap();
    let pairs = [("dq", &r.dq), ("dk", &r.dk), ("dv", &r.dv), ("dg", r.dg.as_ref().unwrap()), ("dbeta", r.dbeta.as_ref().unwrap()), ("ds0", &r.ds0)];
    for (name, want) in pairs {
        let got = out[name].to_f64();
        let err = got.iter().zip(&want.data).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        let mx = want.data.iter().map(|x| x.abs()).fold(0.0, f64::max);
        eprintln!("{name}: max|err| {err:.3e}  max|ref| {mx:.3e}  rel {:.3e}", err / mx);
    }
}
