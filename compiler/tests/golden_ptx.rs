//! Golden PTX: every shipped example, every kernel, every target, compared byte for byte with
//! `tests/golden/ptx/<example>/<kernel>.<target>.ptx`.
//!
//! Why: a wrong lowering (two swapped fragment registers, a wrong lane quarter) changes the PTX
//! but not necessarily anything a substring test or ptxas looks at. With golden files every
//! change to generated code shows up in review as a diff and must be blessed on purpose:
//!
//! ```sh
//! TILEC_BLESS=1 cargo test -p tilec --test golden_ptx
//! ```
//!
//! The files are written by LLVM 22's NVPTX back end at the default code-generation level; a
//! different LLVM minor version may legitimately change them (then bless and say so in the commit).

use std::path::{Path, PathBuf};

use tilec::backend::Target;
use tilec::build::{build_source, BuildOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shipped examples (not the negative ones, which do not build), and GPU check programs whose
/// lowering no shipped example reaches (`frag_reduce_pieces4`: a row reduction over four column
/// pieces, whose middle pieces both continue and hand on the partials; the row plans; gathers
/// with tested and untested indices).
fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("dsl-examples"))
        .expect("dsl-examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tile"))
        .collect();
    v.sort();
    v.push(root().join("tests/gpu/frag_reduce_pieces.tile"));
    v.push(root().join("tests/gpu/row_plans.tile"));
    v.push(root().join("tests/gpu/gathers.tile"));
    v
}

/// The first line where two texts differ, for a readable failure.
fn first_difference(want: &str, got: &str) -> String {
    for (n, (a, b)) in want.lines().zip(got.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  golden: {a}\n  now:    {b}", n + 1);
        }
    }
    format!("the texts differ in length ({} vs {} lines)", want.lines().count(), got.lines().count())
}

#[test]
fn generated_ptx_matches_the_golden_files() {
    let bless = std::env::var_os("TILEC_BLESS").is_some();
    let opts = BuildOptions::ptx_only(Target::ALL.to_vec());
    let mut failures = vec![];
    let mut compared = 0;
    for path in examples() {
        let src = std::fs::read_to_string(&path).expect("example readable");
        let stem = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 file name").to_string();
        let report = build_source(&src, &path.display().to_string(), &opts).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let dir = root().join("tests/golden/ptx").join(&stem);
        // Imported kernels have their golden files under the file that defines them.
        let own = |name: &str| report.checked.module.kernels.iter().zip(&report.checked.origins).any(|(k, o)| k.name == name && o.is_none());
        let mut expected = std::collections::BTreeSet::new();
        for b in report.built.iter().filter(|b| own(&b.kernel)) {
            expected.insert(format!("{}.{}.ptx", b.kernel, b.target));
            let file = dir.join(format!("{}.{}.ptx", b.kernel, b.target));
            if bless {
                std::fs::create_dir_all(&dir).expect("create golden dir");
                std::fs::write(&file, &b.compiled.ptx).expect("write golden file");
                continue;
            }
            compared += 1;
            match std::fs::read_to_string(&file) {
                Ok(want) if want == b.compiled.ptx => {}
                Ok(want) => failures.push(format!("{}: PTX changed; {}", file.display(), first_difference(&want, &b.compiled.ptx))),
                Err(e) => failures.push(format!("{}: no golden file ({e})", file.display())),
            }
        }
        // A golden file no kernel produces any more is stale (a renamed or removed kernel).
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !expected.contains(&name) {
                if bless {
                    std::fs::remove_file(entry.path()).expect("remove stale golden file");
                } else {
                    failures.push(format!("{}: stale golden file (no kernel builds it)", entry.path().display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "generated PTX differs from the golden files (bless with TILEC_BLESS=1 if intended):\n{}", failures.join("\n"));
    if !bless {
        // Every example has at least one kernel and is built for both targets.
        assert!(compared >= 2 * examples().len(), "only {compared} kernels compared");
    }
}
