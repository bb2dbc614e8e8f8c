//! The corpus of minimized past failures (`tests/fuzz-corpus/`: inputs that once panicked,
//! aborted, hung or produced an internal compiler error, issue 13), replayed exactly as the fuzz
//! bench runs an input: through the front end (and the interpreter when it checks), the metadata
//! loader, the safetensors reader and the size-expression parser. Each must be handled: no
//! panic, no E0900, and within 2 s of CPU time.

mod fuzz_common;

use std::path::PathBuf;
use std::time::Duration;

use fuzz_common::{exercise_all, thread_cpu_time, Rng};
use tilec_abi::rng::NormalRng;

#[test]
fn every_past_failure_is_handled() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz-corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 15, "the corpus is missing: {} files in {}", files.len(), dir.display());
    let mut rng = Rng(NormalRng::new(1));
    let mut problems = vec![];
    for f in &files {
        let input = std::fs::read(f).unwrap();
        let c0 = thread_cpu_time();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exercise_all(&input, &mut rng)));
        let cpu = thread_cpu_time().saturating_sub(c0);
        match r {
            Err(_) => problems.push(format!("{}: panics", f.display())),
            Ok(o) if o.internal => problems.push(format!("{}: internal compiler error", f.display())),
            Ok(_) if cpu > Duration::from_secs(2) => problems.push(format!("{}: {:.1} s of CPU", f.display(), cpu.as_secs_f64())),
            Ok(_) => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The loaders refuse each hostile file of the corpus with an error (not merely without a
/// panic): what each one once did is in its name.
#[test]
fn hostile_loader_inputs_are_refused() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz-corpus");
    for name in ["meta_grid_10000_parens.json", "meta_grid_30000_unary_minus.json"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let refused = match tilec_abi::meta::KernelMeta::from_json_str(&text) {
            Err(_) => true,
            Ok(m) => m.validate().is_err(),
        };
        assert!(refused, "{name} was accepted");
    }
    // An output of shape [1000, 2^61] f32 is well-formed metadata, but its byte count wraps
    // u64: the binder refuses it before any allocation (it once bound a 1-byte buffer).
    let text = std::fs::read_to_string(dir.join("meta_output_bytes_wrap.json")).unwrap();
    let meta = tilec_abi::meta::KernelMeta::from_json_str(&text).unwrap();
    let zeros = |r, c| tilec_abi::tensor::HostTensor::zeros(tilec_abi::meta::DType::Bf16, vec![r, c]).unwrap();
    let args = tilec_abi::bind::Args { tensors: [("a".to_string(), zeros(4, 4)), ("b".to_string(), zeros(4, 4))].into(), ..Default::default() };
    let err = tilec_abi::bind::bind(&meta, &args).err().expect("the wrapping output was bound");
    assert!(err.to_string().contains("overflow") || err.to_string().contains("TiB"), "{err}");
    for name in ["st_huge_shape_tiny_data.safetensors", "st_overlapping_offsets.safetensors", "st_header_length_wraps.safetensors"] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert!(tilec_abi::st::from_bytes(&bytes).is_err(), "{name} was accepted");
    }
}
