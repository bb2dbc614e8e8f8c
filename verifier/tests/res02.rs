//! RES-02 on hand-written tilec metadata: a #904-class artifact (544 TMEM columns requested,
//! state-spaces/mamba#904) fails, a correct one passes, and each budget is checked on its own.

use kverify::gates::res02_compile::{check, check_meta, check_path, load_meta};
use kverify::gates::Status;
use std::path::Path;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

#[test]
fn tmem_904_class_artifact_fails() {
    let g = check_path(&fixture("tmem_904_class.meta.json"));
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("544 TMEM columns, hardware limit 512"), "{}", g.detail);
}

#[test]
fn correct_artifact_passes() {
    let g = check_path(&fixture("tmem_ok.meta.json"));
    assert_eq!(g.status, Status::Pass, "{}", g.detail);
}

#[test]
fn each_budget_is_enforced() {
    let ok = load_meta(&fixture("tmem_ok.meta.json")).expect("fixture");
    assert!(check_meta(&ok).is_empty());
    let budgets = |m: &tilec_abi::meta::KernelMeta| check_meta(m).into_iter().map(|v| v.budget).collect::<Vec<_>>();

    let mut m = ok.clone();
    m.tmem.as_mut().expect("tmem").alloc_columns = 96; // not a power of two
    assert!(budgets(&m).contains(&"tmem"));

    let mut m = ok.clone();
    m.tmem.as_mut().expect("tmem").lifecycle.dealloc = 0;
    assert_eq!(budgets(&m), vec!["lifecycle"]);

    let mut m = ok.clone();
    m.tmem.as_mut().expect("tmem").lifecycle.alloc = 2;
    assert_eq!(budgets(&m), vec!["lifecycle"]);

    let mut m = ok.clone();
    m.launch.dynamic_smem_bytes = 232_448 - m.smem_bytes + 1;
    assert_eq!(budgets(&m), vec!["smem"]);
    m.launch.dynamic_smem_bytes -= 1; // exactly at the limit is legal
    assert!(budgets(&m).is_empty());

    let mut m = ok.clone();
    m.ptxas.as_mut().expect("ptxas").registers = 256;
    assert_eq!(budgets(&m), vec!["registers"]);

    let mut m = ok.clone();
    m.ptxas.as_mut().expect("ptxas").spill_store_bytes = 8;
    assert_eq!(budgets(&m), vec!["spill"]);
    m.contract.no_spill = false; // spills allowed by the contract
    assert!(budgets(&m).is_empty());

    let mut m = ok.clone();
    // dq and dv share columns 0..128 but are never live together: legal. Make them overlap in time.
    m.tmem.as_mut().expect("tmem").buffers[2].live = [4, 9];
    assert_eq!(budgets(&m), vec!["tmem"]);

    // A buffer offset near 2^32 must not wrap into the allocation (u32 overflow once passed).
    let mut m = ok.clone();
    let t = m.tmem.as_mut().expect("tmem");
    t.buffers[0].offset = u32::MAX;
    t.buffers[0].columns = 2;
    assert!(budgets(&m).contains(&"tmem"), "{:?}", check_meta(&m));

    let mut m = ok;
    m.tmem = None; // a kernel without TMEM has no TMEM budget to break
    assert_eq!(check(&m).status, Status::Pass);
}

#[test]
fn unreadable_or_wrong_version_metadata_is_reported() {
    let g = check_path(Path::new("/nonexistent/x.meta.json"));
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("cannot read"));
    let dir = std::env::temp_dir().join(format!("kverify-res02-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let text = std::fs::read_to_string(fixture("tmem_ok.meta.json")).expect("fixture").replace("\"schema_version\": 1", "\"schema_version\": 99");
    std::fs::write(dir.join("v.meta.json"), text).expect("write");
    let g = check_path(&dir.join("v.meta.json"));
    assert!(g.detail.contains("schema_version 99"), "{}", g.detail);
}

#[test]
fn metadata_the_runtime_refuses_is_refused_here_too() {
    // RES-02 reads metadata with the runtime's loader: a v1 file with v2's tensor maps, or a
    // box outside 1..=256, is an error, not a pass.
    let dir = std::env::temp_dir().join(format!("kverify-res02-v2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let mut m = load_meta(&fixture("tmem_ok.meta.json")).expect("fixture");
    let tensor = m.params.iter().find(|p| !p.shape.is_empty()).expect("a tensor").clone();
    let rank = tensor.shape.len();
    m.tensor_maps = vec![tilec_abi::meta::TensorMapMeta { tensor: tensor.name.clone(), box_dims: vec![0; rank], element_strides: vec![1; rank], swizzle: "none".into(), oob_fill: "zero".into() }];
    m.schema_version = 2;
    std::fs::write(dir.join("bad_box.meta.json"), m.to_json_string().expect("json")).expect("write");
    let g = check_path(&dir.join("bad_box.meta.json"));
    assert_eq!(g.status, Status::Fail);
    assert!(g.detail.contains("1..=256"), "{}", g.detail);
    m.tensor_maps.clear();
    let text = m.to_json_string().expect("json").replace("\"schema_version\": 2", "\"schema_version\": 3").replace("\"kernel\":", "\"brand_new\": 1, \"kernel\":");
    std::fs::write(dir.join("v3.meta.json"), text).expect("write");
    let g = check_path(&dir.join("v3.meta.json"));
    // The version is judged before the fields it may add.
    assert!(g.detail.contains("schema_version 3"), "{}", g.detail);
}
