//! `kverify audit` end to end against the PyTorch-free stand-in worker
//! (`tests/fixtures/audit/fake_worker.py`): every outcome recorded and the audit going on past
//! crashes, hangs, garbage and escaping children; kill and resume; shards merging.

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use common::audit::{alive, fake_worker, kverify, records, row, scratch, write_corpus, REF};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn every_outcome_is_recorded_and_the_audit_goes_on() {
    let dir = scratch("outcomes");
    let pidfile = dir.join("pids");
    let rows = vec![
        row(1, None, true),                                                                                   // clean
        row(2, Some(json!({"run": {"CMP-01": {"seeds": [{"seed": 1, "err": 1e-3, "nonfinite_where_ref_finite": 0, "shape_ok": true}]}}})), true), // violation
        row(3, Some(json!({"run": {"EXC-01": {"mismatches": 5, "total": 100, "swallowed": 5}}})), true),     // broken, KB pass
        row(4, Some(json!({"crash": "RES-01"})), true),                                                       // broken (SIGSEGV)
        row(5, Some(json!({"hang": "ORD-02"})), true),                                                        // broken (timeout)
        row(6, Some(json!({"garbage": "EXC-01"})), true),                                                     // broken (protocol)
        row(7, Some(json!({"fork": "KB", "pidfile": pidfile.display().to_string()})), true),                  // KB error, escapee killed
        row(8, Some(json!({"env": "Torch not compiled with CUDA enabled"})), true),                           // skipped
        row(9, Some(json!({"build_error": "SyntaxError: bad"})), false),                                       // broken, not accepted
        row(10, Some(json!({"run": {"KB": {"trials": [{"shape_ok": true, "allclose": false}]}}})), true),     // KB fail, clean
        row(11, Some(json!({"longline": "CMP-01"})), true),                                                   // broken (line limit)
        json!({"level_id": 1, "task_id": 12, "ref_code": format!("#FAKE {}\n{REF}", json!({"ref_raise": "boom"})), "custom_code": "class ModelNew: pass\n", "score_default": 1.0}),
        json!({"level_id": 1, "task_id": 13, "ref_code": REF, "custom_code": "", "score_default": null}),    // no ModelNew: not selected
    ];
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--time-limit", "3", "--jobs", "2", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = records(&out);
    assert_eq!(r.len(), 12);
    let by = |t: i64| r.iter().find(|x| x["task"] == t).cloned().unwrap_or(Value::Null);
    let verdicts: Vec<Value> = (1..=12).map(|t| by(t)["verdict"].clone()).collect();
    assert_eq!(verdicts, vec![json!("clean"), json!("violation"), json!("broken"), json!("broken"), json!("broken"), json!("broken"), json!("broken"), Value::Null, json!("broken"), json!("clean"), json!("broken"), Value::Null]);
    assert!(by(4)["gates"]["RES-01"]["detail"].as_str().unwrap_or("").contains("SIGSEGV"), "{}", by(4));
    assert!(by(5)["gates"]["ORD-02"]["detail"].as_str().unwrap_or("").contains("timed out"), "{}", by(5));
    assert_eq!(by(5)["gates"]["EXC-01"]["status"], "pass", "the audit goes on in a fresh worker after a hang");
    assert!(by(6)["gates"]["EXC-01"]["detail"].as_str().unwrap_or("").contains("not JSON"), "{}", by(6));
    assert!(by(7)["gates"]["KB"]["detail"].as_str().unwrap_or("").contains("SIGABRT"), "{}", by(7));
    assert!(by(11)["gates"]["CMP-01"]["detail"].as_str().unwrap_or("").contains("longer than"), "{}", by(11));
    assert_eq!(by(8)["status"], "skipped");
    assert_eq!(by(12)["status"], "reference-error");
    assert_eq!(by(9)["gates"]["CMP-01"]["status"], "error");
    let pids: Vec<i32> = std::fs::read_to_string(&pidfile).unwrap_or_default().lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(pids.len(), 1, "the forking kernel ran once");
    assert!(!alive(pids[0]), "setsid child {} of a crashed worker outlived it", pids[0]);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary")).expect("json");
    assert_eq!((s["corpus_rows"].as_u64(), s["recorded"].as_u64(), s["judged"].as_u64(), s["skipped"].as_u64()), (Some(13), Some(12), Some(10), Some(1)));
    // Judged and accepted: all but task 9; broken among them: 3, 4, 5, 6, 7, 11; not clean: + 2.
    assert_eq!((s["judged_accepted"].as_u64(), s["accepted_broken"].as_u64(), s["accepted_any_violation"].as_u64()), (Some(9), Some(6), Some(7)));
    let d = &s["differential"];
    // KB passes: 1, 2, 3, 4, 5, 6, 11 (the crash, hang, garbage and long line come after KB); fails: 7, 9, 10.
    assert_eq!((d["kb_pass_clean"].as_u64(), d["kb_pass_rejected"].as_u64(), d["kb_fail_clean"].as_u64(), d["kb_fail_rejected"].as_u64()), (Some(1), Some(6), Some(1), Some(2)));
    // RES-01 errors: the crash at RES-01 and the build failure (a failure at KB is KB's alone).
    assert_eq!(s["gates"]["RES-01"]["error"].as_u64(), Some(2), "{}", s["gates"]["RES-01"]);
    for f in ["summary.txt", "funnel.svg", "gates.svg", "differential.svg"] {
        let t = std::fs::read_to_string(out.join(f)).expect(f);
        assert!(t.len() > 100, "{f} is empty");
    }
    // The differential plot states the four counts of the table above, each with its cell.
    let svg = std::fs::read_to_string(out.join("differential.svg")).expect("differential.svg");
    for cell in ["KB pass, kverify clean: 1", "KB pass, kverify rejects: 6", "KB fail, kverify clean: 1", "KB fail, kverify rejects: 2"] {
        assert!(svg.contains(cell), "differential.svg lacks `{cell}`");
    }
    // One bar per cell, bottom up in the table's order, its length proportional to the count.
    let attr = |tag: &str, name: &str| tag.split(&format!(" {name}=\"")).nth(1).and_then(|v| v.split('"').next()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let mut bars: Vec<(f64, f64)> = svg.split("<rect").skip(1).filter(|t| t.contains("fill=\"#0000FF\"")).map(|t| (attr(t, "y"), attr(t, "width"))).collect();
    bars.sort_by(|a, b| b.0.total_cmp(&a.0));
    let unit = bars.iter().map(|b| b.1).fold(0.0, f64::max) / 6.0;
    let lengths: Vec<f64> = bars.iter().map(|b| (b.1 / unit * 10.0).round() / 10.0).collect();
    assert_eq!(lengths, vec![1.0, 6.0, 1.0, 2.0], "bar lengths in kernels: {bars:?}");
}

fn corpus_of(n: i64, sleep: f64, pidlog: &Path) -> Vec<Value> {
    let base = json!({"sleep": sleep, "pidlog": pidlog.display().to_string()});
    let with = |k: &str, v: Value| {
        let mut d = base.clone();
        d[k] = v;
        d
    };
    (0..n)
        .map(|t| match t % 4 {
            0 => row(t, Some(base.clone()), true),
            1 => row(t, Some(with("run", json!({"EXC-01": {"mismatches": 1, "total": 9}}))), true),
            2 => row(t, Some(with("run", json!({"KB": {"trials": [{"shape_ok": false, "allclose": false}]}}))), t % 3 == 0),
            _ => row(t, Some(with("run", json!({"CMP-01": {"seeds": [{"seed": 1, "err": 1.0, "nonfinite_where_ref_finite": 0, "shape_ok": true}]}}))), true),
        })
        .collect()
}

#[test]
fn a_killed_audit_resumes_to_the_same_report() {
    let dir = scratch("resume");
    let pidlog = dir.join("pids");
    let corpus = write_corpus(&dir, &corpus_of(10, 0.04, &pidlog));
    let c = corpus.to_str().unwrap_or("");
    let (whole, part) = (dir.join("whole"), dir.join("part"));
    let w = fake_worker();
    let o = kverify(&[c, "--out", whole.to_str().unwrap_or(""), "--worker", &w, "--jobs", "2", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Kill the second audit (SIGKILL) once 3 kernels are recorded.
    let mut child = kverify(&[c, "--out", part.to_str().unwrap_or(""), "--worker", &w, "--jobs", "2", "--quiet"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    let file = part.join("kernels-0of1.jsonl");
    while std::fs::read_to_string(&file).map(|s| s.lines().count()).unwrap_or(0) < 3 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    // The workers of the killed audit die with it (their shims see their parent gone).
    let pids: Vec<i32> = std::fs::read_to_string(&pidlog).unwrap_or_default().lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    assert!(!pids.is_empty());
    let t1 = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t1.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(pids.iter().all(|&p| !alive(p)), "workers of a killed audit survive: {pids:?}");
    let at_kill = std::fs::read_to_string(&file).map(|s| s.lines().count()).unwrap_or(0);
    assert!((3..10).contains(&at_kill), "killed after {at_kill} of 10 kernels: not mid-run");
    let o = kverify(&[c, "--out", part.to_str().unwrap_or(""), "--worker", &w, "--jobs", "2", "--quiet"]).output().expect("rerun");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{at_kill} already recorded")), "{err}");
    let keys: Vec<String> = std::fs::read_to_string(&file).expect("read").lines().map(|l| serde_json::from_str::<Value>(l).expect("line")["key"].as_str().unwrap_or("").to_string()).collect();
    let mut uniq = keys.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!((keys.len(), uniq.len()), (10, 10), "a kernel lost or judged twice: {keys:?}");
    let a = std::fs::read_to_string(whole.join("summary.json")).expect("a");
    let b = std::fs::read_to_string(part.join("summary.json")).expect("b");
    assert_eq!(a, b);
    assert_eq!(std::fs::read_to_string(whole.join("summary.txt")).expect("a"), std::fs::read_to_string(part.join("summary.txt")).expect("b"));
    let s: Value = serde_json::from_str(&a).expect("json");
    assert_eq!(s["verdicts"], json!({"broken": 3, "clean": 5, "violation": 2}));
}

#[test]
fn shards_merge_into_the_unsharded_report() {
    let dir = scratch("shards");
    let corpus = write_corpus(&dir, &corpus_of(7, 0.0, &dir.join("pids")));
    let c = corpus.to_str().unwrap_or("");
    let w = fake_worker();
    let (whole, merged) = (dir.join("whole"), dir.join("merged"));
    assert!(kverify(&[c, "--out", whole.to_str().unwrap_or(""), "--worker", &w, "--quiet"]).output().expect("run").status.success());
    for shard in ["0/3", "2/3", "1/3"] {
        let o = kverify(&[c, "--out", merged.to_str().unwrap_or(""), "--worker", &w, "--shard", shard, "--quiet"]).output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(std::fs::read_dir(&merged).expect("dir").flatten().filter(|e| e.file_name().to_string_lossy().starts_with("kernels-")).count(), 3);
    let o = kverify(&[c, "--out", merged.to_str().unwrap_or(""), "--report-only"]).output().expect("report");
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(whole.join("summary.json")).expect("a"), std::fs::read_to_string(merged.join("summary.json")).expect("b"));
    let limited = dir.join("limited");
    assert!(kverify(&[c, "--out", limited.to_str().unwrap_or(""), "--worker", &w, "--shard", "1/2", "--limit", "2", "--quiet"]).output().expect("run").status.success());
    let keys: Vec<String> = records(&limited).iter().map(|r| r["key"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(keys, vec!["0001-L1-T1".to_string(), "0003-L1-T3".to_string()]);
}

#[test]
fn a_worker_that_cannot_start_stops_the_audit_without_records() {
    let dir = scratch("nostart");
    let corpus = write_corpus(&dir, &corpus_of(2, 0.0, &dir.join("pids")));
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", "false", "--quiet"]).output().expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("audit worker could not start: exited with code 1"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(records(&out).is_empty());
}

/// Killing kverify (SIGKILL) while a candidate hangs: the hung worker, which never reads its
/// closed stdin again, dies too (its shim sees its parent gone).
#[test]
fn killing_kverify_kills_a_hung_worker() {
    let dir = scratch("killhung");
    let pidlog = dir.join("pids");
    let corpus = write_corpus(&dir, &[row(1, Some(json!({"hang": "KB", "pidlog": pidlog.display().to_string()})), true)]);
    let out = dir.join("out");
    let mut child = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--time-limit", "100", "--quiet"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    let mut pids: Vec<i32> = Vec::new();
    while pids.is_empty() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
        pids = std::fs::read_to_string(&pidlog).unwrap_or_default().lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    }
    std::thread::sleep(Duration::from_millis(300)); // into the hanging KB request
    assert!(pids.len() == 1 && alive(pids[0]), "worker not running: {pids:?}");
    child.kill().expect("kill");
    let _ = child.wait();
    let t1 = Instant::now();
    while alive(pids[0]) && t1.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pids[0]), "hung worker {} outlived the killed kverify", pids[0]);
}

/// The build-ahead pass loads every `load_inline` kernel once (beside the judging, which waits
/// for each kernel's own build), `--build-jobs` at a time, with `TORCH_EXTENSIONS_DIR` set for
/// every worker.
#[test]
fn load_inline_kernels_are_built_ahead_into_the_extension_cache() {
    let dir = scratch("buildahead");
    let pidlog = dir.join("pids");
    let d = json!({"pidlog": pidlog.display().to_string()});
    let inline = |t: i64| json!({"level_id": 1, "task_id": t, "ref_code": REF, "custom_code": format!("#FAKE {d}\n# uses load_inline\nclass ModelNew: pass\n"), "score_default": 1.0});
    let corpus = write_corpus(&dir, &[inline(1), row(2, Some(d.clone()), true), inline(3)]);
    let (out, ext) = (dir.join("out"), dir.join("ext"));
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--build-jobs", "2", "--extensions-dir", ext.to_str().unwrap_or(""), "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<String> = std::fs::read_to_string(&pidlog).expect("pids").lines().map(str::to_string).collect();
    // 2 builds ahead, then 3 kernels judged, each loaded twice (once more for ORD-02's fresh process).
    assert_eq!(lines.len(), 2 + 3 * 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.ends_with(&format!(" {}", ext.display()))), "{lines:?}");
    // Records come in the order kernels end: the one needing no build is judged while the
    // builds run, so compare by key.
    let mut r: Vec<(String, bool)> = records(&out).iter().map(|x| (x["key"].as_str().unwrap_or("").to_string(), x["load_inline"].as_bool().unwrap_or(false))).collect();
    r.sort();
    assert_eq!(r.iter().map(|x| x.1).collect::<Vec<_>>(), vec![true, false, true]);
}

/// The judges do not wait for every build: a kernel that needs none is loaded and judged while
/// a slow `load_inline` build runs (before, the whole build-ahead pass ended first), and the
/// `load_inline` kernel is judged only after its build.
#[test]
fn kernels_without_a_build_are_judged_while_builds_run() {
    let dir = scratch("overlap");
    let stamps = dir.join("stamps");
    let st = |label: &str, sleep: f64| json!({"stamps": stamps.display().to_string(), "label": label, "load_sleep": sleep});
    let inline = json!({"level_id": 1, "task_id": 1, "ref_code": REF, "custom_code": format!("#FAKE {}\n# uses load_inline\nclass ModelNew: pass\n", st("inline", 3.0)), "score_default": 1.0});
    let corpus = write_corpus(&dir, &[inline, row(2, Some(st("plain", 0.0)), true)]);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1", "--build-jobs", "1", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&stamps).expect("stamps");
    let times = |label: &str, ev: &str| -> Vec<f64> { text.lines().filter_map(|l| { let f: Vec<&str> = l.split(' ').collect(); (f[0] == label && f[1] == ev).then(|| f[2].parse().unwrap_or(f64::NAN)) }).collect() };
    let (build_end, plain_start) = (times("inline", "end")[0], times("plain", "start")[0]);
    assert!(plain_start < build_end, "the plain kernel waited for the build: loaded at {plain_start}, build ended {build_end}\n{text}");
    // The inline kernel's judging loads (two: ORD-02's fresh process) start after its build.
    let inline_starts = times("inline", "start");
    assert_eq!(inline_starts.len(), 3, "{text}");
    assert!(inline_starts[1] >= build_end, "{text}");
    assert_eq!(records(&out).len(), 2);
}

/// `--stop-after`: no kernel starts after the deadline, the one in flight finishes and is
/// recorded, the exit code says kernels are left (3), and a rerun judges exactly those.
#[test]
fn stop_after_finishes_the_kernel_in_flight_and_leaves_the_rest() {
    let dir = scratch("stop-after");
    let slow = || Some(json!({"sleep": 0.1}));
    let corpus = write_corpus(&dir, &[row(1, slow(), true), row(2, slow(), true), row(3, slow(), true)]);
    let out = dir.join("out");
    let args = [corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1", "--quiet"];
    let o = kverify(&[&args[..], &["--stop-after", "0.5"]].concat()).output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("2 kernels left unjudged"), "{err}");
    let first = records(&out);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["status"], "judged");
    assert_eq!(first[0]["gates"].as_object().map(|g| g.len()), Some(11), "the kernel in flight ran every gate");
    let o = kverify(&args).output().expect("rerun");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("3 kernels selected, 1 already recorded, 2 judged now"), "{err}");
    assert_eq!(records(&out).len(), 3);
}

/// A judge that waited for a build past the deadline does not start its kernel: both kernels
/// are left, and nothing is loaded after the deadline but the build that was under way.
#[test]
fn stop_after_holds_for_judges_that_waited_on_a_build() {
    let dir = scratch("stop-after-build");
    let stamps = dir.join("stamps");
    let inline = |t: i64, label: &str| json!({"level_id": 1, "task_id": t, "ref_code": REF, "custom_code": format!("#FAKE {}\n# uses load_inline\nclass ModelNew: pass\n", json!({"stamps": stamps.display().to_string(), "label": label, "load_sleep": 2.0})), "score_default": 1.0});
    let corpus = write_corpus(&dir, &[inline(1, "a"), inline(2, "b")]);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "2", "--build-jobs", "1", "--stop-after", "1", "--quiet"]).output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("2 kernels left unjudged"), "{err}");
    let text = std::fs::read_to_string(&stamps).expect("stamps");
    assert_eq!(text.lines().filter(|l| l.starts_with("a start")).count(), 1, "only a's build loaded a:\n{text}");
    assert!(!text.contains("b start"), "b was loaded after the deadline:\n{text}");
    assert!(records(&out).is_empty());
}

/// A build thread whose kernel failed to build goes on building the next one (it used to carry
/// the failure over: the next kernel was not loaded and its judge had to build it).
#[test]
fn a_failed_build_does_not_stop_its_build_thread() {
    let dir = scratch("build-after-failure");
    let log = dir.join("loads");
    let inline = |t: i64, d: Value| json!({"level_id": 1, "task_id": t, "ref_code": REF, "custom_code": format!("#FAKE {d}\n# uses load_inline\nclass ModelNew: pass\n"), "score_default": 1.0});
    let pl = log.display().to_string();
    let corpus = write_corpus(&dir, &[inline(1, json!({"build_error": "nvcc failed", "pidlog": pl})), inline(2, json!({"pidlog": pl}))]);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1", "--build-jobs", "1", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Kernel 1: one build, one judging load (its failure is then reported by every gate);
    // kernel 2: one build, two judging loads (ORD-02's fresh process).
    let loads = std::fs::read_to_string(&log).expect("load log").lines().count();
    assert_eq!(loads, 2 + 3, "loads: {loads}");
    assert_eq!(records(&out).len(), 2);
}

/// A time limit that is not a positive finite number of seconds is a usage error (clap, exit 2),
/// never a panic in `Duration::from_secs_f64` — for audit, check and redteam alike.
#[test]
fn a_bad_time_limit_is_a_usage_error() {
    let dir = scratch("time-limit");
    let corpus = write_corpus(&dir, &[row(0, None, true)]);
    for bad in ["-1", "nan", "inf", "0", "ten"] {
        let flag = format!("--time-limit={bad}");
        for args in [vec!["audit", corpus.to_str().unwrap_or(""), "--out", dir.join("out").to_str().unwrap_or(""), &flag], vec!["redteam", &flag]] {
            let o = Command::new(env!("CARGO_BIN_EXE_kverify")).args(&args).output().expect("run kverify");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("--time-limit") && !err.contains("panicked"), "{args:?}: {err}");
        }
    }
}

/// A ModelNew that fails to build is built once per kernel: every gate reports the build
/// failure, and the worker is asked to load the candidate a single time (it used to be rebuilt
/// — a full `load_inline` compile — for each of the eleven gates).
#[test]
fn a_failed_build_is_not_retried_for_every_gate() {
    let dir = scratch("build-once");
    let log = dir.join("loads");
    let corpus = write_corpus(&dir, &[row(1, Some(json!({"build_error": "SyntaxError: bad", "pidlog": log.display().to_string()})), true)]);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loads = std::fs::read_to_string(&log).expect("load log").lines().count();
    assert_eq!(loads, 1, "the candidate was loaded {loads} times");
    let r = &records(&out)[0];
    let gates = r["gates"].as_object().expect("gates");
    assert!(gates.len() > 5);
    for (g, v) in gates {
        assert_eq!(v["status"], "error", "{g}: {v}");
        assert!(v["detail"].as_str().unwrap_or("").contains("SyntaxError: bad"), "{g}: {v}");
    }
}

/// `--with-control DIR`: every row's positive control judged beside its candidate in one
/// worker, its records in DIR; the control runs first in every gate, a candidate's crash
/// charges only the candidate (the control goes on in a fresh worker), a row without a
/// candidate is judged for its control alone, and a rerun judges nothing twice.
#[test]
fn with_control_judges_each_control_beside_its_candidate() {
    let dir = scratch("with-control");
    let log = dir.join("runs");
    let runlog = |label: &str| json!({"runlog": log.display().to_string(), "label": label});
    let ref_with = |label: &str| format!("#FAKE {}\n{REF}", runlog(label));
    let mut crash = runlog("cand1");
    crash["crash"] = json!("CMP-01");
    let rows = vec![
        json!({"level_id": 1, "task_id": 1, "ref_code": ref_with("control0"), "custom_code": format!("#FAKE {}\nclass ModelNew: pass\n", runlog("cand0")), "score_default": 1.0}),
        json!({"level_id": 1, "task_id": 2, "ref_code": ref_with("control1"), "custom_code": format!("#FAKE {crash}\nclass ModelNew: pass\n"), "score_default": 1.0}),
        json!({"level_id": 1, "task_id": 3, "ref_code": ref_with("control2"), "custom_code": "", "score_default": null}),
    ];
    let corpus = write_corpus(&dir, &rows);
    let (out, ctl) = (dir.join("out"), dir.join("control"));
    let args = [corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--with-control", ctl.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"];
    let o = kverify(&args).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (cands, controls) = (records(&out), records(&ctl));
    assert_eq!(cands.iter().map(|r| r["task"].as_i64().unwrap_or(0)).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(controls.iter().map(|r| (r["task"].as_i64().unwrap_or(0), r["control"].as_bool())).collect::<Vec<_>>(), vec![(1, Some(true)), (2, Some(true)), (3, Some(true))]);
    assert!(controls.iter().all(|r| r["verdict"] == "clean"), "{controls:?}");
    assert_eq!((cands[0]["verdict"].as_str(), cands[1]["verdict"].as_str()), (Some("clean"), Some("broken")));
    assert!(cands[1]["gates"]["CMP-01"]["detail"].as_str().unwrap_or("").contains("SIGSEGV"), "{}", cands[1]);
    assert_eq!(cands[1]["gates"]["RES-01"]["status"], "pass", "the candidate goes on in a fresh worker");
    // The run requests, in order: per gate the control before the candidate; after the crash at
    // CMP-01 the candidate's row continues in another process.
    let runs: Vec<(String, String, String)> = std::fs::read_to_string(&log).expect("log").lines().map(|l| {
        let v: Vec<&str> = l.split(' ').collect();
        (v[0].to_string(), v[1].to_string(), v.get(2).unwrap_or(&"").to_string())
    }).collect();
    for (c, k) in [("control0", "cand0"), ("control1", "cand1")] {
        let order: Vec<&(String, String, String)> = runs.iter().filter(|r| r.2 == c || r.2 == k).collect();
        let firsts: Vec<&str> = order.iter().filter(|r| r.1 == "CMP-01").map(|r| r.2.as_str()).collect();
        assert_eq!(firsts, vec![c, k], "{order:?}");
    }
    let pid_of = |label: &str, gate: &str| runs.iter().find(|r| r.2 == label && r.1 == gate).map(|r| r.0.clone());
    assert_ne!(pid_of("control1", "RES-01"), pid_of("cand1", "CMP-01"), "the control ran in the process its candidate crashed");
    assert_eq!(runs.iter().filter(|r| r.2 == "control2").count(), 12, "a row without a candidate: its control alone, 11 gates and ORD-02's fresh process");
    // Summaries for both folders; a rerun judges nothing again.
    assert!(out.join("summary.json").exists() && ctl.join("summary.json").exists());
    let o = kverify(&args).output().expect("rerun");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("5 kernels selected, 5 already recorded, 0 judged now"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--with-control", ctl.to_str().unwrap_or(""), "--control"]).output().expect("usage");
    assert_eq!(o.status.code(), Some(2), "--control with --with-control is a usage error");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--with-control", &format!("{}/.", out.display()), "--worker", &fake_worker()]).output().expect("usage");
    assert_eq!(o.status.code(), Some(2), "the controls in the --out folder: {}", String::from_utf8_lossy(&o.stderr));
}

/// A unit that runs out of device memory while other workers share the device is not charged
/// (no error, no n/a): it is judged again, alone, and recorded once — with the retry's result.
/// With one job the device is the unit's already, so the answer is final: a charged error.
#[test]
fn out_of_memory_beside_other_workers_is_judged_again_alone() {
    let dir = scratch("oom");
    let mark = dir.join("oom-once");
    let rows = vec![row(1, None, true), row(2, Some(json!({"oom": ["ORD-03", mark.display().to_string()]})), true), row(3, None, true)];
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "2", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(mark.exists(), "the out-of-memory answer was never given");
    let r = records(&out);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r.iter().all(|x| x["verdict"] == "clean"), "{r:?}");
    let _ = std::fs::remove_file(&mark);
    let out1 = dir.join("out1");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out1.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1", "--quiet"]).output().expect("run");
    assert!(o.status.success());
    let r = records(&out1);
    assert_eq!(r[1]["gates"]["ORD-03"]["status"], "error", "{}", r[1]);
}

/// A kill mid-kernel loses only the gate in flight: the gates judged before it are in
/// `partial-0of1.jsonl`, and the rerun fills them in instead of running them again.
#[test]
fn a_rerun_resumes_a_killed_kernel_at_its_next_gate() {
    let dir = scratch("partial");
    let log = dir.join("runs");
    let rows = vec![row(1, Some(json!({"sleep": 0.25, "runlog": log.display().to_string(), "label": "k"})), true)];
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let args = [corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"];
    let mut child = kverify(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    // Wait until three gates have run, then kill kverify mid-kernel.
    while std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or(0) < 3 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();
    assert!(records(&out).is_empty(), "the kernel was not finished when killed");
    let partial = std::fs::read_to_string(out.join("partial-0of1.jsonl")).unwrap_or_default();
    let judged: Vec<String> = partial.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).map(|v| v["gate"].as_str().unwrap_or("").to_string()).collect();
    assert!(judged.len() >= 2 && judged[0] == "KB", "{partial}");
    let o = kverify(&args).output().expect("rerun");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = records(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["verdict"], "clean", "{}", r[0]);
    assert_eq!(r[0]["gates"].as_object().map(|g| g.len()), Some(11), "{}", r[0]);
    let runs = std::fs::read_to_string(&log).expect("log");
    for g in &judged {
        // ORD-02's run request happens twice per judging (its fresh process).
        let want = if g == "ORD-02" { 2 } else { 1 };
        assert_eq!(runs.lines().filter(|l| l.split(' ').nth(1) == Some(g.as_str())).count(), want, "{g} ran again after the resume:\n{runs}");
    }
    // Recorded, its progress is spent: a record deleted now (to judge the kernel again) is
    // judged from scratch, not rebuilt from the old lines.
    assert_eq!(std::fs::read_to_string(out.join("partial-0of1.jsonl")).unwrap_or_default(), "", "progress of a recorded kernel left behind");
    std::fs::remove_file(out.join("kernels-0of1.jsonl")).expect("rm");
    let o = kverify(&args).output().expect("again");
    assert!(o.status.success());
    let runs = std::fs::read_to_string(&log).expect("log");
    assert_eq!(runs.lines().filter(|l| l.split(' ').nth(1) == Some("KB")).count(), 2, "KB not judged again after the record was deleted:\n{runs}");
}

/// A record file torn by a kill inside a multi-byte character (candidates' text is UTF-8) is
/// cut, not an audit that can no longer start.
#[test]
fn a_record_torn_inside_a_character_is_cut() {
    let dir = scratch("torn-utf8");
    let corpus = write_corpus(&dir, &[row(1, None, true)]);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).expect("out");
    std::fs::write(out.join("kernels-0of1.jsonl"), b"{\"key\": \"na\xc3").expect("torn");
    std::fs::write(out.join("partial-0of1.jsonl"), b"{\"key\": \"0000-L1-T1\", \"gate\": \"n\xc3").expect("torn");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(records(&out).len(), 1);
}

/// Builds wait until the judges approach the `load_inline` units: with one judge, the build
/// of the one inline kernel starts only once at most 2 units without a build are still queued
/// (on the H200, builds for kernels the judges never reached took 45 % of a call's work).
#[test]
fn builds_start_when_the_judges_approach_them() {
    let dir = scratch("lead");
    let stamps = dir.join("stamps");
    let st = |label: &str, sleep: f64| json!({"stamps": stamps.display().to_string(), "label": label, "load_sleep": sleep, "sleep": 0.02});
    let inline = json!({"level_id": 1, "task_id": 9, "ref_code": REF, "custom_code": format!("#FAKE {}\n# uses load_inline\nclass ModelNew: pass\n", st("inline", 0.5)), "score_default": 1.0});
    let mut rows: Vec<Value> = (0..5).map(|i| row(i, Some(st(&format!("p{i}"), 0.0)), true)).collect();
    rows.push(inline);
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1", "--build-jobs", "1", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&stamps).expect("stamps");
    let first = |label: &str| text.lines().find_map(|l| { let f: Vec<&str> = l.split(' ').collect(); (f[0] == label && f[1] == "start").then(|| f[2].parse::<f64>().unwrap_or(f64::NAN)) }).unwrap_or(f64::NAN);
    let last_end = |label: &str| text.lines().filter_map(|l| { let f: Vec<&str> = l.split(' ').collect(); (f[0] == label && f[1] == "end").then(|| f[2].parse::<f64>().unwrap_or(f64::NAN)) }).fold(f64::NAN, f64::max);
    // The build may start once p2 is taken (p3 and p4, 2 units, remain queued). The judge
    // takes p2 only after finishing p1, and stamps p2's start a moment after taking it, so the
    // build's start is ordered after p1's end, not after p2's stamp (CI saw it 5 ms before).
    assert!(first("inline") > last_end("p1"), "the build started before the judges approached it:\n{text}");
    // It was still built ahead (a load by the build thread, then the judge's two), not left to
    // the judge.
    assert_eq!(text.lines().filter(|l| l.starts_with("inline start")).count(), 3, "{text}");
    assert_eq!(records(&out).len(), 6);
}

/// Per kernel, not per unit: killed while the candidate's run of a gate hangs (the control's
/// run of that gate done), the rerun fills the control's gate in and runs only the candidate's.
#[test]
fn a_rerun_fills_in_each_kernel_of_a_unit_separately() {
    let dir = scratch("partial-unit");
    let log = dir.join("runs");
    let runlog = |label: &str| json!({"runlog": log.display().to_string(), "label": label});
    let mut cand = runlog("cand");
    cand["hang"] = json!("ORD-01");
    let rows = vec![json!({"level_id": 1, "task_id": 1, "ref_code": format!("#FAKE {}\n{REF}", runlog("control")), "custom_code": format!("#FAKE {cand}\nclass ModelNew: pass\n"), "score_default": 1.0})];
    let corpus = write_corpus(&dir, &rows);
    let (out, ctl) = (dir.join("out"), dir.join("control"));
    let args = |limit: &'static str| -> Vec<String> { [corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--with-control", ctl.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet", "--time-limit", limit].iter().map(|s| s.to_string()).collect() };
    let count = |label: &str, gate: &str| std::fs::read_to_string(&log).unwrap_or_default().lines().filter(|l| l.ends_with(&format!(" {gate} {label}"))).count();
    let mut child = kverify(&args("100").iter().map(String::as_str).collect::<Vec<_>>()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    while count("cand", "ORD-01") == 0 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((count("control", "ORD-01"), count("cand", "ORD-01")), (1, 1), "not killed where meant");
    let o = kverify(&args("2").iter().map(String::as_str).collect::<Vec<_>>()).output().expect("rerun");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(count("control", "ORD-01"), 1, "the control's judged gate ran again");
    assert_eq!(count("cand", "ORD-01"), 2, "the candidate's gate in flight was not run again");
    assert_eq!(count("control", "KB"), 1);
    let (c, k) = (records(&ctl), records(&out));
    assert_eq!((c[0]["verdict"].as_str(), k[0]["gates"]["ORD-01"]["status"].as_str()), (Some("clean"), Some("error")), "{c:?} {k:?}");
}

/// ORD-02's fresh process: when the task's own Model gives other bits in another process (cuDNN
/// picks convolution algorithms per process: rows 77 and 223 of CUDA-L1, positive controls, on
/// the H200), only the in-process runs are judged; a candidate whose bits alone move across
/// processes still fails.
#[test]
fn ord02_does_not_judge_a_fresh_process_in_which_the_reference_moves_too() {
    let dir = scratch("ord02-fresh");
    let rows = vec![row(1, Some(json!({"per_process": "both"})), true), row(2, Some(json!({"per_process": "candidate"})), true)];
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = records(&out);
    let ord02 = |t: i64| r.iter().find(|x| x["task"] == t).map(|x| x["gates"]["ORD-02"].clone()).unwrap_or(Value::Null);
    assert_eq!(ord02(1)["status"], "pass", "{}", ord02(1));
    assert!(ord02(1)["detail"].as_str().unwrap_or("").contains("the fresh process not judged"), "{}", ord02(1));
    assert_eq!(ord02(2)["status"], "fail", "{}", ord02(2));
    assert!(ord02(2)["detail"].as_str().unwrap_or("").contains("incl. one in a fresh process"), "{}", ord02(2));
}

/// ORD-02's fresh process is one per unit: the control's and the candidate's runs there come
/// after both ran in the unit's worker, in one new worker (a worker start and the loading of
/// both kernels fewer per row than one fresh process per kernel).
#[test]
fn ord02_runs_control_and_candidate_in_one_fresh_process() {
    let dir = scratch("ord02-one-fresh");
    let log = dir.join("runs");
    let runlog = |label: &str| json!({"runlog": log.display().to_string(), "label": label});
    let rows = vec![json!({"level_id": 1, "task_id": 1, "ref_code": format!("#FAKE {}\n{REF}", runlog("control")), "custom_code": format!("#FAKE {}\nclass ModelNew: pass\n", runlog("cand")), "score_default": 1.0})];
    let corpus = write_corpus(&dir, &rows);
    let (out, ctl) = (dir.join("out"), dir.join("control"));
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--with-control", ctl.to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!((records(&out)[0]["gates"]["ORD-02"]["status"].as_str(), records(&ctl)[0]["gates"]["ORD-02"]["status"].as_str()), (Some("pass"), Some("pass")));
    let runs: Vec<(String, String, String)> = std::fs::read_to_string(&log).expect("log").lines().map(|l| {
        let v: Vec<&str> = l.split(' ').collect();
        (v[0].to_string(), v[1].to_string(), v.get(2).unwrap_or(&"").to_string())
    }).collect();
    let ord02 = |label: &str| runs.iter().filter(|r| r.1 == "ORD-02" && r.2 == label).map(|r| r.0.clone()).collect::<Vec<_>>();
    let (c, k) = (ord02("control"), ord02("cand"));
    assert_eq!((c.len(), k.len()), (2, 2), "{runs:?}");
    assert_eq!(c[0], k[0], "both ran in the unit's worker first: {runs:?}");
    assert_eq!(c[1], k[1], "one fresh process for both: {runs:?}");
    assert_ne!(c[0], c[1], "the fresh run is in another process: {runs:?}");
}
