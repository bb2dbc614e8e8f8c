//! `python/tilec_io.py` (NumPy + ml_dtypes) reads and writes the same safetensors bytes as the
//! Rust tools, bf16 included: a file the Rust writer made is read in Python, and a file Python
//! wrote is read back here, bit for bit. Needs python3 with NumPy and ml_dtypes (scripts/setup.sh
//! installs them into .tools/py; CI runs it), and fails, not skips, without them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn bf16_files_round_trip_between_rust_and_python() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("python_io_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Values chosen to exercise bf16 exactly: ±0, a subnormal, ±inf, NaN, a tie-free mantissa.
    let vals = [0.0f32, -0.0, 1.0, -2.5, 3.0e38, f32::INFINITY, f32::NEG_INFINITY, 9.18355e-41, 1.0078125, f32::NAN];
    let bf = HostTensor::from_f32(DType::Bf16, vec![2, 5], &vals).unwrap();
    let n = HostTensor::from_f64(DType::I32, vec![], &[7.0]).unwrap();
    let from_rust = dir.join("rust.safetensors");
    tilec_abi::st::write(&from_rust, &BTreeMap::from([("x".to_string(), bf.clone()), ("n".to_string(), n)])).unwrap();
    let from_python = dir.join("python.safetensors");
    let script = format!(
        "import numpy as np, tilec_io\n\
         t = tilec_io.read(r'{}')\n\
         x = t['x']; assert x.dtype == tilec_io.bfloat16 and x.shape == (2, 5), (x.dtype, x.shape)\n\
         assert int(t['n']) == 7 and t['n'].shape == ()\n\
         f = x.astype(np.float32)\n\
         tilec_io.write(r'{}', {{'x': x, 'xf': f, 'y': (f * 2).astype(tilec_io.bfloat16)}}, {{'who': 'python'}})\n",
        from_rust.display(),
        from_python.display()
    );
    let pythonpath = format!("{}:{}", root().join("python").display(), root().join(".tools/py").display());
    let out = Command::new("python3").arg("-c").arg(&script).env("PYTHONPATH", pythonpath).output().expect("python3 runs");
    assert!(out.status.success(), "python side failed (needs numpy and ml_dtypes: scripts/setup.sh):\n{}", String::from_utf8_lossy(&out.stderr));
    let back = tilec_abi::st::read(&from_python).expect("the Rust reader takes Python's file");
    assert_eq!(back["x"].dtype, DType::Bf16);
    assert_eq!(back["x"].bytes, bf.bytes, "bf16 bytes must survive unchanged");
    let xf = back["xf"].to_f32();
    let want = bf.to_f32();
    for (g, w) in xf.iter().zip(&want) {
        assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{g} vs {w}");
    }
    // 2x is exact in bf16 except where it overflows to inf.
    let y = back["y"].to_f32();
    for (g, w) in y.iter().zip(&want) {
        let w2 = w * 2.0;
        assert!(g.to_bits() == w2.to_bits() || (g.is_nan() && w2.is_nan()) || (w2.is_infinite() && g.is_infinite()), "{g} vs {w2}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
