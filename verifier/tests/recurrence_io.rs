//! Batched / varlen driver, safetensors I/O, dtype refusal and the `ref` subcommand.

use std::collections::HashMap;

use kverify::cli::reference::{run as ref_run, MethodArg, ModelArg, RefArgs};
use kverify::recurrence::batch::{run, Method, Results};
use kverify::recurrence::family::Model;
use kverify::recurrence::io::{generate, read_problem, write, Dims};
use kverify::recurrence::RecurrenceError;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kverify-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn varlen_equals_batch_of_equal_sequences() {
    // [1, 2L, H, ·] with cu_seqlens [0, L, 2L] holds the same bytes as [2, L, H, ·].
    let l = 70;
    let d = Dims { batch: 1, heads: 2, seq_len: 2 * l, dk: 8, dv: 6, value_heads: None };
    let var = generate(Model::Kda, d, 5, None, Some(vec![0, l, 2 * l])).unwrap();
    let mut bat = var.clone();
    bat.cu_seqlens = None;
    for t in [&mut bat.q, &mut bat.k, &mut bat.v, &mut bat.d_o, bat.g.as_mut().unwrap()] {
        t.shape = vec![2, l, 2, t.shape[3]];
    }
    bat.beta.as_mut().unwrap().shape = vec![2, l, 2];
    for method in [Method::Serial, Method::Chunk] {
        let a = run(&var, method, 64).unwrap();
        let b = run(&bat, method, 64).unwrap();
        assert_eq!(a.o.data, b.o.data);
        assert_eq!(a.dk.data, b.dk.data);
        assert_eq!(a.dg.as_ref().unwrap().data, b.dg.as_ref().unwrap().data);
        assert_eq!(a.dbeta.as_ref().unwrap().data, b.dbeta.as_ref().unwrap().data);
        assert_eq!(a.st.data, b.st.data);
        assert_eq!(a.ds0.data, b.ds0.data);
    }
    // The state really restarts: one unsplit sequence of 2L tokens gives another output.
    let mut one = var.clone();
    one.cu_seqlens = None;
    one.s0 = kverify::recurrence::Tensor::zeros(&[1, 2, 8, 6]);
    one.dst = kverify::recurrence::Tensor::zeros(&[1, 2, 8, 6]);
    let c = run(&one, Method::Serial, 64).unwrap();
    assert_ne!(c.o.data, run(&var, Method::Serial, 64).unwrap().o.data);
}

#[test]
fn bad_cu_seqlens_is_an_error() {
    let d = Dims { batch: 1, heads: 1, seq_len: 10, dk: 4, dv: 4, value_heads: None };
    assert!(matches!(generate(Model::Gdn, d, 1, None, Some(vec![0, 5, 9])), Err(RecurrenceError::CuSeqlens(_)) | Err(RecurrenceError::Shape { .. })));
    assert!(matches!(generate(Model::Gdn, d, 1, None, Some(vec![0, 5, 5, 10])), Err(RecurrenceError::CuSeqlens(_)) | Err(RecurrenceError::Shape { .. })));
}

#[test]
fn write_then_read_round_trips() {
    let p = generate(Model::General, Dims { batch: 2, heads: 1, seq_len: 9, dk: 4, dv: 3, value_heads: None }, 9, Some(0.3), None).unwrap();
    let r: Results = run(&p, Method::Chunk, 16).unwrap();
    let path = tmp("roundtrip.safetensors");
    write(&path, &p, &r, HashMap::from([("scale".to_string(), "0.3".to_string())])).unwrap();
    let back = read_problem(&path, Model::General, None).unwrap();
    assert_eq!(back.q, p.q);
    assert_eq!(back.b, p.b);
    assert_eq!(back.w, p.w);
    assert_eq!(back.dst, p.dst);
    assert_eq!(back.scale, 0.3);
    let again = run(&back, Method::Chunk, 16).unwrap();
    assert_eq!(again.dw.unwrap().data, r.dw.unwrap().data);
}

#[test]
fn an_empty_v_cannot_size_a_huge_zero_state() {
    // v of shape [0, 0, 0, 2^38] holds no data, yet its last extent sized the zero-filled s0 and
    // dst: a few hundred bytes of file asked for terabytes. Refused before allocating.
    let path = tmp("empty-v.safetensors");
    let one: Vec<u8> = 0.5f64.to_le_bytes().to_vec();
    let views = vec![
        ("q".to_string(), TensorView::new(Dtype::F64, vec![1, 1, 1, 1], &one).unwrap()),
        ("k".to_string(), TensorView::new(Dtype::F64, vec![1, 1, 1, 1], &one).unwrap()),
        ("v".to_string(), TensorView::new(Dtype::F64, vec![0, 0, 0, 1 << 38], &[]).unwrap()),
        ("do".to_string(), TensorView::new(Dtype::F64, vec![0, 0, 0, 1 << 38], &[]).unwrap()),
    ];
    safetensors::serialize_to_file(views, &None, &path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1024);
    match read_problem(&path, Model::La, None) {
        Err(RecurrenceError::Invalid(m)) => assert!(m.contains("would hold") && m.contains("the limit is"), "{m}"),
        other => panic!("expected a size error, got {other:?}"),
    }
}

#[test]
fn non_f64_input_is_refused() {
    let path = tmp("f32.safetensors");
    let (b, t, h, k) = (1usize, 3usize, 1usize, 4usize);
    let f32s: Vec<u8> = (0..b * t * h * k).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let f64s: Vec<u8> = (0..b * t * h * k).flat_map(|i| (i as f64 * 0.1).to_le_bytes()).collect();
    let views = vec![
        ("q".to_string(), TensorView::new(Dtype::F32, vec![b, t, h, k], &f32s).unwrap()),
        ("k".to_string(), TensorView::new(Dtype::F64, vec![b, t, h, k], &f64s).unwrap()),
        ("v".to_string(), TensorView::new(Dtype::F64, vec![b, t, h, k], &f64s).unwrap()),
        ("do".to_string(), TensorView::new(Dtype::F64, vec![b, t, h, k], &f64s).unwrap()),
    ];
    safetensors::serialize_to_file(views, &None, &path).unwrap();
    let err = read_problem(&path, Model::La, None).unwrap_err();
    assert!(matches!(err, RecurrenceError::Dtype { ref name, .. } if name == "q"), "{err}");
    assert!(err.to_string().contains("never upcasts"));
}

#[test]
fn ref_subcommand_writes_fla_names() {
    let out = tmp("gdn.safetensors");
    let args = RefArgs {
        value_heads: None,
        model: ModelArg::Gdn,
        batch: Some(2),
        heads: Some(3),
        seq_len: Some(40),
        dk: Some(8),
        dv: Some(4),
        chunk: 16,
        scale: None,
        seed: Some(1),
        inputs: None,
        cu_seqlens: None,
        method: MethodArg::Chunk,
        out: out.clone(),
    };
    ref_run(&args).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let shape = |n: &str| st.tensor(n).unwrap().shape().to_vec();
    assert_eq!(shape("q"), vec![2, 40, 3, 8]);
    assert_eq!(shape("g"), vec![2, 40, 3]);
    assert_eq!(shape("beta"), vec![2, 40, 3]);
    assert_eq!(shape("s0"), vec![2, 3, 8, 4]);
    for n in ["o", "do", "dv"] {
        assert_eq!(shape(n), vec![2, 40, 3, 4], "{n}");
    }
    for n in ["st", "dst", "ds0"] {
        assert_eq!(shape(n), vec![2, 3, 8, 4], "{n}");
    }
    assert_eq!(shape("dg"), vec![2, 40, 3]);
    assert_eq!(shape("dbeta"), vec![2, 40, 3]);
    assert!(st.tensor("b").is_err() && st.tensor("db").is_err());
    for (n, v) in st.tensors() {
        assert_eq!(v.dtype(), Dtype::F64, "{n}");
    }
    // Re-running from the written inputs with the serial method reproduces the results.
    let out2 = tmp("gdn2.safetensors");
    let args2 = RefArgs { seed: None, inputs: Some(out.clone()), method: MethodArg::Serial, out: out2.clone(), ..args };
    ref_run(&args2).unwrap();
    let p1 = read_problem(&out, Model::Gdn, None).unwrap();
    let p2 = read_problem(&out2, Model::Gdn, None).unwrap();
    assert_eq!(p1.q, p2.q);
    let b2 = std::fs::read(&out2).unwrap();
    let s2 = SafeTensors::deserialize(&b2).unwrap();
    let f = |s: &SafeTensors, n: &str| -> Vec<f64> { s.tensor(n).unwrap().data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect() };
    for n in ["o", "dq", "dk", "dv", "dg", "dbeta", "ds0"] {
        let (a, b) = (f(&st, n), f(&s2, n));
        let den = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let num = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(num / den < 1e-12, "{n}: chunk file vs serial file {:e}", num / den);
    }
}

#[test]
fn seed_without_sizes_is_an_error() {
    let args = RefArgs {
        value_heads: None,
        model: ModelArg::La,
        batch: None,
        heads: Some(1),
        seq_len: Some(4),
        dk: Some(4),
        dv: Some(4),
        chunk: 64,
        scale: None,
        seed: Some(1),
        inputs: None,
        cu_seqlens: None,
        method: MethodArg::Serial,
        out: tmp("never.safetensors"),
    };
    let err = ref_run(&args).unwrap_err();
    assert!(err.to_string().contains("--batch"), "{err}");
}

#[test]
fn ref_refuses_absurd_sizes_instead_of_aborting() {
    // These aborted the process (allocation failure) or panicked (usize overflow).
    let base = RefArgs {
        value_heads: None,
        model: ModelArg::Gdn,
        batch: Some(100_000),
        heads: Some(1000),
        seq_len: Some(100_000),
        dk: Some(128),
        dv: Some(128),
        chunk: 64,
        scale: None,
        seed: Some(1),
        inputs: None,
        cu_seqlens: None,
        method: MethodArg::Chunk,
        out: tmp("absurd.safetensors"),
    };
    let huge_state = RefArgs { batch: Some(1), heads: Some(1), seq_len: Some(1), dk: Some(100_000), dv: Some(100_000), ..base.clone() };
    let overflow = RefArgs { batch: Some(usize::MAX), heads: Some(2), seq_len: Some(2), dk: Some(2), dv: Some(2), ..base.clone() };
    // Five sizes of 2^32 multiply past 2^128: the count saturates instead of wrapping to a small
    // number (the review's `--batch/--heads/--seq-len/--dk/--dv 4294967296`).
    let wraps = RefArgs { batch: Some(1 << 32), heads: Some(1 << 32), seq_len: Some(1 << 32), dk: Some(1 << 32), dv: Some(1 << 32), ..base.clone() };
    for args in [base, huge_state, overflow, wraps] {
        match ref_run(&args) {
            Err(RecurrenceError::Invalid(m)) => assert!(m.contains("problem too large"), "{m}"),
            other => panic!("expected a size error, got {other:?}"),
        }
        assert!(!args.out.exists());
    }
    // Serial keeps every token's state: a problem fine for chunk can be too large for serial.
    let long = RefArgs { batch: Some(1), heads: Some(1), seq_len: Some(40_000), dk: Some(128), dv: Some(128), method: MethodArg::Serial, ..overflow_free() };
    assert!(matches!(ref_run(&long), Err(RecurrenceError::Invalid(m)) if m.contains("problem too large")));
    assert!(kverify::cli::reference::check_budget(1, 40_000, 1, 128, 128, Method::Chunk, 64).is_ok());
}

fn overflow_free() -> RefArgs {
    RefArgs {
        value_heads: None,
        model: ModelArg::Gdn,
        batch: Some(1),
        heads: Some(1),
        seq_len: Some(4),
        dk: Some(4),
        dv: Some(4),
        chunk: 16,
        scale: None,
        seed: Some(1),
        inputs: None,
        cu_seqlens: None,
        method: MethodArg::Chunk,
        out: tmp("small.safetensors"),
    }
}

/// GVA (HV = 2H): every value head reads its group's key head, so the problem equals the plain
/// one with q and k repeated per value head — outputs, dv, dg, dβ and ds0 bitwise — and dq, dk
/// are that problem's summed over each group of two heads (in head order).
#[test]
fn gva_equals_repeated_key_heads_with_summed_gradients() {
    use kverify::recurrence::Tensor;
    let (b, t, h, hv, k, v) = (1, 40, 2, 4, 8, 6);
    for model in [Model::Gdn, Model::Kda, Model::La] {
        let gva = generate(model, Dims { batch: b, heads: h, seq_len: t, dk: k, dv: v, value_heads: Some(hv) }, 11, None, None).unwrap();
        assert_eq!(gva.v.shape, [b, t, hv, v]);
        let repeat = |x: &Tensor| {
            let mut y = Tensor::zeros(&[b, t, hv, k]);
            for bt in 0..b * t {
                for j in 0..hv {
                    let src = (bt * h + j / (hv / h)) * k;
                    y.data[(bt * hv + j) * k..][..k].copy_from_slice(&x.data[src..src + k]);
                }
            }
            y
        };
        let mut plain = gva.clone();
        plain.q = repeat(&gva.q);
        plain.k = repeat(&gva.k);
        for method in [Method::Serial, Method::Chunk] {
            let a = run(&gva, method, 16).unwrap();
            let p = run(&plain, method, 16).unwrap();
            assert_eq!(a.o.data, p.o.data, "{model:?}");
            assert_eq!(a.dv.data, p.dv.data);
            assert_eq!(a.ds0.data, p.ds0.data);
            assert_eq!(a.dg.as_ref().map(|x| &x.data), p.dg.as_ref().map(|x| &x.data));
            assert_eq!(a.dbeta.as_ref().map(|x| &x.data), p.dbeta.as_ref().map(|x| &x.data));
            for (got, full) in [(&a.dq, &p.dq), (&a.dk, &p.dk)] {
                assert_eq!(got.shape, [b, t, h, k]);
                for bt in 0..b * t {
                    for i in 0..h {
                        for c in 0..k {
                            let want = full.data[(bt * hv + 2 * i) * k + c] + full.data[(bt * hv + 2 * i + 1) * k + c];
                            assert_eq!(got.data[(bt * h + i) * k + c], want);
                        }
                    }
                }
            }
        }
    }
    // HV not a multiple of H is refused.
    let e = generate(Model::Gdn, Dims { batch: 1, heads: 2, seq_len: 4, dk: 4, dv: 4, value_heads: Some(3) }, 1, None, None).unwrap_err();
    assert!(e.to_string().contains("multiple"), "{e}");
}
