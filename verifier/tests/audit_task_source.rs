//! `verifier/python/task_source.py` (no PyTorch needed): the module-level values a task derives
//! from its size constants follow them when CMP-03 changes a constant — `groups = in_channels`
//! of a depthwise convolution (CUDA-L1 row 84, L1-T85, was rejected at CMP-03 ×2 because its
//! `groups` stayed 3 while `in_channels` became 6).

use std::process::Command;

const SCRIPT: &str = r#"
import json, task_source
src = '''
import torch
batch_size = 16
in_channels = 3
kernel_size = 3
groups = in_channels
out_channels = in_channels * 2
label: int = out_channels + 1
broken = undefined_name + in_channels
unrelated = kernel_size * 2
def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
'''
ns = {"batch_size": 16, "in_channels": 3, "kernel_size": 3, "groups": 3, "out_channels": 6, "label": 7, "unrelated": 6}
print(json.dumps([
    task_source.derived_values(src, ns, {"in_channels": 6}),
    task_source.derived_values(src, ns, {"in_channels": 6, "groups": 2}),
    task_source.derived_values(src, ns, {"batch_size": 32}),
    task_source.derived_values("x = (", ns, {"in_channels": 6}),
], sort_keys=True))
"#;

#[test]
fn values_derived_from_a_size_constant_follow_it() {
    let out = Command::new("python3").arg("-c").arg(SCRIPT).env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/python")).output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = String::from_utf8_lossy(&out.stdout);
    // groups and out_channels follow in_channels, label follows out_channels (a chain); a
    // failing expression and an unrelated value are left alone; a value also given is not
    // re-derived; nothing reads batch_size; a source that does not parse derives nothing.
    assert_eq!(got.trim(), r#"[{"groups": 6, "label": 13, "out_channels": 12}, {"label": 13, "out_channels": 12}, {}, {}]"#);
}
