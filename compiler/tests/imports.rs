//! `import`: one check per file of the graph — diamonds in any order, lattices in linear time,
//! deep chains refused with E0206 instead of overflowing the stack.

use std::path::Path;

use tilec::frontend::{check_file, Options};

const COPY: &str = "kernel copy(x: f32[N], y: out f32[N]) grid(cdiv(N, 128)) threads(128) { let i0 = program_id(0) * 128; store y[i0..+128] = load x[i0..+128]; }\n";

fn kernel(name: &str) -> String {
    COPY.replace("copy", name)
}

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tilec-imports-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(d: &Path, name: &str, text: &str) {
    std::fs::write(d.join(name), text).unwrap();
}

#[test]
fn a_diamond_is_accepted_in_any_order_and_builds_each_kernel_once() {
    let d = dir("diamond");
    write(&d, "d.tile", COPY);
    write(&d, "b.tile", &format!("import \"d.tile\";\n{}", kernel("kb")));
    write(&d, "c.tile", &format!("import \"d.tile\";\n{}", kernel("kc")));
    write(&d, "a.tile", "import \"b.tile\";\nimport \"c.tile\";\noperator oa(x: f32[N], y: out f32[N]) { let t: f32[N]; copy(x, t); kc(t, y); }\n");
    write(&d, "a2.tile", "import \"d.tile\";\nimport \"b.tile\";\noperator oa(x: f32[N], y: out f32[N]) { let t: f32[N]; copy(x, t); kb(t, y); }\n");
    for f in ["a.tile", "a2.tile"] {
        let (src, c) = check_file(&d.join(f), &Options::default()).unwrap();
        assert!(c.ok(), "{f}:\n{}", c.diags.render(f, &src, false));
        let mut names: Vec<&str> = c.module.kernels.iter().map(|k| k.name.as_str()).collect();
        names.sort();
        let want: &[&str] = if f == "a.tile" { &["copy", "kb", "kc"] } else { &["copy", "kb"] };
        assert_eq!(names, want, "{f}: each kernel once");
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_lattice_is_checked_in_linear_time() {
    let d = dir("lattice");
    // 2^30 paths through 60 files: re-checking per path would never finish.
    for i in 0..30 {
        let text = format!("import \"l{}_0.tile\";\nimport \"l{}_1.tile\";\n", i + 1, i + 1);
        write(&d, &format!("l{i}_0.tile"), &text);
        write(&d, &format!("l{i}_1.tile"), &text);
    }
    write(&d, "l30_0.tile", COPY);
    write(&d, "l30_1.tile", &kernel("other"));
    let t0 = std::time::Instant::now();
    let (_, c) = check_file(&d.join("l0_0.tile"), &Options::default()).unwrap();
    assert!(c.ok());
    assert_eq!(c.module.kernels.len(), 2);
    assert!(t0.elapsed().as_secs_f64() < 5.0, "{:?}", t0.elapsed());
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_chain_deeper_than_the_limit_is_refused() {
    let d = dir("chain");
    let n = tilec::imports::MAX_IMPORT_DEPTH + 5;
    for i in 0..n {
        write(&d, &format!("c{i}.tile"), &format!("import \"c{}.tile\";\n", i + 1));
    }
    write(&d, &format!("c{n}.tile"), COPY);
    let (_, c) = check_file(&d.join("c0.tile"), &Options::default()).unwrap();
    assert!(!c.ok());
    let d0 = c.diags.iter().next().unwrap();
    assert_eq!(d0.code.as_str(), "E0206");
    std::fs::remove_dir_all(&d).ok();
}
