//! The varlen backward of every member at the 16-bit precision the operators run at (issue 10,
//! "varlen with 3 sequences including one of length 1 … every gradient within the bound the
//! verifier derives"): `gdn_operator.rs` judges `gdn_bwd_varlen` at K = V = 128; here SSD, LA,
//! GLA and KDA's varlen operators are judged the same way, at K = V = 64 to keep CI short (the
//! stage kernels are the same source; `tilec build gdn.tile --verify` in scripts/demo.sh judges
//! them at 128 too).

use std::collections::BTreeMap;
use std::path::PathBuf;

use tilec::frontend::{check_file, Options};
use tilec::verify::verify_operator;

#[test]
fn every_member_varlen_backward_is_within_its_bound_and_isolates_sequences() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples/gdn.tile");
    let opts = Options { size_values: BTreeMap::from([("K".to_string(), 64), ("V".to_string(), 64)]), ..Options::default() };
    let (_, c) = check_file(&path, &opts).expect("read");
    assert!(c.ok(), "{:?}", c.diags);
    // (operator, its gradients): the members without a gate have no dg, without β no dbeta.
    let members = [
        ("ssd_bwd_varlen", &["dq", "dk", "dv", "dg", "ds0"][..]),
        ("la_bwd_varlen", &["dq", "dk", "dv", "ds0"]),
        ("gla_bwd_varlen", &["dq", "dk", "dv", "dg", "ds0"]),
        ("kda_bwd_varlen", &["dq", "dk", "dv", "dg", "dbeta", "ds0"]),
    ];
    for (name, grads) in members {
        let op = c.module.operators.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("{name}"));
        let v = verify_operator(&c.module, op, &tilec::interp::Options::default()).expect("verify runs");
        let outputs: std::collections::BTreeSet<&str> = v.judgements.iter().map(|j| j.output.as_str()).collect();
        assert_eq!(outputs, grads.iter().copied().collect(), "{name}: every gradient judged");
        assert!(v.judgements.iter().any(|j| j.case.starts_with("varlen 1+70+129")), "{name}: the case with a sequence of length 1");
        for j in &v.judgements {
            assert!(j.ok(), "{name} {} {}: {:e} > bound {:e}", j.case, j.output, j.error, j.bound);
        }
        // Sequences and GVA key-head groups: redrawing the others changes no bit of the kept.
        assert!(!v.isolation.is_empty() && v.isolation.iter().all(|j| j.error == 0.0), "{name}: {:?}", v.isolation.iter().find(|j| j.error != 0.0));
        assert!(v.not_run.is_empty(), "{name}: every case runs packed: {:?}", v.not_run);
    }
}
