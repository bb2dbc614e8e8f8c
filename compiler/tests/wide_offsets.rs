//! 64-bit index arithmetic (issue 9, item 8): a tensor may hold more than 2³¹ elements, so the
//! flat offset `Σ position · stride` must be computed in 64 bits in the generated code (as the
//! interpreter does in `usize`). `tests/gpu/big_offset.tile` reads rows of x [65,537, 32,769]
//! whose offsets pass 2³¹; its PTX is inspected here for both targets, and
//! `scripts/h200_big_offset.py` runs it (and gemm with a [65,600, 32,768]) on the H200 with
//! exact expected values (`scripts/h200-check.sh`). The same script's pipeline at small sizes
//! is checked here on the interpreter.

use std::path::{Path, PathBuf};
use std::process::Command;

use tilec::backend::Target;
use tilec::build::{build_file, BuildOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The PTX of `tests/gpu/big_offset.tile` for `target` (no ptxas, nothing written).
fn ptx(target: Target) -> String {
    let opts = BuildOptions::ptx_only(vec![target]);
    let (_, r) = build_file(&root().join("tests/gpu/big_offset.tile"), &opts).expect("big_offset builds");
    r.built.into_iter().next().expect("one kernel").compiled.ptx
}

/// Integer multiplications of `ptx` by width: (32-bit products, 64-bit products). `mul.wide`
/// (32 × 32 → 64 bits) cannot wrap and counts as 64-bit.
fn multiplies(ptx: &str) -> (usize, usize) {
    let ops = |names: &[&str]| ptx.lines().filter(|l| names.iter().any(|n| l.trim_start().starts_with(n))).count();
    (
        ops(&["mul.lo.s32", "mul.lo.u32", "mad.lo.s32", "mad.lo.u32"]),
        ops(&["mul.lo.s64", "mul.lo.u64", "mad.lo.s64", "mad.lo.u64", "mul.wide.", "mad.wide."]),
    )
}

#[test]
fn offsets_past_two_to_the_31_are_computed_in_64_bits() {
    for target in Target::ALL {
        let ptx = ptx(target);
        let (narrow, wide) = multiplies(&ptx);
        // The program's only products are the addresses: `row · C` for x (row up to 65,536,
        // C = 32,769: past 2³¹) and the byte scaling. A 32-bit one would wrap there.
        assert_eq!(narrow, 0, "{target:?}: a 32-bit integer multiply in\n{ptx}");
        assert!(wide >= 1, "{target:?}: no 64-bit multiply for the row offset in\n{ptx}");
        // The load's address is a 64-bit register: the flat offset is not truncated on the way.
        let load = ptx.lines().find(|l| l.contains("ld.global")).expect("a global load");
        assert!(load.contains("[%rd"), "{target:?}: {load}");
    }
}

#[test]
fn the_big_offset_pipeline_is_exact_at_small_sizes_on_the_interpreter() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("wide_offsets_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = root().join("scripts/h200_big_offset.py");
    let tilec = env!("CARGO_BIN_EXE_tilec");
    for (case, file) in [("offset", "tests/gpu/big_offset.tile"), ("gemm", "dsl-examples/gemm.tile")] {
        let (input, output) = (dir.join(format!("{case}.in.safetensors")), dir.join(format!("{case}.out.safetensors")));
        let py = |args: &[&Path]| {
            let mut c = Command::new("python3");
            c.arg(&script).args(args).env("BIG_OFFSET_SMALL", "1").env("PYTHONPATH", root().join(".tools/py"));
            c.output().expect("python3 runs")
        };
        let made = py(&[Path::new("make"), Path::new(case), &input]);
        assert!(made.status.success(), "make {case}: {}", String::from_utf8_lossy(&made.stderr));
        let run = Command::new(tilec).args(["run", "--interp"]).arg(root().join(file)).arg("--inputs").arg(&input).arg("--out").arg(&output).output().unwrap();
        assert!(run.status.success(), "{case}: {}", String::from_utf8_lossy(&run.stderr));
        let checked = py(&[Path::new("check"), Path::new(case), &output]);
        let text = String::from_utf8_lossy(&checked.stdout);
        assert!(checked.status.success() && text.contains("bitwise equal"), "{case}: {text}");
        // The check bites: one changed bit in the last element (the file's last byte: its sign
        // and exponent, little-endian) is reported as exactly one differing element.
        let mut bytes = std::fs::read(&output).unwrap();
        *bytes.last_mut().unwrap() ^= 0x01;
        std::fs::write(&output, bytes).unwrap();
        let broken = py(&[Path::new("check"), Path::new(case), &output]);
        let text = String::from_utf8_lossy(&broken.stdout);
        assert!(!broken.status.success() && text.contains("FAIL") && text.contains(": 1 of "), "{case}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
