//! Binding tests on hand-written metadata; no GPU involved.

use super::*;
use crate::meta::test_support::axpb_meta;
use crate::meta::{ArtifactFiles, CompilerInfo, Contract, KernelMeta, LaunchMeta, ParamMeta, SizeBound, SourceInfo, SCHEMA_VERSION};

/// A GDN-backward-like signature: bare-name dims, expression dims, an inout, a size scalar.
fn gdn_meta() -> KernelMeta {
    let p = |name: &str, dtype, shape: &[&str], role| ParamMeta {
        name: name.into(),
        dtype,
        shape: shape.iter().map(|s| s.to_string()).collect(),
        role,
    };
    let m = KernelMeta {
        schema_version: SCHEMA_VERSION,
        kernel: "chunk_bwd_dhu".into(),
        target: "sm_90a".into(),
        compiler: CompilerInfo { name: "tilec".into(), version: "0.1.0".into() },
        source: SourceInfo { path: "dsl-examples/gdn.tile".into(), hash: "0123456789abcdef".into() },
        sizes: ["B", "T", "H", "K", "V"].map(String::from).to_vec(),
        params: vec![
            p("q", DType::Bf16, &["B", "T", "H", "K"], Role::Input),
            p("k", DType::Bf16, &["B", "T", "H", "K"], Role::Input),
            p("g", DType::F32, &["B*T", "H"], Role::Input),
            p("scale", DType::F32, &[], Role::Input),
            p("dv", DType::Bf16, &["B", "T", "H", "V"], Role::Inout),
            p("dh", DType::Bf16, &["B", "cdiv(T, 64)", "H", "K", "V"], Role::Output),
            p("T", DType::I32, &[], Role::Input),
        ],
        launch: LaunchMeta {
            grid: ["cdiv(V, 64)".into(), "B*H".into(), "1".into()],
            block_threads: 128,
            dynamic_smem_bytes: 65536,
        },
        tmem: None,
        smem_bytes: 0,
        ptxas: None,
        contract: Contract {
            no_spill: true,
            accumulator: DType::F32,
            reference: Some("gdn.bwd.dhu".into()),
            envelope: vec![SizeBound { size: "K".into(), min: 16, max: Some(256), multiple_of: 16 }],
        },
        files: ArtifactFiles { ptx: "chunk_bwd_dhu.sm_90a.ptx".into(), cubin: None },
        tensor_maps: vec![],
    };
    m.validate().unwrap();
    m
}

const B: usize = 2;
const T: usize = 100;
const H: usize = 3;
const K: usize = 32;
const V: usize = 130;

fn zeros(dtype: DType, shape: &[usize]) -> HostTensor {
    HostTensor::zeros(dtype, shape.to_vec()).unwrap()
}

fn good_args() -> Args {
    let mut a = Args::default();
    a.tensors.insert("q".into(), zeros(DType::Bf16, &[B, T, H, K]));
    a.tensors.insert("k".into(), zeros(DType::Bf16, &[B, T, H, K]));
    a.tensors.insert("g".into(), zeros(DType::F32, &[B * T, H]));
    a.tensors.insert("dv".into(), zeros(DType::Bf16, &[B, T, H, V]));
    a.scalars.insert("scale".into(), Scalar::F32(0.125));
    a
}

#[test]
fn infers_sizes_grid_and_output_shapes() {
    let meta = gdn_meta();
    let args = good_args();
    let b = bind(&meta, &args).unwrap();
    let want: BTreeMap<String, u64> =
        [("B", B), ("T", T), ("H", H), ("K", K), ("V", V)].iter().map(|(k, v)| (k.to_string(), *v as u64)).collect();
    assert_eq!(b.sizes, want);
    assert_eq!(b.grid, [3, 6, 1]); // cdiv(130, 64) = 3, B*H = 6
    assert_eq!(b.block, [128, 1, 1]);
    assert_eq!(b.dynamic_smem_bytes, 65536);
    assert_eq!(b.args.len(), 7);
    match &b.args[5] {
        BoundArg::Tensor(t) => {
            assert_eq!(t.name, "dh");
            assert_eq!(t.shape, vec![B, 2, H, K, V]);
            assert!(t.data.is_none());
        }
        other => panic!("unexpected {other:?}"),
    }
    // The size scalar is filled from the inferred T.
    assert_eq!(b.args[6], BoundArg::Scalar { name: "T".into(), value: Scalar::I32(T as i32) });
    assert_eq!(b.args[3], BoundArg::Scalar { name: "scale".into(), value: Scalar::F32(0.125) });
    let outs: Vec<&str> = b.outputs().map(|t| t.name.as_str()).collect();
    assert_eq!(outs, ["dv", "dh"]);
}

#[test]
fn missing_parameter() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.remove("k");
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(
        e,
        BindError::Missing { param: "k".into(), role: Role::Input, expected: "bf16 tensor [B, T, H, K]".into() }
    );
    // An inout must be supplied too; a plain output need not.
    let mut args = good_args();
    args.tensors.remove("dv");
    assert!(matches!(bind(&meta, &args), Err(BindError::Missing { param, role: Role::Inout, .. }) if param == "dv"));
    let mut args = good_args();
    args.scalars.clear();
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(e.to_string(), "missing input parameter `scale`: expected f32 scalar");
}

#[test]
fn unknown_names() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("w".into(), zeros(DType::F32, &[1]));
    let e = bind(&meta, &args).unwrap_err();
    assert!(matches!(&e, BindError::Unknown { kind: "tensor parameter", name, .. } if name == "w"), "{e}");
    assert!(e.to_string().contains("q, k, g, dv, dh"), "{e}");

    let mut args = good_args();
    args.scalars.insert("alpha".into(), Scalar::F32(1.0));
    assert!(matches!(bind(&meta, &args), Err(BindError::Unknown { kind: "scalar parameter", .. })));

    let mut args = good_args();
    args.sizes.insert("N".into(), 4);
    assert!(matches!(bind(&meta, &args), Err(BindError::Unknown { kind: "size", .. })));
}

#[test]
fn wrong_kind() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.scalars.remove("scale");
    args.tensors.insert("scale".into(), zeros(DType::F32, &[1]));
    assert_eq!(
        bind(&meta, &args).unwrap_err(),
        BindError::WrongKind { param: "scale".into(), expected: "scalar", found: "tensor" }
    );
    let mut args = good_args();
    args.tensors.remove("q");
    args.scalars.insert("q".into(), Scalar::F32(0.0));
    assert_eq!(
        bind(&meta, &args).unwrap_err(),
        BindError::WrongKind { param: "q".into(), expected: "tensor", found: "scalar" }
    );
}

#[test]
fn wrong_dtype() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("k".into(), zeros(DType::F16, &[B, T, H, K]));
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(e, BindError::WrongDtype { param: "k".into(), expected: DType::Bf16, found: DType::F16 });
    assert_eq!(e.to_string(), "parameter `k`: expected dtype Bf16, found F16");

    let mut args = good_args();
    args.scalars.insert("scale".into(), Scalar::I32(1));
    assert_eq!(
        bind(&meta, &args).unwrap_err(),
        BindError::WrongDtype { param: "scale".into(), expected: DType::F32, found: DType::I32 }
    );
}

#[test]
fn wrong_rank() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("q".into(), zeros(DType::Bf16, &[B * T, H, K]));
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(
        e,
        BindError::WrongRank {
            param: "q".into(),
            expected: 4,
            shape: "[B, T, H, K]".into(),
            found: 3,
            found_shape: vec![B * T, H, K]
        }
    );
}

#[test]
fn inconsistent_sizes() {
    let meta = gdn_meta();
    // T differs between q (100) and dv (101).
    let mut args = good_args();
    args.tensors.insert("dv".into(), zeros(DType::Bf16, &[B, T + 1, H, V]));
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(
        e,
        BindError::InconsistentSize {
            size: "T".into(),
            first: "parameter `q` dim 1".into(),
            first_value: T as u64,
            second: "parameter `dv` dim 1".into(),
            second_value: (T + 1) as u64,
        }
    );
    assert_eq!(e.to_string(), "size `T` is inconsistent: parameter `q` dim 1 gives 100, but parameter `dv` dim 1 gives 101");

    // An expression dim (`B*T`) that disagrees with the inferred sizes.
    let mut args = good_args();
    args.tensors.insert("g".into(), zeros(DType::F32, &[B * T - 1, H]));
    assert_eq!(
        bind(&meta, &args).unwrap_err(),
        BindError::WrongExtent { param: "g".into(), dim: 0, expr: "B*T".into(), expected: (B * T) as i64, found: B * T - 1 }
    );

    // An explicit size and a size scalar must agree with the tensors too.
    let mut args = good_args();
    args.sizes.insert("T".into(), 99);
    assert!(matches!(bind(&meta, &args), Err(BindError::InconsistentSize { first, .. }) if first == "the explicit value of `T`"));
    let mut args = good_args();
    args.scalars.insert("T".into(), Scalar::I32(64));
    assert!(matches!(bind(&meta, &args), Err(BindError::InconsistentSize { second, .. }) if second == "scalar `T`"));
    let mut args = good_args();
    args.scalars.insert("T".into(), Scalar::I32(T as i32));
    assert!(bind(&meta, &args).is_ok());
}

#[test]
fn supplied_output_is_checked() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("dh".into(), zeros(DType::Bf16, &[B, 1, H, K, V]));
    assert_eq!(
        bind(&meta, &args).unwrap_err(),
        BindError::WrongExtent { param: "dh".into(), dim: 1, expr: "cdiv(T, 64)".into(), expected: 2, found: 1 }
    );
    args.tensors.insert("dh".into(), zeros(DType::Bf16, &[B, 2, H, K, V]));
    let b = bind(&meta, &args).unwrap();
    assert!(matches!(&b.args[5], BoundArg::Tensor(t) if t.data.is_some()));
}

#[test]
fn envelope_and_grid_limits() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("q".into(), zeros(DType::Bf16, &[B, T, H, 24]));
    args.tensors.insert("k".into(), zeros(DType::Bf16, &[B, T, H, 24]));
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(
        e,
        BindError::OutsideEnvelope { size: "K".into(), value: 24, bound: "16 <= K <= 256, multiple of 16".into() }
    );

    // V = 0 gives an empty grid, which cannot launch.
    let mut args = good_args();
    args.tensors.insert("dv".into(), zeros(DType::Bf16, &[B, T, H, 0]));
    let e = bind(&meta, &args).unwrap_err();
    assert!(matches!(&e, BindError::OutOfRange { what, value: 0, .. } if what == "launch.grid[0]"), "{e:?}");
    // The message names the size behind the computed grid (`cdiv(V, 64)`), not only the grid.
    assert_eq!(e.to_string(), "launch.grid[0] = `cdiv(V, 64)` evaluates to 0 with V = 0, outside 1..=2147483647");
}

#[test]
fn unresolved_size() {
    let mut meta = gdn_meta();
    // `V` now appears only in the output and the grid: nothing reveals it.
    meta.params.remove(4);
    let args = {
        let mut a = good_args();
        a.tensors.remove("dv");
        a
    };
    let e = bind(&meta, &args).unwrap_err();
    assert!(matches!(&e, BindError::UnresolvedSize { size, .. } if size == "V"), "{e}");
    let mut args = args;
    args.sizes.insert("V".into(), 64);
    let b = bind(&meta, &args).unwrap();
    assert_eq!(b.grid, [1, 6, 1]);
}

#[test]
fn inconsistent_tensor_bytes_are_reported() {
    let meta = gdn_meta();
    let mut args = good_args();
    args.tensors.insert("g".into(), HostTensor { dtype: DType::F32, shape: vec![B * T, H], bytes: vec![0; 7] });
    assert!(matches!(bind(&meta, &args), Err(BindError::BadTensor { param, .. }) if param == "g"));
}

#[test]
fn malformed_unvalidated_metadata_is_an_error_not_a_panic() {
    let mut meta = gdn_meta();
    meta.launch.grid[0] = "cdiv(V,".into();
    assert!(matches!(bind(&meta, &good_args()), Err(BindError::Expr { .. })));
    let mut meta = gdn_meta();
    meta.launch.grid[2] = "V / (K - K)".into();
    assert!(matches!(bind(&meta, &good_args()), Err(BindError::Expr { source: ExprError::DivisionByZero { .. }, .. })));
}

#[test]
fn axpb_fixture_file_matches_test_metadata() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/tests/fixtures/axpb.meta.json");
    let loaded = KernelMeta::load(&path).unwrap();
    assert_eq!(loaded, axpb_meta());
    let mut args = Args::default();
    args.tensors.insert("x".into(), HostTensor::from_f32(DType::F32, vec![300], &[0.0; 300]).unwrap());
    args.scalars.insert("a".into(), Scalar::F32(2.0));
    args.scalars.insert("b".into(), Scalar::F32(1.0));
    let b = bind(&loaded, &args).unwrap();
    assert_eq!(b.grid, [3, 1, 1]);
    assert_eq!(b.args[4], BoundArg::Scalar { name: "N".into(), value: Scalar::I32(300) });
}

#[test]
fn scalars_from_a_tensor_file() {
    let meta = axpb_meta();
    let mut m = TensorMap::new();
    m.insert("a".into(), HostTensor::from_f32(DType::F32, vec![], &[2.5]).unwrap());
    m.insert("b".into(), HostTensor::from_f32(DType::F32, vec![1], &[-1.0]).unwrap());
    m.insert("x".into(), HostTensor::from_f32(DType::F32, vec![1], &[4.0]).unwrap());
    let args = Args::from_tensor_map(&meta, m);
    assert_eq!(args.scalars.get("a"), Some(&Scalar::F32(2.5)));
    assert_eq!(args.scalars.get("b"), Some(&Scalar::F32(-1.0)));
    // `x` is a tensor parameter: a one-element tensor stays a tensor.
    assert!(args.tensors.contains_key("x"));
    let b = bind(&meta, &args).unwrap();
    assert_eq!(b.sizes.get("N"), Some(&1));
}

#[test]
fn an_output_whose_byte_count_would_wrap_is_refused() {
    // The fuzzer's metadata: an output of shape [1000, 2^61]. 1000 · 2^61 · 4 bytes wraps usize
    // to a small number; the launcher then allocated 1 byte and the kernel wrote out of bounds.
    let axpb_args = || {
        let mut a = Args::default();
        a.tensors.insert("x".into(), zeros(DType::F32, &[8]));
        a.scalars.insert("a".into(), Scalar::F32(2.0));
        a.scalars.insert("b".into(), Scalar::F32(1.0));
        a
    };
    let mut meta = axpb_meta();
    meta.params[2].shape = vec!["1000".into(), "2305843009213693952".into()];
    match bind(&meta, &axpb_args()) {
        Err(BindError::TooLarge { param, shape, .. }) => {
            assert_eq!(param, "y");
            assert_eq!(shape, vec![1000, 1 << 61]);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // Below the overflow but past the 1 TiB limit: refused with the byte count.
    meta.params[2].shape = vec!["1024".into(), "1073741824".into()]; // 2^40 f32 = 4 TiB
    let e = bind(&meta, &axpb_args()).unwrap_err();
    assert!(e.to_string().contains("4398046511104 bytes, the limit is 1099511627776"), "{e}");
}

#[test]
fn a_scalar_round_trips_through_its_file_tensor() {
    let values = [Scalar::F32(0.088), Scalar::I32(-7), Scalar::F16(f16::from_f32(1.5)), Scalar::Bf16(bf16::from_f32(-2.25))];
    for v in values {
        let t = HostTensor::from(v);
        assert_eq!((t.dtype, t.shape.as_slice()), (v.dtype(), &[][..]));
        let params = [ParamMeta { name: "s".into(), dtype: v.dtype(), shape: vec![], role: Role::Input }];
        let grid = ["1".to_string(), "1".to_string(), "1".to_string()];
        let sig = Signature { kernel: "k", sizes: &[], params: &params, grid: &grid, block_threads: 32, dynamic_smem_bytes: 0, envelope: &[], optional: &[] };
        let args = Args::from_tensor_map(sig, TensorMap::from([("s".to_string(), t)]));
        assert_eq!(args.scalars["s"], v);
    }
}

/// GVA: v's heads written `H * G` give G once q gave H (G = 6 / 3 = 2; a `G * H` order too),
/// and a head count that is not a multiple of H is refused naming the tensor, before any launch.
#[test]
fn a_product_dimension_binds_its_unknown_factor() {
    let mut meta = gdn_meta();
    meta.sizes.push("G".into());
    meta.params[4].shape = vec!["B".into(), "T".into(), "H * G".into(), "V".into()];
    meta.params.push(ParamMeta { name: "o".into(), dtype: DType::F32, shape: vec!["B".into(), "G * H".into()], role: Role::Output });
    let mut args = good_args();
    args.tensors.insert("dv".into(), zeros(DType::Bf16, &[B, T, 2 * H, V]));
    let b = bind(&meta, &args).unwrap();
    assert_eq!(b.sizes["G"], 2);
    match b.args.last() {
        Some(BoundArg::Tensor(t)) => assert_eq!(t.shape, vec![B, 2 * H]),
        other => panic!("unexpected {other:?}"),
    }
    args.tensors.insert("dv".into(), zeros(DType::Bf16, &[B, T, 2 * H + 1, V]));
    let e = bind(&meta, &args).unwrap_err();
    assert_eq!(e.to_string(), format!("parameter `dv` dim 2 (`H * G`): {} is not a positive multiple of {H}", 2 * H + 1));
}

/// Without values, the same rule: bare dimensions, then the one unknown factor of a product
/// whose other factor is known (repeatedly); a product of two unknowns determines neither.
#[test]
fn determined_sizes_follow_the_binders_rule() {
    let dims = |ds: &[&str]| ds.iter().map(|d| crate::expr::SizeExpr::parse(d).unwrap()).collect::<Vec<_>>();
    let set = |ss: &[&str]| ss.iter().map(|s| s.to_string()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(determined_sizes(&dims(&["B", "T", "(H * G)", "H"])), set(&["B", "G", "H", "T"]));
    assert_eq!(determined_sizes(&dims(&["(G * H)", "H"])), set(&["G", "H"]), "either order");
    assert_eq!(determined_sizes(&dims(&["(B * (NP - 1))", "NP"])), set(&["B", "NP"]), "a known compound factor");
    assert_eq!(determined_sizes(&dims(&["(H * G)", "(G * S)", "H"])), set(&["G", "H", "S"]), "chains");
    assert_eq!(determined_sizes(&dims(&["(B * T)"])), set(&[]));
    assert_eq!(determined_sizes(&dims(&["(B * T)", "(2 * B)"])), set(&["B", "T"]), "a constant factor is known");
    assert_eq!(determined_sizes(&dims(&["cdiv(T, 64)"])), set(&[]), "nothing else is inverted");
}
