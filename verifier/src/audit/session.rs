//! The per-kernel protocol of the audit: one worker process judging one *unit* — the kernels
//! of one corpus row that share its reference `Model` (a candidate alone, or with
//! `--with-control` the task's own Model as a second candidate) — gate by gate.
//!
//! Attribution: every gate is a `prepare` (the reference side: the task's own Model in fp64 and
//! fp32; its failure, crash or timeout makes the gate `n/a`, never charged) and then one `run`
//! per candidate slot (the candidate side: its exception, crash, hang or exit is that kernel's
//! `error`, and it is `broken`). The reference side is measured once per unit, which is why the
//! positive control rides along with the candidate at the cost of its own runs only.
//!
//! Isolation between slots: after a candidate raises or its process fails, the worker is
//! replaced before anything else runs in it (a raise can leave a CUDA context with a sticky
//! error or half-changed global state); a slot still to run in that gate, and the next gate,
//! start in a fresh worker with the reference side measured again. The control is slot 0, so
//! in every gate it runs before the candidate. Process-wide numerics switches a candidate sets
//! (TF32, reduced-precision reductions, cuDNN modes) are the worker's to contain: it restores
//! the task's own state for the reference side and each slot's own state for its runs.

use super::judge::{self, GateResult, Status, GATES};
use super::judge_probes;
use super::kernelbench;
use super::partial::{fingerprint, GateDone, Progress};
use super::run::{Options, MAX_LINE, PROTOCOL};
use super::{AuditError, Kernel, Record};
use crate::candidate::process::Worker;
use crate::candidate::CandidateError;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Instant;

/// Seeds of each gate's inputs, derived from the base seed: KB's is the base itself (the worker
/// draws KernelBench's [`kernelbench::TRIALS`] trial seeds from it with its own PyTorch, as
/// KernelBench does), the others base + a gate offset. ORD-01 takes CMP-01's
/// seeds (the same fp64 references and honest runs: CMP-01 judges their worst element, ORD-01
/// their root mean square) and PRC-02 PRC-01's probe, so the worker computes each reference once.
fn seeds(gate: &str, base: u64) -> Vec<u64> {
    let (off, n) = match gate {
        "KB" => (0, 1),
        "CMP-01" | "ORD-01" => (101, 3),
        "RES-01" => (201, 2),
        "ORD-02" => (301, 1),
        "ORD-03" => (601, 2),
        "EXC-02" => (701, 2),
        "PRC-01" | "PRC-02" => (801, 1),
        "CMP-03" => (901, 2),
        _ => (401, 1),
    };
    (0..n).map(|i| base + off + i).collect()
}

enum Answer {
    Facts(Value),
    /// The worker answered `ok: false` (an exception); `env`: this machine's fault (no CUDA).
    Raised { error: String, env: bool },
    /// The device ran out of memory while other workers shared it: the unit is judged again
    /// with the GPU to itself (never an n/a or a charge taken under contention).
    OutOfMemory,
}

/// How a unit's audit ended early (for all its kernels: the reference is theirs in common).
pub(crate) enum Stop {
    Skipped(String),
    RefError(String),
    /// Out of memory under contention: no record; the unit goes to the exclusive queue.
    OutOfMemory,
}

/// A candidate slot once its loading was tried.
#[derive(Clone)]
enum Slot {
    /// Loaded (or not yet tried in this worker).
    Ready,
    /// ModelNew failed to build: every gate of the kernel reports it, without loading again (a
    /// failing `load_inline` build is a full nvcc compile).
    Failed(GateResult),
    /// ModelNew needs what this machine lacks.
    Skipped(String),
}

impl Slot {
    /// What a gate records for a slot that will not run (`Some`): its build failure, or
    /// nothing when skipped; `None` for a slot ready to run.
    fn settled(&self) -> Option<Option<GateResult>> {
        match self {
            Slot::Ready => None,
            Slot::Failed(f) => Some(Some(f.clone())),
            Slot::Skipped(_) => Some(None),
        }
    }
}

/// One job's worker and what it has loaded.
pub(crate) struct Session<'a> {
    opts: &'a Options,
    device: String,
    worker: Option<Worker>,
    next_id: u64,
    /// The reference and every `Ready` slot are loaded in `worker`.
    loaded: bool,
    /// Workers started so far: a prepared reference side lives in the worker it was made in.
    generation: u64,
    /// Per slot of the unit being judged.
    slots: Vec<Slot>,
    /// The unit has the device to itself: an out-of-memory answer is then final (the
    /// reference side's is `n/a`, the candidate's its `error`), not a reason to retry.
    pub(crate) exclusive: bool,
}

impl<'a> Session<'a> {
    pub(crate) fn new(opts: &'a Options, device: String) -> Self {
        Session { device, opts, worker: None, next_id: 0, loaded: false, generation: 0, slots: Vec::new(), exclusive: false }
    }

    /// Loads `k` (reference, then candidate) into a worker; what a build-ahead thread does.
    pub(crate) fn load(&mut self, k: &Kernel) -> Result<(), AuditError> {
        self.slots = vec![Slot::Ready];
        ensure_loaded(self, std::slice::from_ref(k)).map(|_| ())
    }

    /// Ends the worker (killed with its process tree) and forgets the unit's build outcomes:
    /// a build thread's next kernel must be loaded, not reported as the last one's failure.
    pub(crate) fn drop_worker(&mut self) {
        self.lose_worker();
        self.slots.clear();
    }

    /// Ends the worker; the next request starts a fresh one and loads the unit again.
    fn lose_worker(&mut self) {
        self.worker = None;
        self.loaded = false;
    }

    fn start(&mut self) -> Result<(), AuditError> {
        self.lose_worker();
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
        self.generation += 1;
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
                self.lose_worker();
                return Ok(Err(e));
            }
        };
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                self.lose_worker();
                return Ok(Err(CandidateError::Protocol(format!("answer is not JSON ({e}): {}", line.chars().take(200).collect::<String>()))));
            }
        };
        if v.get("id").and_then(Value::as_u64) != Some(self.next_id) {
            self.lose_worker();
            return Ok(Err(CandidateError::Protocol(format!("answer {} to request {}", v.get("id").cloned().unwrap_or(Value::Null), self.next_id))));
        }
        if v.get("ok").and_then(Value::as_bool) == Some(true) {
            Ok(Ok(Answer::Facts(v.get("facts").cloned().unwrap_or(Value::Null))))
        } else {
            let error = v.get("error").and_then(Value::as_str).unwrap_or("no message").to_string();
            if !self.exclusive && v.get("oom").and_then(Value::as_bool) == Some(true) {
                return Ok(Ok(Answer::OutOfMemory));
            }
            Ok(Ok(Answer::Raised { error, env: v.get("env").and_then(Value::as_bool).unwrap_or(false) }))
        }
    }
}

/// Load the unit's reference, then every slot not known to fail, into the session's worker if
/// not loaded. `Err(Stop)` ends the unit; a slot's own failure is recorded in `s.slots`.
fn ensure_loaded(s: &mut Session, ks: &[Kernel]) -> Result<Result<(), Stop>, AuditError> {
    if s.loaded && s.worker.is_some() {
        return Ok(Ok(()));
    }
    let Some(first) = ks.first() else { return Ok(Ok(())) };
    match s.req(json!({"cmd": "load", "ref_code": first.ref_code, "seed": s.opts.seed}))? {
        Err(e) => return Ok(Err(Stop::RefError(format!("reference failed at load: {e}")))),
        Ok(Answer::Raised { error, env: true }) => return Ok(Err(Stop::Skipped(format!("reference needs what this machine lacks: {error}")))),
        Ok(Answer::Raised { error, .. }) => return Ok(Err(Stop::RefError(format!("reference raised at load: {error}")))),
        Ok(Answer::OutOfMemory) => return Ok(Err(Stop::OutOfMemory)),
        Ok(Answer::Facts(_)) => {}
    }
    for (i, k) in ks.iter().enumerate() {
        if !matches!(s.slots[i], Slot::Ready) {
            continue;
        }
        let slot = match s.req(json!({"cmd": "load_candidate", "custom_code": k.custom_code, "slot": i}))? {
            Ok(Answer::OutOfMemory) => return Ok(Err(Stop::OutOfMemory)),
            Err(e) => Slot::Failed(GateResult::new(Status::Error, format!("ModelNew build: {e}"))),
            Ok(Answer::Raised { error, .. }) => Slot::Failed(GateResult::new(Status::Error, format!("ModelNew build: {error}"))),
            Ok(Answer::Facts(f)) if f.get("candidate_ok").and_then(Value::as_bool) == Some(true) => Slot::Ready,
            Ok(Answer::Facts(f)) => {
                let err = f.get("candidate_error").and_then(Value::as_str).unwrap_or("").to_string();
                if f.get("env").and_then(Value::as_bool) == Some(true) {
                    Slot::Skipped(format!("ModelNew needs what this machine lacks: {err}"))
                } else {
                    Slot::Failed(GateResult::new(Status::Error, format!("ModelNew failed to build: {err}")))
                }
            }
        };
        s.slots[i] = slot;
        if s.worker.is_none() {
            // The candidate's load killed the process: the slots after it load in a fresh one.
            return ensure_loaded(s, ks);
        }
    }
    s.loaded = true;
    Ok(Ok(()))
}

/// The reference side of gate `g`, in a loaded worker: `Ok(facts)`, or the `n/a` every slot
/// gets when it fails.
fn prepare(s: &mut Session, ks: &[Kernel], g: &str, params: &Value) -> Result<Result<Result<Value, GateResult>, Stop>, AuditError> {
    if let Err(stop) = ensure_loaded(s, ks)? {
        return Ok(Err(stop));
    }
    Ok(Ok(match s.req(json!({"cmd": "prepare", "gate": g, "params": params}))? {
        Err(e) => Err(GateResult::new(Status::Na, format!("reference side failed: {e}"))),
        Ok(Answer::Raised { error, env: true }) => return Ok(Err(Stop::Skipped(format!("reference needs what this machine lacks: {error}")))),
        Ok(Answer::Raised { error, .. }) => Err(GateResult::new(Status::Na, format!("reference side raised: {error}"))),
        Ok(Answer::OutOfMemory) => return Ok(Err(Stop::OutOfMemory)),
        Ok(Answer::Facts(f)) => Ok(f),
    }))
}

/// One candidate-side request of slot `i`: its facts, or its `error` (the worker is replaced).
fn run_slot(s: &mut Session, i: usize, g: &str, params: Value, what: &str) -> Result<Result<Result<Value, GateResult>, Stop>, AuditError> {
    let r = s.req(json!({"cmd": "run", "gate": g, "params": params, "slot": i}))?;
    let failed = |d: String| {
        let r: Result<Value, GateResult> = Err(GateResult::new(Status::Error, d));
        r
    };
    Ok(Ok(match r {
        Err(e) => failed(format!("{what}{e}")),
        Ok(Answer::OutOfMemory) => return Ok(Err(Stop::OutOfMemory)),
        Ok(Answer::Facts(f)) => Ok(f),
        Ok(Answer::Raised { error, env }) => {
            s.lose_worker();
            if env {
                s.slots[i] = Slot::Skipped(format!("ModelNew needs what this machine lacks: {error}"));
            }
            failed(format!("{what}exception: {error}"))
        }
    }))
}

/// The reference side of a gate and the worker generation it lives in.
type Prepared = Option<(u64, Result<Value, GateResult>)>;

/// One gate for every slot of the unit that `need`s it: prepare (reference side) once, then each
/// such slot's run, judged; `judged(i, result)` is told of each as soon as it is known (a kill
/// during a later slot's run then keeps it). `None` for a slot that is skipped or not needed.
/// ORD-02's runs in a fresh process come after every slot's runs in this one, all in one fresh
/// worker ([`fresh_round`]): one more process per unit instead of one per slot.
fn gate(s: &mut Session, ks: &[Kernel], g: &str, need: &[bool], judged: &mut dyn FnMut(usize, &GateResult)) -> Result<Result<Vec<Option<GateResult>>, Stop>, AuditError> {
    if let Err(stop) = ensure_loaded(s, ks)? {
        return Ok(Err(stop));
    }
    let params = json!({"seeds": seeds(g, s.opts.seed), "runs": 5, "trials": kernelbench::TRIALS, "atol": judge::KB_TOL, "rtol": judge::KB_TOL});
    let mut prep: Prepared = None;
    let mut out = Vec::with_capacity(ks.len());
    // Slots whose ORD-02 waits for the fresh process: (slot, reference facts, run facts).
    let mut fresh: Vec<(usize, Value, Value)> = vec![];
    for i in 0..ks.len() {
        // Not needed: judged by an interrupted run.
        let r = if need[i] {
            match slot_gate(s, ks, g, i, &params, &mut prep)? {
                Err(stop) => return Ok(Err(stop)),
                Ok(SlotOutcome::Judged(r)) => r,
                Ok(SlotOutcome::Fresh(p, run)) => {
                    fresh.push((i, p, run));
                    None
                }
            }
        } else {
            None
        };
        if let Some(r) = &r {
            judged(i, r);
        }
        out.push(r);
    }
    if !fresh.is_empty() {
        let slots: Vec<usize> = fresh.iter().map(|f| f.0).collect();
        let hashes = match fresh_round(s, ks, g, &slots)? {
            Err(stop) => return Ok(Err(stop)),
            Ok(h) => h,
        };
        for ((i, p, run), h) in fresh.into_iter().zip(hashes) {
            let r = match h {
                Err(e) => e,
                Ok(h) => judge::ord02(&p, &run, h.as_ref().map(|(c, r)| judge::FreshRun { candidate: c, reference: r.as_deref() })),
            };
            judged(i, &r);
            out[i] = Some(r);
        }
    }
    // Judged for every slot: the worker drops what the gate cached (on the GPU, beside other
    // workers). A worker lost meanwhile holds nothing; a failure here changes no result.
    if s.worker.is_some() {
        let _ = s.req(json!({"cmd": "forget", "gate": g}))?;
    }
    Ok(Ok(out))
}

/// What [`slot_gate`] found for one slot: its result (`None`: skipped), or ORD-02's facts from
/// this process, to be judged once the fresh process has run ([`fresh_round`]).
enum SlotOutcome {
    Judged(Option<GateResult>),
    Fresh(Value, Value),
}

/// Gate `g` for slot `i`, preparing the reference side first when `prep` does not live in the
/// current worker.
fn slot_gate(s: &mut Session, ks: &[Kernel], g: &str, i: usize, params: &Value, prep: &mut Prepared) -> Result<Result<SlotOutcome, Stop>, AuditError> {
    let judged = |r: Option<GateResult>| Ok(Ok(SlotOutcome::Judged(r)));
    if let Some(r) = s.slots[i].settled() {
        return judged(r);
    }
    // Measured again in a fresh worker when an earlier slot's run lost the one it was in.
    if !(s.loaded && s.worker.is_some() && prep.as_ref().is_some_and(|(gen, _)| *gen == s.generation)) {
        let p = match prepare(s, ks, g, params)? {
            Err(stop) => return Ok(Err(stop)),
            Ok(p) => p,
        };
        *prep = Some((s.generation, p));
        // Loading again in the fresh worker may have found this slot failing now.
        if let Some(r) = s.slots[i].settled() {
            return judged(r);
        }
    }
    let p = match prep.as_ref().map(|(_, p)| p) {
        Some(Ok(p)) => p.clone(),
        Some(Err(na)) => return judged(Some(na.clone())),
        None => return Err(AuditError::Worker("gate without a reference side".into())),
    };
    let run = match run_slot(s, i, g, params.clone(), "")? {
        Err(stop) => return Ok(Err(stop)),
        Ok(Err(e)) => return judged(if matches!(s.slots[i], Slot::Skipped(_)) { None } else { Some(e) }),
        Ok(Ok(f)) => f,
    };
    judged(Some(match g {
        "KB" => judge::kernelbench(&run),
        "CMP-01" => judge::cmp01(&p, &run),
        "RES-01" => judge::res01(&p, &run),
        "ORD-02" => return Ok(Ok(SlotOutcome::Fresh(p, run))),
        "EXC-01" => judge::exc01(&p, &run),
        "EXC-02" => judge_probes::exc02(&p, &run),
        _ => judge_probes::value_gate(g, &p, &run),
    }))
}

/// ORD-02's run once more in a fresh process, per slot: its first hash there and the task's own
/// fp32 Model's hash in that process (`None` when its reference side did not run there).
type FreshHashes = Option<(String, Option<String>)>;

/// ORD-02's fresh-process runs of `slots`, in order, in one new worker: the task's Model once
/// (its hash there), then each slot once. A slot whose run loses the worker leaves the rest to
/// another new one (the Model runs again there first). Per slot: its hashes, `None` when it is
/// skipped, or its failure.
fn fresh_round(s: &mut Session, ks: &[Kernel], g: &str, slots: &[usize]) -> Result<Result<Vec<Result<FreshHashes, GateResult>>, Stop>, AuditError> {
    s.lose_worker();
    let first = |f: &Value, key: &str| f.get(key).and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str).map(str::to_string);
    let params = json!({"seeds": seeds(g, s.opts.seed), "runs": 1});
    let mut reference: (Option<u64>, Option<String>) = (None, None);
    let mut out = Vec::with_capacity(slots.len());
    for &i in slots {
        if let Err(stop) = ensure_loaded(s, ks)? {
            return Ok(Err(stop));
        }
        match &s.slots[i] {
            Slot::Failed(f) => {
                out.push(Err(f.clone()));
                continue;
            }
            Slot::Skipped(_) => {
                out.push(Ok(None));
                continue;
            }
            Slot::Ready => {}
        }
        if reference.0 != Some(s.generation) {
            let h = match prepare(s, ks, g, &params)? {
                Err(stop) => return Ok(Err(stop)),
                Ok(r) => r.ok().and_then(|f| first(&f, "ref_hashes")),
            };
            reference = (Some(s.generation), h);
        }
        let r = match run_slot(s, i, g, params.clone(), "fresh process: ")? {
            Err(stop) => return Ok(Err(stop)),
            Ok(r) => r,
        };
        out.push(r.map(|f| first(&f, "hashes").map(|c| (c, reference.1.clone()))));
    }
    Ok(Ok(out))
}

/// Audit one unit (the kernels of one row, sharing its reference) in a fresh worker: one
/// record per kernel, in the unit's order; `None` when it ran out of device memory beside
/// other workers (it is to be judged again with the device to itself). `done` holds the gates
/// an earlier, interrupted run judged (per kernel key, `partial.rs`): a gate judged for every
/// kernel of the unit is filled in, not run. `on_gate` is told of each gate as it is judged.
pub(crate) fn audit_unit(s: &mut Session, ks: &[Kernel], done: &Progress, on_gate: &mut dyn FnMut(GateDone)) -> Result<Option<Vec<Record>>, AuditError> {
    let t0 = Instant::now();
    s.drop_worker();
    s.slots = vec![Slot::Ready; ks.len()];
    let mut recs: Vec<Record> = ks.iter().map(|k| Record::judged(k, &s.device)).collect();
    let mut resumed_s = 0.0;
    let fps: Vec<String> = ks.iter().map(|k| fingerprint(k, s.opts.seed)).collect();
    let mut stop = None;
    for g in GATES {
        // Judged for this very kernel (same seed and programs) by an interrupted run.
        // Filled in per kernel; the gate runs for the kernels still without it (a kill between
        // the control's run and the candidate's leaves only the candidate's to do).
        let before: Vec<Option<&(GateResult, f64, String)>> = ks.iter().zip(&fps).map(|(k, fp)| done.get(&k.key).and_then(|m| m.get(g)).filter(|d| &d.2 == fp)).collect();
        let mut longest = 0.0_f64;
        for (rec, d) in recs.iter_mut().zip(&before) {
            if let Some(d) = d {
                rec.gates.insert(g.to_string(), d.0.clone());
                rec.gate_s.insert(g.to_string(), d.1);
                longest = longest.max(d.1);
            }
        }
        resumed_s += longest;
        let need: Vec<bool> = before.iter().map(Option::is_none).collect();
        if !need.contains(&true) {
            continue;
        }
        let tg = Instant::now();
        let secs = |t: Instant| (t.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        let mut judged = |i: usize, r: &GateResult| on_gate(GateDone { key: ks[i].key.clone(), gate: g.to_string(), result: r.clone(), s: secs(tg), fp: fps[i].clone() });
        let r = gate(s, ks, g, &need, &mut judged)?;
        let dt = secs(tg);
        match r {
            Ok(results) => {
                for ((rec, r), _) in recs.iter_mut().zip(results).zip(&need).filter(|(_, n)| **n) {
                    rec.gate_s.insert(g.to_string(), dt);
                    if let Some(r) = r {
                        rec.gates.insert(g.to_string(), r);
                    }
                }
            }
            Err(st) => {
                stop = Some(st);
                break;
            }
        }
    }
    let slots = std::mem::take(&mut s.slots);
    s.drop_worker();
    if matches!(stop, Some(Stop::OutOfMemory)) {
        return Ok(None);
    }
    let el = ((t0.elapsed().as_secs_f64() + resumed_s) * 1000.0).round() / 1000.0;
    for (rec, slot) in recs.iter_mut().zip(&slots) {
        match (&stop, slot) {
            (Some(Stop::Skipped(why)), _) | (None, Slot::Skipped(why)) => rec.end("skipped", why),
            (Some(Stop::RefError(why)), _) => rec.end("reference-error", why),
            (Some(Stop::OutOfMemory), _) => {}
            _ => rec.verdict = Some(judge::verdict(&rec.gates).to_string()),
        }
        rec.elapsed_s = el;
    }
    Ok(Some(recs))
}
