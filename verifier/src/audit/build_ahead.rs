//! The build-ahead pass over `load_inline` kernels, running beside the judging.
//!
//! A `load_inline` candidate is a full nvcc compile against PyTorch's headers (18–124 s each on
//! the H200's host, measured in the CUDA-L1 audit). `build_jobs` threads load each such kernel
//! once (reference, then candidate) and drop the worker, so the extension lands in
//! `TORCH_EXTENSIONS_DIR` and the judging pass loads it from there. The judges meanwhile take
//! the kernels that need no build (the run orders them first) and wait, per `load_inline`
//! kernel, only for that kernel's own build — before, every build had to end before the first
//! kernel was judged, and the slowest compile held up the whole audit. Build outcomes are not
//! recorded: the judging pass loads again and judges a failed build.
//!
//! Builds start only when the judges approach the `load_inline` units (`lead`: at most
//! [`LEAD_UNITS_PER_JOB`] × jobs units without a build still queued before them): on the H200 a
//! build is a minute or more of a contended core, and a time-boxed call spent about 45 % of its
//! worker time building kernels its judges never reached.

use super::run::Options;
use super::session::Session;
use super::{AuditError, Kernel};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use super::devices::Devices;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Units without a build that may still be queued, per judging job, when the builds start.
pub const LEAD_UNITS_PER_JOB: usize = 2;

/// Build threads for `kernels` kernels to build: `opts.build_jobs`, at most one per kernel.
pub fn threads(kernels: usize, opts: &Options) -> usize {
    opts.build_jobs.min(kernels)
}

/// Whether the judges are near enough the `load_inline` units for the builds to start.
pub type Lead = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Default)]
struct State {
    /// Keys whose build ended (built, failed or skipped).
    done: HashSet<String>,
    /// Build threads still running.
    alive: usize,
}

/// Builds in progress; [`Builds::wait_for`] blocks a judge until a kernel's build has ended.
pub struct Builds {
    state: Arc<(Mutex<State>, Condvar)>,
    handles: Vec<JoinHandle<Result<(), AuditError>>>,
}

impl Builds {
    /// Starts `opts.build_jobs` build threads over `kernels` (in order); none when there is
    /// nothing to build or `build_jobs` is 0. `abort`, or `opts.stop_after` past `t0`, stops
    /// them between builds.
    pub fn start(kernels: VecDeque<Kernel>, opts: &Options, abort: &Arc<AtomicBool>, t0: Instant, lead: Lead, devices: Arc<Devices>) -> Builds {
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let jobs = threads(kernels.len(), opts);
        if let Ok(mut s) = state.0.lock() {
            s.alive = jobs;
        }
        let queue = Arc::new(Mutex::new(kernels));
        let handles = (0..jobs)
            .map(|j| {
                let (queue, opts, state, abort, lead, devices) = (Arc::clone(&queue), opts.clone(), Arc::clone(&state), Arc::clone(abort), Arc::clone(&lead), Arc::clone(&devices));
                std::thread::spawn(move || {
                    // Whatever happens (an error, a panic), judges waiting on builds this
                    // thread will not do go on when it ends.
                    let _gone = Departure(&state);
                    while !lead() && !abort.load(Ordering::SeqCst) && !opts.past_deadline(t0) {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    build_loop(j, &queue, &opts, &state, &abort, t0, &devices)
                })
            })
            .collect();
        Builds { state, handles }
    }

    /// Blocks until `k`'s build has ended, or until no build thread is left to do it (the judge
    /// then builds it itself while loading). Kernels without `load_inline` never wait.
    pub fn wait_for(&self, k: &Kernel) {
        if !k.load_inline {
            return;
        }
        let (lock, cv) = &*self.state;
        let Ok(mut s) = lock.lock() else { return };
        while !s.done.contains(&k.key) && s.alive > 0 {
            s = match cv.wait(s) {
                Ok(s) => s,
                Err(_) => return,
            };
        }
    }

    /// Joins the build threads (`wait`), or leaves them to end with the process (builds that
    /// no judge waits for: their workers are killed when kverify exits); the first that could
    /// not start a worker is the error.
    pub fn finish(self, wait: bool) -> Result<(), AuditError> {
        if !wait {
            return Ok(());
        }
        let mut first = Ok(());
        for h in self.handles {
            let r = h.join().map_err(|_| AuditError::Worker("build thread panicked".into())).and_then(|r| r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// Counts a build thread out when dropped, however the thread ends.
struct Departure<'a>(&'a (Mutex<State>, Condvar));

impl Drop for Departure<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0 .0.lock() {
            s.alive -= 1;
        }
        self.0 .1.notify_all();
    }
}

/// A build holds its device's shared side, like a judge (a worker loading a task holds the
/// reference and the candidate on the GPU), so a unit judged again alone after running out of
/// memory has the device to itself (devices.rs).
fn build_loop(j: usize, queue: &Mutex<VecDeque<Kernel>>, opts: &Options, state: &(Mutex<State>, Condvar), abort: &AtomicBool, t0: Instant, devices: &Devices) -> Result<(), AuditError> {
    let d = devices.of(j);
    let mut s = Session::new(opts, devices.name(d).to_string());
    loop {
        if abort.load(Ordering::SeqCst) || opts.past_deadline(t0) {
            return Ok(());
        }
        let next = queue.lock().ok().and_then(|mut q| q.pop_front());
        let Some(k) = next else { return Ok(()) };
        let r = {
            let _shared = devices.shared(d);
            let r = s.load(&k); // starts a worker, loads the task: the build
            s.drop_worker();
            r
        };
        if let Ok(mut st) = state.0.lock() {
            st.done.insert(k.key.clone());
        }
        state.1.notify_all();
        r?;
    }
}
