//! `tilec inputs`: random inputs with the kernel's parameter names, dtypes and shapes.

use std::process::Command;

fn tilec(args: &[&str]) -> (i32, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO_BIN_EXE_tilec")).args(args).current_dir(root).output().expect("run tilec");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tilec-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_string_lossy().into_owned()
}

#[test]
fn gemm_inputs_have_the_signature_and_are_reproducible() {
    let (f1, f2, f3) = (tmp("a.safetensors"), tmp("b.safetensors"), tmp("c.safetensors"));
    for (f, seed) in [(&f1, "7"), (&f2, "7"), (&f3, "8")] {
        let (code, err) = tilec(&["inputs", "dsl-examples/gemm.tile", "--size", "M=100", "--size", "K=50", "--size", "N=70", "--seed", seed, "--out", f]);
        assert_eq!(code, 0, "{err}");
    }
    let m = tilec_abi::st::read(std::path::Path::new(&f1)).unwrap();
    let got: Vec<(&str, tilec_abi::meta::DType, Vec<usize>)> = m.iter().map(|(n, t)| (n.as_str(), t.dtype, t.shape.clone())).collect();
    use tilec_abi::meta::DType::Bf16;
    assert_eq!(got, [("a", Bf16, vec![100, 50]), ("b", Bf16, vec![50, 70])], "outputs are not written");
    let v = m["a"].to_f64();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.1, "N(0,1): mean {mean}, var {var}");
    assert_eq!(std::fs::read(&f1).unwrap(), std::fs::read(&f2).unwrap(), "same seed, same bytes");
    assert_ne!(std::fs::read(&f1).unwrap(), std::fs::read(&f3).unwrap(), "another seed, other values");
    let (code, err) = tilec(&["run", "--interp", "dsl-examples/gemm.tile", "--inputs", &f1, "--out", &tmp("o.safetensors")]);
    assert_eq!(code, 0, "the interpreter accepts them: {err}");
}

#[test]
fn missing_and_unknown_sizes_are_named() {
    let (code, err) = tilec(&["inputs", "dsl-examples/k1_reverse_scan.tile", "--kernel", "k1_scan_scalar", "--size", "B=1", "--out", &tmp("k.safetensors")]);
    assert_eq!(code, 2);
    assert!(err.contains("--size T=<n> --size H=<n> --size V=<n>"), "{err}");
    let (code, err) = tilec(&["inputs", "dsl-examples/gemm.tile", "--size", "Q=3", "--out", &tmp("q.safetensors")]);
    assert_eq!(code, 2);
    assert!(err.contains("has no size `Q`"), "{err}");
    let (code, err) = tilec(&["inputs", "dsl-examples/k1_reverse_scan.tile", "--out", &tmp("x.safetensors")]);
    assert_eq!(code, 2);
    assert!(err.contains("choose one with --kernel"), "{err}");
}

/// `--values` fills an index table (here K#1's sequence split and first chunks) exactly; a
/// count that does not match the shape, or a name that is no input tensor, is refused.
#[test]
fn values_set_an_index_table() {
    let out = tmp("k1v.safetensors");
    let base = ["inputs", "dsl-examples/k1_reverse_scan.tile", "--kernel", "k1_scan_scalar", "--size", "B=1", "--size", "T=100", "--size", "H=2", "--size", "V=64", "--size", "NP=3"];
    let (code, err) = tilec(&[&base[..], &["--values", "cu=0,30,100", "--values", "co=0,1,3", "--out", &out]].concat());
    assert_eq!(code, 0, "{err}");
    let m = tilec_abi::st::read(std::path::Path::new(&out)).unwrap();
    assert_eq!(m["cu"].to_f64(), [0.0, 30.0, 100.0]);
    assert_eq!(m["co"].to_f64(), [0.0, 1.0, 3.0]);
    assert_eq!(m["dht"].shape, [2, 2, 128, 64], "states per (batch row, sequence): B·(NP − 1)");
    let (code, err) = tilec(&[&base[..], &["--values", "cu=0,100", "--out", &out]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("gives `cu` 2 values, but its shape [3] has 3 elements"), "{err}");
    let (code, err) = tilec(&[&base[..], &["--values", "dh=0", "--out", &out]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("has no input tensor `dh`"), "{err}");
    // Without `--size NP`, the table over the bare size NP gives it its length.
    let no_np = &base[..base.len() - 2];
    let (code, err) = tilec(&[no_np, &["--values", "cu=0,30,70,100", "--values", "co=0,1,2,3", "--out", &out]].concat());
    assert_eq!(code, 0, "{err}");
    let m = tilec_abi::st::read(std::path::Path::new(&out)).unwrap();
    assert_eq!(m["dht"].shape, [3, 2, 128, 64], "NP = 4 from cu's four values: three sequences");
}
