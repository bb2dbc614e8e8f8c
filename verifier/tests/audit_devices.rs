//! `kverify audit --device cuda:0,cuda:1`: several GPUs of one host, against the PyTorch-free
//! stand-in worker (which only records the `--device` it was started with: no GPU is used).
//! Judging thread j runs on device j mod n — one worker per GPU by default — every record names
//! the device its worker ran on, and a unit judged again alone after running out of device
//! memory holds only its own device: the other GPUs go on meanwhile.

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use common::audit::{fake_worker, kverify, records, row, scratch, write_corpus};
use kverify::audit::devices::{self, Devices};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One `devlog` line: a run request of a kernel's worker.
struct Run {
    label: String,
    device: String,
    pid: String,
    t: f64,
}

fn devlog(path: &Path) -> Vec<Run> {
    std::fs::read_to_string(path)
        .expect("devlog")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Run { label: f[0].into(), device: f[1].into(), pid: f[2].into(), t: f[4].parse().expect("time") }
        })
        .collect()
}

/// Per device, per kernel label: the interval [first, last] of its run requests there.
fn intervals(runs: &[Run]) -> BTreeMap<String, BTreeMap<String, (f64, f64)>> {
    let mut m: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    for r in runs {
        let e = m.entry(r.device.clone()).or_default().entry(r.label.clone()).or_insert((r.t, r.t));
        *e = (e.0.min(r.t), e.1.max(r.t));
    }
    m
}

/// The most kernels whose intervals overlap at one instant.
fn most_at_once(iv: &BTreeMap<String, (f64, f64)>) -> usize {
    iv.values().map(|&(a, _)| iv.values().filter(|&&(s, e)| s <= a && a <= e).count()).max().unwrap_or(0)
}

#[test]
fn thread_j_runs_on_device_j_mod_n_and_shares_count_per_device() {
    assert_eq!((0..5).map(|j| devices::of(j, 2)).collect::<Vec<_>>(), vec![0, 1, 0, 1, 0]);
    let names = ["cuda:0".to_string(), "cuda:1".to_string()];
    let d = Devices::new(&names, 3, 0);
    assert_eq!((d.of(2), d.name(d.of(3))), (0, "cuda:1"));
    // Judges 0 and 2 share cuda:0; judge 1 has cuda:1 to itself until a build thread joins it.
    assert_eq!((d.contended(0), d.contended(1)), (true, false));
    assert!(Devices::new(&names, 2, 2).contended(1));
    assert!(!Devices::new(&names[..1], 1, 0).contended(0));
}

/// `--device cuda:0,cuda:1`: by default one judge per GPU (no two kernels at once on one
/// device, both devices used); with `--jobs 3`, two judges share cuda:0 (j = 0, 2) and one has
/// cuda:1. Every record names the device of the worker that judged it.
#[test]
fn one_worker_per_gpu_and_each_record_names_its_device() {
    for (jobs, most) in [(None, [("cuda:0", 1), ("cuda:1", 1)]), (Some("3"), [("cuda:0", 2), ("cuda:1", 1)])] {
        let dir = scratch(&format!("devices-{}", jobs.unwrap_or("default")));
        let log = dir.join("devlog");
        let rows: Vec<Value> = (0..6).map(|t| row(t, Some(json!({"devlog": log.display().to_string(), "label": format!("k{t}"), "sleep": 0.02})), true)).collect();
        let corpus = write_corpus(&dir, &rows);
        let out = dir.join("out");
        let mut args = vec![corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", "", "--device", "cuda:0,cuda:1", "--quiet"];
        let w = fake_worker();
        args[4] = &w;
        if let Some(j) = jobs {
            args.extend(["--jobs", j]);
        }
        let o = kverify(&args).output().expect("run");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let runs = devlog(&log);
        let recs = records(&out);
        assert_eq!(recs.len(), 6);
        for r in &recs {
            let label = format!("k{}", r["task"]);
            let seen: BTreeSet<&str> = runs.iter().filter(|x| x.label == label).map(|x| x.device.as_str()).collect();
            assert_eq!(seen.len(), 1, "{label} ran on {seen:?}");
            assert_eq!(r["device"].as_str(), seen.first().copied(), "{label}: record {} but worker on {seen:?}", r["device"]);
        }
        let iv = intervals(&runs);
        let got: Vec<(&str, usize)> = iv.iter().map(|(d, k)| (d.as_str(), most_at_once(k))).collect();
        assert_eq!(got, most.to_vec(), "jobs {jobs:?}: kernels at once per device");
    }
}

/// Four judges on two GPUs; every kernel runs out of memory the first time it runs on cuda:0,
/// and runs slowly on cuda:1. The two units of cuda:0 are judged again, each holding cuda:0
/// alone (no other kernel runs there meanwhile), while the two slow kernels of cuda:1 are still
/// running: the lock is cuda:0's, not the host's. All four come out clean, judged once.
#[test]
fn a_unit_judged_again_alone_holds_only_its_own_device() {
    let dir = scratch("oom-per-device");
    let log = dir.join("devlog");
    let rows: Vec<Value> = (0..4)
        .map(|t| {
            let mark = dir.join(format!("oom-{t}")).display().to_string();
            row(t, Some(json!({"devlog": log.display().to_string(), "label": format!("k{t}"), "oom": ["KB", mark, "cuda:0"], "sleep_on": {"cuda:1": 0.1}})), true)
        })
        .collect();
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let w = fake_worker();
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &w, "--device", "cuda:0,cuda:1", "--jobs", "4", "--quiet"]).output().expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs = records(&out);
    assert_eq!(recs.len(), 4, "{recs:?}");
    assert!(recs.iter().all(|r| r["verdict"] == "clean"), "{recs:?}");
    let runs = devlog(&log);
    let retried: Vec<String> = (0..4).filter(|t| dir.join(format!("oom-{t}")).exists()).map(|t| format!("k{t}")).collect();
    assert_eq!(retried.len(), 2, "the two kernels first taken by cuda:0's judges ran out of memory");
    let busy_until = runs.iter().filter(|r| r.device == "cuda:1").map(|r| r.t).fold(f64::MIN, f64::max);
    for k in &retried {
        let first_pid = runs.iter().find(|r| &r.label == k).map(|r| r.pid.clone()).unwrap_or_default();
        let again: Vec<&Run> = runs.iter().filter(|r| &r.label == k && r.pid != first_pid).collect();
        assert!(!again.is_empty() && again.iter().all(|r| r.device == "cuda:0"), "{k} was not judged again on cuda:0");
        let (a, b) = (again.iter().map(|r| r.t).fold(f64::MAX, f64::min), again.iter().map(|r| r.t).fold(f64::MIN, f64::max));
        let beside: Vec<&str> = runs.iter().filter(|r| r.device == "cuda:0" && &r.label != k && (a..=b).contains(&r.t)).map(|r| r.label.as_str()).collect();
        assert!(beside.is_empty(), "{k} judged again beside {beside:?} on cuda:0");
        assert!(b < busy_until, "{k} judged again at {a:.2}..{b:.2}, after cuda:1's kernels ({busy_until:.2}): the retry waited for the other GPU");
    }
    let cuda1: Vec<&str> = recs.iter().filter(|r| r["device"] == "cuda:1").map(|r| r["key"].as_str().unwrap_or("")).collect();
    assert_eq!(cuda1.len(), 2, "{recs:?}");
}
