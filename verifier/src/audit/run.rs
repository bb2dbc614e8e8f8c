//! Running the audit: one worker process per job, a fresh one per kernel, the per-kernel
//! protocol (which side a failure is charged to), the store, the progress line.
//!
//! Attribution: every gate is two requests. `prepare` does the reference-side work (the task's
//! own Model in fp64 and fp32); its failure, crash or timeout makes the gate `n/a`, never
//! charged. `run` does the candidate side; its exception, crash, hang or exit is the gate's
//! `error` (the kernel is `broken`). After any process failure the next request starts a fresh
//! worker and loads the task again.

use super::judge::{self, GateResult, Status, GATES};
use super::build_ahead::Builds;
use super::judge_probes;
use super::{load_corpus, load_records, select, AuditError, Kernel, Record, Store};
use crate::candidate::process::Worker;
use crate::candidate::CandidateError;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Protocol the audit worker announces.
pub const PROTOCOL: &str = "kverify-audit/1";

/// Longest answer line from an audit worker.
pub const MAX_LINE: usize = 1 << 22;

/// How the audit runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker command; `--device DEV` is appended.
    pub worker: Vec<String>,
    /// Devices; job j uses `devices[j % len]`.
    pub devices: Vec<String>,
    /// Parallel jobs (worker processes).
    pub jobs: usize,
    /// Time limit of one request.
    pub time_limit: Duration,
    /// Address-space limit of a worker, MiB (0: none; CUDA needs none).
    pub mem_limit_mb: u64,
    /// Base seed (KernelBench uses 42 to build both models).
    pub seed: u64,
    /// Print a progress line on stderr.
    pub progress: bool,
    /// `TORCH_EXTENSIONS_DIR` of every worker: the persistent `load_inline` build cache.
    pub extensions_dir: Option<PathBuf>,
    /// Parallel workers of the build-ahead pass (0: none): before judging, every `load_inline`
    /// kernel still to judge is loaded once, so its extension is compiled into the cache by
    /// up to this many builds at a time, and judging then loads it from there.
    pub build_jobs: usize,
    /// Start no kernel (and no build) after this long: the kernels in flight finish and are
    /// recorded, the rest are left for a rerun — a time-boxed run (a job's wall-time limit, a
    /// lent machine) loses nothing in flight, where a kill loses every kernel it interrupts.
    pub stop_after: Option<Duration>,
}

impl Options {
    /// Whether `stop_after` has passed since `t0` (never without one).
    pub(crate) fn past_deadline(&self, t0: Instant) -> bool {
        self.stop_after.is_some_and(|d| t0.elapsed() >= d)
    }
}

/// The default worker: `python3 <crate>/python/audit_worker.py`.
pub fn default_worker() -> Vec<String> {
    vec!["python3".into(), concat!(env!("CARGO_MANIFEST_DIR"), "/python/audit_worker.py").into()]
}

/// Seeds of each gate's inputs, derived from the base seed.
fn seeds(gate: &str, base: u64) -> Vec<u64> {
    let (off, n) = match gate {
        "KB" => (1, 5),
        "CMP-01" => (101, 3),
        "RES-01" => (201, 2),
        "ORD-02" => (301, 1),
        "ORD-01" => (501, 3),
        "ORD-03" => (601, 2),
        "EXC-02" => (701, 2),
        "PRC-01" => (801, 1),
        "PRC-02" => (811, 1),
        "CMP-03" => (901, 2),
        _ => (401, 1),
    };
    (0..n).map(|i| base + off + i).collect()
}

enum Answer {
    Facts(Value),
    /// The worker answered `ok: false` (an exception); `env`: this machine's fault (no CUDA).
    Raised { error: String, env: bool },
}

/// One job's worker and what it has loaded.
pub(crate) struct Session<'a> {
    opts: &'a Options,
    device: String,
    worker: Option<Worker>,
    next_id: u64,
    loaded: bool,
    /// The kernel's ModelNew build failure, once seen: every later gate of the kernel reports it
    /// without loading again (a failing `load_inline` build is a full nvcc compile).
    build_failure: Option<GateResult>,
}

impl<'a> Session<'a> {
    pub(crate) fn new(opts: &'a Options, device: String) -> Self {
        Session { device, opts, worker: None, next_id: 0, loaded: false, build_failure: None }
    }

    /// Loads `k` (reference, then candidate) into a worker; what a build-ahead thread does.
    pub(crate) fn load(&mut self, k: &Kernel) -> Result<(), AuditError> {
        ensure_loaded(self, k).map(|_| ())
    }

    /// Ends the worker (killed with its process tree) and forgets the kernel's build outcome:
    /// a build thread's next kernel must be loaded, not reported as the last one's failure.
    pub(crate) fn drop_worker(&mut self) {
        self.worker = None;
        self.loaded = false;
        self.build_failure = None;
    }

    fn start(&mut self) -> Result<(), AuditError> {
        self.worker = None;
        self.loaded = false;
        let mut cmd = Command::new(&self.opts.worker[0]);
        cmd.args(&self.opts.worker[1..]).arg("--device").arg(&self.device);
        if let Some(d) = &self.opts.extensions_dir {
            cmd.env("TORCH_EXTENSIONS_DIR", d);
        }
        // The CPU's honest fp32 run of a GPU task (docs/audit.md, CMP-01) gets the cores left
        // per parallel worker: single-threaded, GPU-sized tasks and subnormal probes (which the
        // CPU runs at a fraction of its speed) made it most of an audit's time on the H200.
        let threads = if self.device.starts_with("cuda") { (std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) / self.opts.jobs.max(1)).max(1) } else { 1 };
        cmd.env("KVERIFY_CPU_THREADS", threads.to_string());
        let w = Worker::spawn(cmd, PROTOCOL, self.opts.time_limit, self.opts.mem_limit_mb, MAX_LINE).map_err(|e| AuditError::Worker(e.to_string()))?;
        self.worker = Some(w);
        Ok(())
    }

    /// One request; on a process failure the worker is gone (killed with its tree).
    fn req(&mut self, mut msg: Value) -> Result<Result<Answer, CandidateError>, AuditError> {
        if self.worker.is_none() {
            self.start()?;
        }
        self.next_id += 1;
        msg["id"] = json!(self.next_id);
        let Some(w) = self.worker.as_mut() else { return Err(AuditError::Worker("no worker".into())) };
        let line = match w.request(&msg.to_string(), self.opts.time_limit) {
            Ok(l) => l,
            Err(e) => {
                self.worker = None;
                self.loaded = false;
                return Ok(Err(e));
            }
        };
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                self.worker = None;
                self.loaded = false;
                return Ok(Err(CandidateError::Protocol(format!("answer is not JSON ({e}): {}", line.chars().take(200).collect::<String>()))));
            }
        };
        if v.get("id").and_then(Value::as_u64) != Some(self.next_id) {
            self.worker = None;
            self.loaded = false;
            return Ok(Err(CandidateError::Protocol(format!("answer {} to request {}", v.get("id").cloned().unwrap_or(Value::Null), self.next_id))));
        }
        if v.get("ok").and_then(Value::as_bool) == Some(true) {
            Ok(Ok(Answer::Facts(v.get("facts").cloned().unwrap_or(Value::Null))))
        } else {
            let error = v.get("error").and_then(Value::as_str).unwrap_or("no message").to_string();
            Ok(Ok(Answer::Raised { error, env: v.get("env").and_then(Value::as_bool).unwrap_or(false) }))
        }
    }
}

/// How a kernel's audit ended early.
enum Stop {
    Skipped(String),
    RefError(String),
}

/// Load the task (reference, then candidate) into the session's worker if not loaded.
/// `Err(Stop)` ends the kernel; `Ok(Some(r))` is a candidate failure that every gate reports.
fn ensure_loaded(s: &mut Session, k: &Kernel) -> Result<Result<Option<GateResult>, Stop>, AuditError> {
    if let Some(f) = &s.build_failure {
        return Ok(Ok(Some(f.clone())));
    }
    if s.loaded && s.worker.is_some() {
        return Ok(Ok(None));
    }
    match s.req(json!({"cmd": "load", "ref_code": k.ref_code, "seed": s.opts.seed}))? {
        Err(e) => return Ok(Err(Stop::RefError(format!("reference failed at load: {e}")))),
        Ok(Answer::Raised { error, env: true }) => return Ok(Err(Stop::Skipped(format!("reference needs what this machine lacks: {error}")))),
        Ok(Answer::Raised { error, .. }) => return Ok(Err(Stop::RefError(format!("reference raised at load: {error}")))),
        Ok(Answer::Facts(_)) => {}
    }
    let failure = match s.req(json!({"cmd": "load_candidate", "custom_code": k.custom_code}))? {
        Err(e) => GateResult::new(Status::Error, format!("ModelNew build: {e}")),
        Ok(Answer::Raised { error, .. }) => GateResult::new(Status::Error, format!("ModelNew build: {error}")),
        Ok(Answer::Facts(f)) => {
            if f.get("candidate_ok").and_then(Value::as_bool) == Some(true) {
                s.loaded = true;
                return Ok(Ok(None));
            }
            let err = f.get("candidate_error").and_then(Value::as_str).unwrap_or("").to_string();
            if f.get("env").and_then(Value::as_bool) == Some(true) {
                return Ok(Err(Stop::Skipped(format!("ModelNew needs what this machine lacks: {err}"))));
            }
            GateResult::new(Status::Error, format!("ModelNew failed to build: {err}"))
        }
    };
    s.build_failure = Some(failure.clone());
    Ok(Ok(Some(failure)))
}

/// One gate: prepare (reference side) then run (candidate side), judged.
fn gate(s: &mut Session, k: &Kernel, g: &str) -> Result<Result<GateResult, Stop>, AuditError> {
    match ensure_loaded(s, k)? {
        Err(stop) => return Ok(Err(stop)),
        Ok(Some(failure)) => return Ok(Ok(failure)),
        Ok(None) => {}
    }
    let params = json!({"seeds": seeds(g, s.opts.seed), "runs": 5, "atol": judge::KB_TOL, "rtol": judge::KB_TOL});
    let prep = match s.req(json!({"cmd": "prepare", "gate": g, "params": params}))? {
        Err(e) => return Ok(Ok(GateResult::new(Status::Na, format!("reference side failed: {e}")))),
        Ok(Answer::Raised { error, env: true }) => return Ok(Err(Stop::Skipped(format!("reference needs what this machine lacks: {error}")))),
        Ok(Answer::Raised { error, .. }) => return Ok(Ok(GateResult::new(Status::Na, format!("reference side raised: {error}")))),
        Ok(Answer::Facts(f)) => f,
    };
    let run = match s.req(json!({"cmd": "run", "gate": g, "params": params}))? {
        Err(e) => return Ok(Ok(GateResult::new(Status::Error, e.to_string()))),
        Ok(Answer::Raised { error, env: true }) => return Ok(Err(Stop::Skipped(format!("ModelNew needs what this machine lacks: {error}")))),
        Ok(Answer::Raised { error, .. }) => return Ok(Ok(GateResult::new(Status::Error, format!("exception: {error}")))),
        Ok(Answer::Facts(f)) => f,
    };
    Ok(Ok(match g {
        "KB" => judge::kernelbench(&run),
        "CMP-01" => judge::cmp01(&prep, &run),
        "RES-01" => judge::res01(&prep, &run),
        "ORD-02" => {
            // Once more in a fresh process.
            s.worker = None;
            s.loaded = false;
            let fresh = match ensure_loaded(s, k)? {
                Err(stop) => return Ok(Err(stop)),
                Ok(Some(failure)) => return Ok(Ok(failure)),
                Ok(None) => match s.req(json!({"cmd": "run", "gate": g, "params": {"seeds": seeds(g, s.opts.seed), "runs": 1}}))? {
                    Err(e) => return Ok(Ok(GateResult::new(Status::Error, format!("fresh process: {e}")))),
                    Ok(Answer::Raised { error, .. }) => return Ok(Ok(GateResult::new(Status::Error, format!("fresh process: exception: {error}")))),
                    Ok(Answer::Facts(f)) => f.get("hashes").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str).map(str::to_string),
                },
            };
            judge::ord02(&prep, &run, fresh.as_deref())
        }
        "EXC-01" => judge::exc01(&prep, &run),
        "EXC-02" => judge_probes::exc02(&prep, &run),
        _ => judge_probes::value_gate(g, &prep, &run),
    }))
}

/// Audit one kernel in a fresh worker.
fn audit_kernel(s: &mut Session, k: &Kernel) -> Result<Record, AuditError> {
    let t0 = Instant::now();
    s.build_failure = None;
    s.start()?;
    let mut rec = Record {
        key: k.key.clone(),
        row: k.row,
        level: k.level,
        task: k.task,
        accepted: k.accepted,
        control: k.control,
        load_inline: k.load_inline,
        status: "judged".into(),
        note: String::new(),
        gates: BTreeMap::new(),
        verdict: None,
        device: s.device.clone(),
        elapsed_s: 0.0,
        gate_s: BTreeMap::new(),
    };
    for g in GATES {
        let tg = Instant::now();
        let r = gate(s, k, g)?;
        rec.gate_s.insert(g.to_string(), (tg.elapsed().as_secs_f64() * 1000.0).round() / 1000.0);
        match r {
            Ok(r) => {
                rec.gates.insert(g.to_string(), r);
            }
            Err(Stop::Skipped(why)) => {
                rec.status = "skipped".into();
                rec.note = why;
                rec.gates.clear();
                break;
            }
            Err(Stop::RefError(why)) => {
                rec.status = "reference-error".into();
                rec.note = why;
                rec.gates.clear();
                break;
            }
        }
    }
    s.worker = None;
    if rec.status == "judged" {
        rec.verdict = Some(judge::verdict(&rec.gates).to_string());
    }
    rec.elapsed_s = (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    Ok(rec)
}

/// What `audit` did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Rows in the corpus.
    pub corpus_rows: usize,
    /// Kernels selected (this shard, after `--limit`).
    pub selected: usize,
    /// Already recorded before this run (skipped as finished).
    pub resumed: usize,
    /// Judged by this run.
    pub judged_now: usize,
    /// Selected but left unjudged because `stop_after` passed (a rerun continues with them).
    pub left: usize,
    /// The record directory.
    pub out: PathBuf,
}

/// Audit the corpus's kernels of one shard into `out`, skipping those already recorded there.
/// Records are appended as each kernel ends, so a kill loses at most the kernels in flight.
pub fn audit(corpus: &Path, out: &Path, shard: (usize, usize), limit: Option<usize>, control: bool, opts: &Options) -> Result<Outcome, AuditError> {
    if opts.worker.is_empty() || opts.devices.is_empty() {
        return Err(AuditError::Usage("empty worker command or device list".into()));
    }
    let (corpus_rows, kernels) = load_corpus(corpus, control)?;
    let sel = select(kernels, shard, limit);
    let done = load_records(out)?;
    let todo: VecDeque<Kernel> = sel.iter().filter(|k| !done.contains_key(&k.key)).cloned().collect();
    let resumed = sel.len() - todo.len();
    let total = todo.len();
    let mut store = Store::open(out, shard)?;
    // Kernels that need no build first, so the judges work while the builds run beside them
    // (build_ahead.rs); a `load_inline` kernel is judged once its own build has ended.
    let builds: VecDeque<Kernel> = if opts.build_jobs > 0 { todo.iter().filter(|k| k.load_inline).cloned().collect() } else { VecDeque::new() };
    let (mut plain, inline): (Vec<Kernel>, Vec<Kernel>) = todo.into_iter().partition(|k| !k.load_inline);
    plain.extend(inline);
    let queue = Arc::new(Mutex::new(VecDeque::from(plain)));
    let abort = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let building = Arc::new(Builds::start(builds, opts, &abort, t0));
    let (tx, rx) = mpsc::channel::<Result<Record, AuditError>>();
    let mut handles = Vec::new();
    for j in 0..opts.jobs.max(1).min(total.max(1)) {
        let (queue, abort, tx, opts, building) = (Arc::clone(&queue), Arc::clone(&abort), tx.clone(), opts.clone(), Arc::clone(&building));
        handles.push(std::thread::spawn(move || {
            let mut s = Session::new(&opts, opts.devices[j % opts.devices.len()].clone());
            loop {
                if abort.load(Ordering::SeqCst) || opts.past_deadline(t0) {
                    break;
                }
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(k) = next else { break };
                building.wait_for(&k);
                // A build may end past the deadline: then the kernel is left for the rerun.
                if opts.past_deadline(t0) {
                    if let Ok(mut q) = queue.lock() {
                        q.push_front(k);
                    }
                    break;
                }
                if tx.send(audit_kernel(&mut s, &k)).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut n = 0;
    let mut first_err = None;
    for r in rx {
        match r {
            Ok(rec) => {
                store.append(&rec)?;
                n += 1;
                if opts.progress {
                    progress(n, total, t0.elapsed(), &rec);
                }
            }
            Err(e) => {
                abort.store(true, Ordering::SeqCst);
                first_err.get_or_insert(e);
            }
        }
    }
    for h in handles {
        if h.join().is_err() {
            first_err.get_or_insert(AuditError::Worker("a judging thread panicked".into()));
        }
    }
    // Every kernel judged waited for its own build, so builds still running serve nobody (a
    // stop or an abort): they are not waited for; their workers die with this process.
    abort.store(true, Ordering::SeqCst);
    let building = Arc::try_unwrap(building).map_err(|_| AuditError::Worker("a judge outlived the audit".into()))?;
    if opts.progress && total > 0 {
        eprintln_safe("");
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let left = total - n;
    if let Err(e) = building.finish(left == 0) {
        // The records are complete; a build thread that could not start a worker only cost
        // the judges the time to build themselves.
        eprintln_safe(&format!("kverify audit: warning: a build-ahead thread stopped: {e}"));
    }
    Ok(Outcome { corpus_rows, selected: sel.len(), resumed, judged_now: n, left, out: out.to_path_buf() })
}

fn eprintln_safe(s: &str) {
    let _ = writeln!(std::io::stderr(), "{s}");
}

/// The progress line: count, percentage, elapsed, ETA, last kernel.
fn progress(n: usize, total: usize, el: Duration, rec: &Record) {
    let per = el.as_secs_f64() / n as f64;
    let eta = per * (total - n) as f64;
    let width = 30;
    let filled = width * n / total.max(1);
    let what = rec.verdict.clone().unwrap_or_else(|| rec.status.clone());
    let _ = write!(
        std::io::stderr(),
        "\r[{}{}] {n}/{total} {:.0}%  elapsed {}  ETA {}  {} {what}\x1b[K",
        "#".repeat(filled),
        "-".repeat(width - filled),
        100.0 * n as f64 / total.max(1) as f64,
        hms(el.as_secs_f64()),
        hms(eta),
        rec.key
    );
    let _ = std::io::stderr().flush();
}

fn hms(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}
