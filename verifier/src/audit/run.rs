//! Running the audit: the units to judge (the kernels of one corpus row, sharing its
//! reference), one judging thread per job taking units from a queue beside the build-ahead
//! threads, the record stores, the progress line. The per-unit protocol — which side a failure
//! is charged to — is [`super::session`].

use super::build_ahead::{self, Builds};
use super::devices::Devices;
use super::session::{audit_unit, Session};
use super::partial::{self, GateDone};
use super::progress;
use super::{load_corpus, load_records, select, AuditError, Kernel, Record, Store, CONTROL_SUFFIX};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
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
    /// Devices; judging (and build) thread j uses `devices[j % len]` (devices.rs).
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

/// What a judging thread tells the recording one: a gate judged (kept in the progress file
/// until its kernel's record is written), or a unit's records.
enum Msg {
    Gate(GateDone),
    Unit(Result<Vec<Record>, AuditError>),
}

/// What `audit` did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Rows in the corpus.
    pub corpus_rows: usize,
    /// Kernels selected (this shard, after `--limit`; with a control folder, controls included).
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

/// Where the records go: `out`, and with `--with-control` the controls' own folder.
pub struct Folders<'a> {
    /// The candidates' records (or the controls', with `--control`).
    pub out: &'a Path,
    /// `--with-control DIR`: each task's positive control judged beside its candidate, in the
    /// same worker (one reference side for both), its records in DIR.
    pub control_out: Option<&'a Path>,
}

/// The units of this shard still to judge, and how many kernels were selected and recorded.
/// Without a control folder every unit is one kernel; with one, the shard and `limit` select
/// rows among the controls (every row has one) and each row's unit is its control (slot 0,
/// run first in every gate) and its candidate if it has one.
fn units(corpus: &Path, dirs: &Folders, shard: (usize, usize), limit: Option<usize>, control: bool) -> Result<(usize, usize, usize, Vec<Vec<Kernel>>), AuditError> {
    let mut done = load_records(dirs.out)?;
    let (rows, sel) = match dirs.control_out {
        None => {
            let (rows, kernels) = load_corpus(corpus, control)?;
            let sel: Vec<Vec<Kernel>> = select(kernels, shard, limit).into_iter().map(|k| vec![k]).collect();
            (rows, sel)
        }
        Some(c) => {
            done.extend(load_records(c)?);
            let (rows, controls) = load_corpus(corpus, true)?;
            let mut cands: std::collections::HashMap<usize, Kernel> = load_corpus(corpus, false)?.1.into_iter().map(|k| (k.row, k)).collect();
            let sel = select(controls, shard, limit).into_iter().map(|c| std::iter::once(c.clone()).chain(cands.remove(&c.row)).collect()).collect();
            (rows, sel)
        }
    };
    let selected = sel.iter().map(Vec::len).sum::<usize>();
    let todo: Vec<Vec<Kernel>> = sel.into_iter().map(|u| u.into_iter().filter(|k| !done.contains_key(&k.key)).collect::<Vec<_>>()).filter(|u| !u.is_empty()).collect();
    let left = todo.iter().map(Vec::len).sum::<usize>();
    Ok((rows, selected, selected - left, todo))
}

/// Audit the corpus's kernels of one shard into `dirs`, skipping those already recorded there.
/// Records are appended as each unit ends, so a kill loses at most the units in flight.
pub fn audit(corpus: &Path, dirs: &Folders, shard: (usize, usize), limit: Option<usize>, control: bool, opts: &Options) -> Result<Outcome, AuditError> {
    if opts.worker.is_empty() || opts.devices.is_empty() {
        return Err(AuditError::Usage("empty worker command or device list".into()));
    }
    if let Some(c) = dirs.control_out {
        let same = |a: &Path, b: &Path| std::path::absolute(a).ok().zip(std::path::absolute(b).ok()).is_some_and(|(a, b)| a == b || a.canonicalize().ok().is_some_and(|x| b.canonicalize().ok() == Some(x)));
        if same(dirs.out, c) {
            return Err(AuditError::Usage(format!("--with-control {} is the --out folder: the controls need their own (one summary each)", c.display())));
        }
    }
    if control && dirs.control_out.is_some() {
        return Err(AuditError::Usage("--control and --with-control exclude each other: --with-control judges the controls beside the candidates".into()));
    }
    let (corpus_rows, selected, resumed, todo) = units(corpus, dirs, shard, limit, control)?;
    let total = selected - resumed;
    // Gates judged by an interrupted run, for the kernels still to record (partial.rs).
    let mut progress_in = partial::load(dirs.out)?;
    if let Some(c) = dirs.control_out {
        progress_in.extend(partial::load(c)?);
    }
    let progress_in = Arc::new(progress_in);
    let mut store = Store::open(dirs.out, shard)?;
    let mut gates_store = Store::open_partial(dirs.out, shard)?;
    let mut control_store = match dirs.control_out {
        Some(c) => Some((Store::open(c, shard)?, Store::open_partial(c, shard)?)),
        None => None,
    };
    // Units that need no build first, so the judges work while the builds run beside them
    // (build_ahead.rs); a unit with a `load_inline` kernel is judged once its build has ended.
    let builds: VecDeque<Kernel> = if opts.build_jobs > 0 { todo.iter().flatten().filter(|k| k.load_inline).cloned().collect() } else { VecDeque::new() };
    let (mut plain, inline): (Vec<Vec<Kernel>>, Vec<Vec<Kernel>>) = todo.into_iter().partition(|u| !u.iter().any(|k| k.load_inline));
    plain.extend(inline);
    let queue = Arc::new(Mutex::new(VecDeque::from(plain)));
    // Units that ran out of device memory beside other workers, judged again once the queue
    // is empty, each holding its judge's device alone (devices.rs).
    let retry: Arc<Mutex<VecDeque<Vec<Kernel>>>> = Arc::new(Mutex::new(VecDeque::new()));
    let judges = opts.jobs.max(1).min(total.max(1));
    let devices = Arc::new(Devices::new(&opts.devices, judges, build_ahead::threads(builds.len(), opts)));
    let abort = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let lead: build_ahead::Lead = {
        let (queue, n) = (Arc::clone(&queue), build_ahead::LEAD_UNITS_PER_JOB * opts.jobs.max(1));
        Arc::new(move || queue.lock().map(|q| q.iter().take_while(|u| !u.iter().any(|k| k.load_inline)).count() <= n).unwrap_or(true))
    };
    let building = Arc::new(Builds::start(builds, opts, &abort, t0, lead, Arc::clone(&devices)));
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut handles = Vec::new();
    for j in 0..judges {
        let (queue, retry, devices, abort, tx, opts, building, done) = (Arc::clone(&queue), Arc::clone(&retry), Arc::clone(&devices), Arc::clone(&abort), tx.clone(), opts.clone(), Arc::clone(&building), Arc::clone(&progress_in));
        handles.push(std::thread::spawn(move || {
            let d = devices.of(j);
            let mut s = Session::new(&opts, devices.name(d).to_string());
            loop {
                if abort.load(Ordering::SeqCst) || opts.past_deadline(t0) {
                    break;
                }
                let (next, alone) = match queue.lock().ok().and_then(|mut q| q.pop_front()) {
                    Some(u) => (u, false),
                    // A judge that sends a unit to the retry queue loops back to it itself, so
                    // none is left behind when the others end.
                    None => match retry.lock().ok().and_then(|mut q| q.pop_front()) {
                        Some(u) => (u, true),
                        None => break,
                    },
                };
                next.iter().for_each(|k| building.wait_for(k));
                // A build may end past the deadline: then the unit is left for the rerun.
                if opts.past_deadline(t0) {
                    break;
                }
                let gtx = tx.clone();
                let mut on_gate = move |g: GateDone| {
                    let _ = gtx.send(Msg::Gate(g));
                };
                let judged = if alone {
                    let _g = devices.alone(d);
                    s.exclusive = true;
                    audit_unit(&mut s, &next, &done, &mut on_gate)
                } else {
                    let _g = devices.shared(d);
                    s.exclusive = !devices.contended(d);
                    audit_unit(&mut s, &next, &done, &mut on_gate)
                };
                let r = match judged {
                    Ok(Some(recs)) => Ok(recs),
                    Ok(None) => {
                        if let Ok(mut q) = retry.lock() {
                            q.push_back(next);
                        }
                        continue;
                    }
                    Err(e) => Err(e),
                };
                if tx.send(Msg::Unit(r)).is_err() {
                    break;
                }
            }
        }));
    }
    drop(tx);
    let mut n = 0;
    let mut first_err = None;
    let mut shown = opts.progress.then(progress::Progress::stderr);
    for m in rx {
        let r = match m {
            Msg::Gate(g) => {
                match control_store.as_mut() {
                    Some((_, cg)) if g.key.ends_with(CONTROL_SUFFIX) => cg.append(&g)?,
                    _ => gates_store.append(&g)?,
                }
                continue;
            }
            Msg::Unit(r) => r,
        };
        match r {
            Ok(recs) => {
                for rec in recs {
                    match control_store.as_mut() {
                        Some((cs, _)) if rec.control => cs.append(&rec)?,
                        _ => store.append(&rec)?,
                    }
                    n += 1;
                    if let Some(p) = shown.as_mut() {
                        p.show(&progress::line(n, total, t0.elapsed(), &rec.key, rec.verdict.as_deref().unwrap_or(&rec.status)));
                    }
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
    // Every unit judged waited for its own builds, so builds still running serve nobody (a
    // stop or an abort): they are not waited for; their workers die with this process.
    abort.store(true, Ordering::SeqCst);
    let building = Arc::try_unwrap(building).map_err(|_| AuditError::Worker("a judge outlived the audit".into()))?;
    if let Some(p) = shown.as_mut() {
        p.finish();
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let left = total - n;
    // The progress of every kernel now recorded is spent (partial.rs, `prune`).
    for dir in std::iter::once(dirs.out).chain(dirs.control_out) {
        partial::prune(dir, &load_records(dir)?)?;
    }
    if let Err(e) = building.finish(left == 0) {
        // The records are complete; a build thread that could not start a worker only cost
        // the judges the time to build themselves.
        eprintln_safe(&format!("kverify audit: warning: a build-ahead thread stopped: {e}"));
    }
    Ok(Outcome { corpus_rows, selected, resumed, judged_now: n, left, out: dirs.out.to_path_buf() })
}

fn eprintln_safe(s: &str) {
    let _ = writeln!(std::io::stderr(), "{s}");
}
