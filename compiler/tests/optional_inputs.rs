//! Optional operator inputs (`s0: f32[…] optional(zeros)`, plan schema version 3): every operator
//! of `gdn.tile` and `gdn_fwd.tile` lets the caller leave out the initial state `s0` and the final
//! state's gradient `dht`, as fla's `initial_state=None` and `dht=None`; a call without them gives
//! bit for bit the outputs of a call with zero tensors. (Refusals: tests/ui/optional.tile, the
//! plan's validation in tilec-abi, the Python loader in python/tests.)

use std::collections::BTreeMap;
use std::path::PathBuf;

use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, Dims};
use tilec::frontend::{check_file, Options};
use tilec::interp::{run_operator, Options as Interp};
use tilec::verify::operator_inputs;
use tilec_abi::tensor::HostTensor;

fn check(file: &str) -> tilec::frontend::Checked {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dsl-examples").join(file);
    let opts = Options { size_values: BTreeMap::from([("K".to_string(), 64), ("V".to_string(), 64)]), ..Options::default() };
    let (_, c) = check_file(&path, &opts).expect("read");
    assert!(c.ok(), "{:?}", c.diags);
    c
}

#[test]
fn every_operator_may_leave_out_its_states() {
    for file in ["gdn.tile", "gdn_fwd.tile"] {
        let c = check(file);
        for op in &c.module.operators {
            let takes: Vec<&str> = op.params.iter().map(|p| p.name.as_str()).filter(|n| ["s0", "dht"].contains(n)).collect();
            assert!(!takes.is_empty(), "{file}: {} takes no state", op.name);
            assert_eq!(op.optional, takes, "{file}: {}", op.name);
        }
    }
}

/// gdn_bwd and kda_fwd at B = 2, T = 100 (a partial chunk), K = V = 64: without s0 and dht the
/// outputs equal, bitwise, those of a call given zeros for them — and differ from a call given
/// the generated (non-zero) states, so the left-out tensors are really read as zeros.
#[test]
fn a_call_without_states_equals_one_with_zeros() {
    for (file, operator, model) in [("gdn.tile", "gdn_bwd", Model::Gdn), ("gdn_fwd.tile", "kda_fwd", Model::Kda)] {
        let c = check(file);
        let op = c.module.operators.iter().find(|o| o.name == operator).unwrap();
        let dims = Dims { batch: 2, heads: 2, seq_len: 100, dk: 64, dv: 64, value_heads: None };
        let mut p = generate(model, dims, 7, None, None).unwrap();
        let given = operator_inputs(op, &mut p).unwrap();
        let mut zeros = given.clone();
        let mut without = given.clone();
        for name in &op.optional {
            let t = &given[name];
            zeros.insert(name.clone(), HostTensor::zeros(t.dtype, t.shape.clone()).unwrap());
            without.remove(name);
        }
        let run = |inputs: BTreeMap<String, HostTensor>| run_operator(&c.module, op, inputs, &Interp::default()).map_err(|(e, _)| e.to_string()).unwrap();
        let (with_zeros, left_out, with_states) = (run(zeros), run(without), run(given));
        assert_eq!(with_zeros.keys().collect::<Vec<_>>(), left_out.keys().collect::<Vec<_>>(), "{operator}: the same outputs, no state among them");
        for (name, t) in &with_zeros {
            assert_eq!(t.bytes, left_out[name].bytes, "{operator}: {name}");
        }
        let differs = with_zeros.iter().filter(|(n, t)| t.bytes != with_states[*n].bytes).count();
        assert!(differs >= 1, "{operator}: the states change no output");
    }
}
