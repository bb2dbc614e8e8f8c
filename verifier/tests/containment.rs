//! Containment of hostile workers (issue 11): bounded reads, a non-JSON hello, children that
//! outlive a worker that exits or crashes on its own, children that call `setsid()`. Each worker
//! is a small shell script speaking just enough of `kverify-candidate/1`; pids of the children
//! it starts are written to a file so the test can check they are gone.

use kverify::candidate::external::{ExternalCandidate, Manifest};
use kverify::candidate::process::Worker;
use kverify::candidate::{Candidate, CandidateError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const HELLO: &str = r#"echo '{"protocol": "kverify-candidate/1"}'"#;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kverify-contain-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp");
    dir
}

/// A candidate running `sh -c script` in `dir`.
fn shell(dir: &Path, name: &str, script: &str, limit_s: u64) -> ExternalCandidate {
    let m = serde_json::json!({
        "name": name, "op": "matmul",
        "precision": {"input": "f32", "accumulator": "f32", "output": "f32"},
        "command": ["sh", "-c", script]
    });
    std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
    ExternalCandidate::new(Manifest::load(&dir.join("m.json")).expect("manifest"), Duration::from_secs(limit_s), 0)
}

fn call(c: &ExternalCandidate) -> Result<(), CandidateError> {
    let op = kverify::references::op_by_id("matmul").expect("op");
    let d = op.native();
    let mut x = kverify::gates::inputs::generate(&op, &d, kverify::gates::inputs::Dist::Normal, 1, kverify::tensor::DType::F32).candidate;
    c.forward(&d, &mut x).map(|_| ())
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rsplit(')').next().map(|r| !r.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

/// Pids written (one per line) to `file` by a worker, waiting up to 5 s for `n` of them.
fn pids(file: &Path, n: usize) -> Vec<i32> {
    let t0 = Instant::now();
    loop {
        let v: Vec<i32> = std::fs::read_to_string(file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
        if v.len() >= n || t0.elapsed() > Duration::from_secs(5) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// All of `pids` gone within 3 s.
fn all_gone(pids: &[i32]) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        if pids.iter().all(|&p| !alive(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A worker that writes an endless line without a newline is stopped by the line limit (1 MiB),
/// well before the 20 s time limit, and reported as a protocol error.
#[test]
fn a_line_without_newline_is_bounded() {
    let dir = scratch("flood");
    let c = shell(&dir, "flood", &format!("{HELLO}; read l; echo $$ > pids; while :; do printf xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done"), 20);
    let t0 = Instant::now();
    let e = call(&c).unwrap_err();
    assert!(matches!(&e, CandidateError::Protocol(m) if m.contains("longer than 1048576 bytes")), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
    let p = pids(&dir.join("pids"), 1);
    assert_eq!(p.len(), 1);
    assert!(all_gone(&p), "flooding worker {p:?} still alive");
}

/// A hello that is not JSON is a protocol error and the worker is killed (it would otherwise
/// sleep for 1000 s).
#[test]
fn a_non_json_hello_kills_the_worker() {
    let dir = scratch("hello");
    let c = shell(&dir, "hello", "echo $$ > pids; echo 'hello there'; sleep 1000", 5);
    let e = call(&c).unwrap_err();
    assert!(matches!(&e, CandidateError::Protocol(m) if m.starts_with("bad hello `hello there`")), "{e:?}");
    let p = pids(&dir.join("pids"), 1);
    assert_eq!(p.len(), 1);
    assert!(all_gone(&p), "worker {p:?} still alive after a bad hello");
}

/// A worker that starts a child and then exits on its own (code 7): the call reports the exit
/// and the child is gone too.
#[test]
fn children_die_when_the_worker_exits_on_its_own() {
    let dir = scratch("exit");
    let c = shell(&dir, "exit", &format!("{HELLO}; read l; sleep 1000 & echo $! >> pids; exit 7"), 10);
    let e = call(&c).unwrap_err();
    assert!(matches!(e, CandidateError::Exited { code: 7, .. }), "{e:?}");
    let p = pids(&dir.join("pids"), 1);
    assert_eq!(p.len(), 1);
    assert!(all_gone(&p), "child {p:?} of an exited worker survived");
}

/// A worker whose child leaves the process group with `setsid`, and whose grandchild is
/// double-forked (orphaned at once), then crashes with SIGSEGV: crash reported as such, both
/// escapees gone.
#[test]
fn setsid_and_double_forked_descendants_die_with_a_crashing_worker() {
    let dir = scratch("setsid");
    let script = format!("{HELLO}; read l; setsid sh -c 'echo $$ >> pids; exec sleep 1000' & (sh -c 'echo $$ >> pids; exec sleep 1000' &) ; sleep 0.3; kill -SEGV $$");
    let c = shell(&dir, "setsid", &script, 10);
    let e = call(&c).unwrap_err();
    assert!(matches!(&e, CandidateError::Crashed(m) if m.contains("SIGSEGV")), "{e:?}");
    let p = pids(&dir.join("pids"), 2);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(all_gone(&p), "escaped descendants {p:?} survived");
}

/// On a timeout the setsid'd descendant dies with the hung worker.
#[test]
fn setsid_descendants_die_on_timeout() {
    let dir = scratch("hang");
    let c = shell(&dir, "hang", &format!("{HELLO}; read l; setsid sh -c 'echo $$ >> pids; exec sleep 1000' & sleep 1000"), 2);
    let e = call(&c).unwrap_err();
    assert!(matches!(e, CandidateError::TimedOut { .. }), "{e:?}");
    let p = pids(&dir.join("pids"), 1);
    assert_eq!(p.len(), 1);
    assert!(all_gone(&p), "setsid descendant {p:?} survived the timeout kill");
}

/// Dropping a live worker (the end of a candidate's life) kills its descendants too, and the
/// shim mirrors the worker's exit status.
#[test]
fn dropping_a_worker_kills_its_tree() {
    let dir = scratch("drop");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("{HELLO}; setsid sleep 1000 & echo $! >> pids; read l; echo '{{\"ok\":1}}'; read l")]).current_dir(&dir);
    let mut w = Worker::spawn(cmd, "kverify-candidate/1", Duration::from_secs(5), 0, 4096).expect("spawn");
    assert_eq!(w.hello["protocol"], "kverify-candidate/1");
    assert_eq!(w.request("{}", Duration::from_secs(5)).expect("answer"), r#"{"ok":1}"#);
    let p = pids(&dir.join("pids"), 1);
    assert!(p.iter().all(|&x| alive(x)), "child not started");
    drop(w);
    assert!(all_gone(&p), "descendant {p:?} survived the drop");
}

/// A program that cannot be executed is reported as such (the shim does not linger).
#[test]
fn a_missing_program_is_an_io_error() {
    let t0 = Instant::now();
    let e = Worker::spawn(Command::new("/nonexistent/kverify-worker"), "kverify-candidate/1", Duration::from_secs(5), 0, 4096).err();
    assert!(matches!(&e, Some(CandidateError::Io(m)) if m.contains("cannot start `/nonexistent/kverify-worker`")), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
}

/// A worker whose manifest declares a `cuda` device runs without the address-space cap (the
/// CUDA driver's address reservation breaks context creation under `RLIMIT_AS`, as for
/// `tilec-run`); a CPU worker keeps it. Both still run in their own process group under the
/// time limit. The worker writes `ulimit -v` and its process group to a file, then says hello.
#[test]
fn a_cuda_declared_worker_runs_without_the_address_space_cap_and_a_cpu_one_keeps_it() {
    let seen = |device: &str| -> (String, bool) {
        let dir = scratch(&format!("as-{}", device.replace(':', "_")));
        let m = serde_json::json!({
            "name": "as", "op": "matmul",
            "precision": {"input": "f32", "accumulator": "f32", "output": "f32"},
            "device": device,
            "command": ["sh", "-c", format!("echo \"$(ulimit -v) $(cut -d' ' -f5 /proc/$$/stat) $$\" > seen\n{HELLO}\nsleep 30")]
        });
        std::fs::write(dir.join("m.json"), m.to_string()).expect("write");
        let c = ExternalCandidate::new(Manifest::load(&dir.join("m.json")).expect("manifest"), Duration::from_secs(10), 4096);
        assert_eq!(c.memory_limit_mb(), if device == "cpu" { 4096 } else { 0 }, "{device}");
        assert!(c.restart().expect("worker starts"), "{device}");
        let s = std::fs::read_to_string(dir.join("seen")).expect("seen");
        let v: Vec<&str> = s.split_whitespace().collect();
        // Its own process group, not the test's.
        let own_group = v.len() == 3 && v[1] != unsafe { libc::getpgrp() }.to_string();
        drop(c);
        (v[0].to_string(), own_group)
    };
    assert_eq!(seen("cpu"), ((4096 * 1024).to_string(), true));
    assert_eq!(seen("cuda"), ("unlimited".to_string(), true));
    assert_eq!(seen("cuda:1"), ("unlimited".to_string(), true));
}
