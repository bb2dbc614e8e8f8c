//! `tilec check` end to end, through the binary.

use std::process::Command;

fn tilec(args: &[&str]) -> (i32, String, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO_BIN_EXE_tilec")).args(args).current_dir(root).output().expect("run tilec");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn k1_prints_its_plan_and_exits_0() {
    let (code, out, err) = tilec(&["check", "dsl-examples/k1_reverse_scan.tile", "--emit", "tmem-plan"]);
    assert_eq!(code, 0, "{err}");
    // d and dvn are f32 [*, BV] with BV = 32: 32 columns each, side by side in 64.
    assert!(out.contains("kernel `k1_scan_scalar`: TMEM alloc 64 columns"), "{out}");
    assert!(out.contains("kernel `k1_scan_channel`: TMEM alloc 64 columns"), "{out}");
    assert!(out.contains("aabb"), "column map shows d and dvn side by side:\n{out}");
}

#[test]
fn plan_as_json_matches_the_metadata_schema() {
    let (code, out, err) = tilec(&["check", "dsl-examples/k1_reverse_scan.tile", "--emit", "tmem-plan-json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let tm: tilec_abi::meta::TmemMeta = serde_json::from_value(v[0]["tmem"].clone()).expect("TmemMeta");
    assert_eq!(tm.alloc_columns, 64); // 2 x BV = 2 x 32 f32 columns
    assert_eq!((tm.lifecycle.alloc, tm.lifecycle.relinquish, tm.lifecycle.dealloc), (1, 1, 1));
    assert_eq!(tm.buffers.iter().map(|b| (b.name.as_str(), b.offset)).collect::<Vec<_>>(), [("d", 0), ("dvn", 32)]);
}

#[test]
fn overflow_904_exits_1_quoting_544_and_512_at_both_buffers() {
    let (code, _, err) = tilec(&["check", "dsl-examples/negative/tmem_overflow_904.tile"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0402]"), "{err}");
    assert!(err.contains("co-live buffers need 544 columns, the hardware has 512"), "{err}");
    assert!(err.contains("15 │     let mut acc: tmem f32[128, 512]"), "points at acc:\n{err}");
    assert!(err.contains("16 │     let xt: tmem bf16[128, 64]"), "points at xt:\n{err}");
}

#[test]
fn smem_over_budget_is_rejected_by_check_with_the_breakdown() {
    // gemm.tile with BN = 256, BK = 512 (BM = 128): the buffers live together at the MMA.
    let (bm, bn, bk) = (128u32, 256u32, 512u32);
    let (acc, at, bt) = (bm * bn * 4, bm * bk * 2, bk * bn * 2);
    let limit = 227 * 1024;
    let (code, _, err) = tilec(&["check", "dsl-examples/negative/smem_overflow_gemm.tile", "--target", "sm_90a"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0405]"), "{err}");
    let need = acc + at + bt;
    assert_eq!(need, 524_288);
    assert!(err.contains(&format!("on sm_90a: {need} bytes per CTA, the limit is {limit}")), "{err}");
    for (name, bytes) in [("acc", acc), ("at", at), ("bt", bt)] {
        assert!(err.contains(&format!("`{name}`: ")) && err.contains(&format!("{bytes} bytes")), "{name} {bytes}:\n{err}");
    }
    assert!(err.contains(&format!("= {need} bytes; limit {limit} bytes per CTA on sm_90a")), "{err}");
    // sm_100a: the accumulator is in tensor memory and tcgen05 reads both tiles in place (no
    // operand staging), 128B-swizzled: the header (MMA mbarrier, TMEM slot) is 1024 bytes so
    // that they start on a swizzle period.
    let (code, _, err) = tilec(&["check", "dsl-examples/negative/smem_overflow_gemm.tile", "--target", "sm_100a"]);
    assert_eq!(code, 1, "{err}");
    let need = at + bt + 1024;
    assert!(err.contains(&format!("on sm_100a: {need} bytes per CTA")), "{need}:\n{err}");
    assert!(!err.contains("operand staging of this MMA"), "{err}");
    // The same limit `tilec build` would hit: it refuses before code generation.
    let out = std::env::temp_dir().join(format!("tilec-smem-{}", std::process::id()));
    let (code, _, err) = tilec(&["build", "dsl-examples/negative/smem_overflow_gemm.tile", "--no-ptxas", "-o", out.to_str().expect("utf-8 temp dir")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E0405]"), "{err}");
}

#[test]
fn smem_plan_lists_every_buffer_within_the_total() {
    let (code, out, err) = tilec(&["check", "dsl-examples/gemm.tile", "--emit", "smem-plan"]);
    assert_eq!(code, 0, "{err}");
    // sm_90a: the accumulator lives in wgmma registers only (zeroed there, stored from there:
    // no buffer), and the 4-stage rings of at (128x64 bf16) and bt (64x256 bf16) — the MMA
    // stays in flight into the next iteration, which needs one stage more — which wgmma reads
    // in place (no operand staging), are all the shared memory there is.
    // TMA fills both rings (128-byte swizzle: the rows of `at` and the 64-column panels of
    // `bt` are 128 bytes), so a 1024-byte header holds the rings' mbarriers and keeps every
    // stage on a 1024-byte boundary.
    let (at, bt) = (128 * 64 * 2, 64 * 256 * 2);
    let total = 1024 + 4 * (at + bt);
    assert!(out.contains(&format!("kernel gemm on sm_90a: {total} of 232448 bytes")), "{out}");
    assert!(!out[out.find("kernel gemm on sm_90a").unwrap()..].contains("`acc`"), "{out}");
    let sm90 = &out[out.find("kernel gemm on sm_90a").unwrap()..];
    assert!(sm90.contains("0..1024       1024 B  reserved: TMA ring mbarriers"), "{out}");
    assert!(sm90.contains("`at`: bf16[128, 64] in smem (128B-swizzled panels, read by the tensor core in place), a 4-stage ring (software pipeline)"), "{out}");
    assert!(sm90.contains(&format!("{} B  live", 4 * at)), "{out}");
    assert!(sm90.contains("`bt`: bf16[64, 256] in smem (128B-swizzled panels, read by the tensor core in place)"), "{out}");
    assert!(!sm90.contains("operand staging"), "{out}");
    // sm_100a: tcgen05 reads the TMA-filled tiles in place too (no staging); the MMA completes
    // before a stage is refilled, so the ring is 3 deep (no MMA in flight).
    assert!(out.contains(&format!("kernel gemm on sm_100a: {} of 232448 bytes", 1024 + 3 * (at + bt))), "{out}");
    assert!(out.contains("reserved: MMA mbarrier and TMEM address slot"), "{out}");
}

#[test]
fn deny_warnings_turns_lints_into_errors() {
    let dir = std::env::temp_dir().join(format!("tilec-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("lint.tile");
    std::fs::write(&f, "kernel k(a: bf16[N, 64], b: bf16[64, 64], y: out f32[N, 64]) grid(cdiv(N, 128)) {\n  let at: smem = load a[0..+128, :];\n  let bt: smem = load b[:, :];\n  let p: tmem = at @ bt;\n  store y[0..+128, :] = load a[0..+128, :];\n}\n").unwrap();
    let f = f.to_string_lossy().into_owned();
    let (code, _, err) = tilec(&["check", &f]);
    assert_eq!(code, 0, "warnings alone do not fail:\n{err}");
    assert!(err.contains("warning[W0501]"), "{err}");
    let (code, _, err) = tilec(&["check", &f, "-D", "warnings"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[W0501]"), "{err}");
}

#[test]
fn missing_file_exits_2() {
    let (code, _, err) = tilec(&["check", "does/not/exist.tile"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn emit_ir_is_deterministic_text() {
    let (code, a, _) = tilec(&["check", "dsl-examples/gemm.tile", "--emit", "ir"]);
    let (_, b, _) = tilec(&["check", "dsl-examples/gemm.tile", "--emit", "ir"]);
    assert_eq!(code, 0);
    assert_eq!(a, b);
    insta::assert_snapshot!("gemm_ir", a);
    // The per-target layouts follow the IR as comments (the IR reader skips them): on sm_90a a
    // 128 x 256 f32 accumulator over 256 threads is 128 floats per thread in two 64 x 256 units,
    // and the operand tiles are 4-stage rings of 128-byte-swizzled panels (a 64-column bf16
    // row is 128 bytes) that TMA fills, one tensor map per operand with a one-panel box.
    assert!(a.contains(&format!(";   var0 acc: wgmma registers: 2 unit(s) of 64 x 256 over 2 warpgroup(s), {} floats per thread; no shared-memory buffer", 128 * 256 / 256)), "{a}");
    assert!(a.contains(";   var1 at: shared memory, 128B-swizzled panels of 64 columns read by the tensor core in place; a 4-stage ring"), "{a}");
    assert!(a.contains("pipelined loop: `at`, `bt` issued 2 iteration(s) ahead into 4 stages by TMA copies"), "{a}");
    assert!(a.contains("tensor map 0: `a`, box [128, 64], swizzle 128B") && a.contains("tensor map 1: `b`, box [64, 64], swizzle 128B"), "{a}");
    assert!(a.contains("conversion: `acc` read in its fragments, stored to `c` in fragment order by i24 (no shared memory)"), "{a}");
    // ... and the whole output still reads back as IR.
    let m = tilec::ir::read::read_module(&a).unwrap_or_else(|e| panic!("--emit ir output does not read back: {e}"));
    assert_eq!(m.kernels.len(), 1);
}

#[test]
fn control_flow_from_other_languages_gets_a_hint() {
    // `if` parses as a name, so the parser stumbles on what follows: the note says what to write.
    let src = "kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(cdiv(N, 128)) threads(128) {\n    let a = load x[0..+128, :];\n    if a > 0.0 { store y[0..+128, :] = a; }\n}\n";
    let c = tilec::frontend::check_source(src, &tilec::frontend::Options::default());
    let first = c.diags.iter().next().map(|d| (d.code.as_str(), d.notes.join(" | "))).unwrap_or_default();
    assert_eq!(first.0, "E0101");
    assert!(first.1.contains("select(cond, a, b)"), "{}", c.diags.render("k.tile", src, false));
    let src = src.replace("if a > 0.0", "while a > 0.0");
    let c = tilec::frontend::check_source(&src, &tilec::frontend::Options::default());
    assert!(c.diags.iter().any(|d| d.notes.iter().any(|n| n.contains("for i in lo..hi"))), "{}", c.diags.render("k.tile", &src, false));
}

#[test]
fn thousands_of_errors_on_one_line_stay_readable() {
    // 4,000 syntax errors on one 40 KB line printed 217 MB (the line once per error): now the
    // first 100 are shown with the line trimmed around each, then a count of the rest.
    let dir = std::env::temp_dir().join(format!("tilec-many-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("many.tile");
    let body = vec!["let a = ;"; 4000].join(" ");
    std::fs::write(&f, format!("kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(1) threads(128) {{ {body} }}\n")).unwrap();
    let f = f.to_string_lossy().into_owned();
    let (code, _, err) = tilec(&["check", &f]);
    assert_eq!(code, 1);
    assert!(err.len() < 200_000, "{} bytes of diagnostics", err.len());
    assert_eq!(err.matches("error[E0101]").count(), 100);
    assert!(err.contains("3900 more diagnostics not shown"), "{}", &err[err.len().saturating_sub(300)..]);
    assert!(err.contains("error: ") && err.contains("4000 errors"));
    let (_, _, all) = tilec(&["check", &f, "--error-limit", "0"]);
    assert_eq!(all.matches("error[E0101]").count(), 4000);
}

#[test]
fn misspelled_names_and_builtins_get_a_suggestion() {
    let src = "kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(cdiv(N, 128)) threads(128) {\n    let row0 = program_id(0) * 128;\n    let a = load x[rwo0..+128, :];\n    store y[row0..+128, :] = roww_max(a) + a;\n}\n";
    let c = tilec::frontend::check_source(src, &tilec::frontend::Options::default());
    let notes: Vec<String> = c.diags.iter().flat_map(|d| d.notes.clone()).collect();
    assert!(notes.iter().any(|n| n == "help: did you mean `row0`?"), "{}", c.diags.render("k.tile", src, false));
    assert!(notes.iter().any(|n| n == "help: did you mean `row_max`?"), "{}", c.diags.render("k.tile", src, false));
    // Nothing close: no suggestion.
    let far = src.replace("rwo0", "zzzzzz");
    let c = tilec::frontend::check_source(&far, &tilec::frontend::Options::default());
    assert!(!c.diags.iter().any(|d| d.message.contains("zzzzzz") && d.notes.iter().any(|n| n.contains("did you mean"))));
}

#[test]
fn help_lists_every_environment_variable_tilec_reads() {
    let (code, out, _) = tilec(&["--help"]);
    assert_eq!(code, 0);
    // Every variable the compiler's sources read (besides HOME, PATH, XDG_CACHE_HOME).
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut read = std::collections::BTreeSet::new();
    let mut stack = vec![src];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                for part in text.split("env::var").skip(1) {
                    if let Some(name) = part.trim_start_matches("_os").strip_prefix("(\"").and_then(|r| r.split('"').next()) {
                        if name.starts_with("TILEC_") {
                            read.insert(name.to_string());
                        }
                    }
                }
            }
        }
    }
    assert!(read.len() >= 7, "{read:?}");
    for name in &read {
        assert!(out.contains(name.as_str()), "`tilec --help` does not name {name}:\n{out}");
    }
}
