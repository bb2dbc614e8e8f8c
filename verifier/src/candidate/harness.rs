//! Runs one candidate call under a time limit and watches the runtime contract.
//!
//! Each call runs on its own thread: a panic becomes [`CandidateError::Crashed`], a call that
//! outlives the limit becomes [`CandidateError::TimedOut`] (the thread is abandoned; Rust cannot
//! kill a thread, which is why untrusted code belongs in an external process). The harness
//! fingerprints every input before and after the call (mutation) and compares output storage
//! with input storage (aliasing). Every runtime failure, mutation and alias is also logged with
//! the gate that saw it, so RES-01 can report them all.

use super::{Candidate, CandidateError, CandidateOutput};
use crate::references::Dims;
use crate::tensor::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Something RES-01 must hear about.
#[derive(Debug, Clone)]
pub struct Event {
    /// Gate during which it happened.
    pub gate: String,
    /// Shape of the call.
    pub dims: String,
    /// What happened.
    pub what: String,
}

/// Result of one call.
#[derive(Debug, Clone)]
pub struct CallResult {
    /// Outputs or the reason there are none.
    pub outcome: Result<Vec<Tensor>, CandidateError>,
    /// Indices of inputs whose bytes changed.
    pub mutated: Vec<usize>,
    /// (output, input) pairs sharing storage.
    pub aliased: Vec<(usize, usize)>,
    /// Wall time of the call.
    pub elapsed: Duration,
    /// The candidate confirmed the requested input layouts (see [`super::Layout`]).
    pub layouts_applied: bool,
}

/// Runs calls of one candidate.
pub struct Harness {
    /// The candidate.
    pub cand: Arc<dyn Candidate>,
    /// Time limit per call, before the allowance for its data ([`super::call_time_limit`]).
    pub time_limit: Duration,
    log: Mutex<Vec<Event>>,
}

enum Which {
    Forward,
    Layout(Vec<super::Layout>),
    Backward(Vec<Tensor>),
}

impl Harness {
    /// A harness with a per-call time limit.
    pub fn new(cand: Arc<dyn Candidate>, time_limit: Duration) -> Harness {
        Harness { cand, time_limit, log: Mutex::new(Vec::new()) }
    }

    /// Events logged so far.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Forward call on the candidate's own copy of `inputs`.
    pub fn forward(&self, gate: &str, dims: &Dims, inputs: Vec<Tensor>) -> CallResult {
        self.call(gate, dims, inputs, Which::Forward)
    }

    /// Forward call with the inputs handed over in `layouts` (CMP-03's layout probes).
    pub fn forward_layout(&self, gate: &str, dims: &Dims, inputs: Vec<Tensor>, layouts: Vec<super::Layout>) -> CallResult {
        self.call(gate, dims, inputs, Which::Layout(layouts))
    }

    /// Backward call.
    pub fn backward(&self, gate: &str, dims: &Dims, inputs: Vec<Tensor>, grads: Vec<Tensor>) -> CallResult {
        self.call(gate, dims, inputs, Which::Backward(grads))
    }

    fn call(&self, gate: &str, dims: &Dims, inputs: Vec<Tensor>, which: Which) -> CallResult {
        // The executors' own limits count the same tensors: the inputs and a backward's
        // incoming gradients, as kverify hands them over (before any widening).
        let grads = match &which {
            Which::Backward(g) => g.as_slice(),
            _ => &[],
        };
        let limit = super::call_time_limit(self.time_limit, inputs.iter().chain(grads));
        let before: Vec<u64> = inputs.iter().map(|t| t.checksum()).collect();
        let ids: Vec<usize> = inputs.iter().map(|t| t.storage_id()).collect();
        let (tx, rx) = mpsc::channel();
        let cand = Arc::clone(&self.cand);
        let d = dims.clone();
        let start = Instant::now();
        // Out-of-process candidates (external, tilec) enforce their own limit (and kill the
        // process); the thread limit is a backstop with a little grace so their report wins.
        let grace = if cand.kind() != "in-process" { Duration::from_secs(5) } else { Duration::ZERO };
        let spawned = std::thread::Builder::new().name("kverify-candidate".into()).spawn(move || {
            let mut inputs = inputs;
            let r = catch_unwind(AssertUnwindSafe(|| match &which {
                Which::Forward => cand.forward(&d, &mut inputs),
                Which::Layout(l) => cand.forward_layout(&d, &mut inputs, l),
                Which::Backward(g) => cand.backward(&d, &mut inputs, g),
            }));
            let r = r.unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                Err(CandidateError::Crashed(format!("panic: {msg}")))
            });
            let _ = tx.send((inputs, r));
        });
        if let Err(e) = spawned {
            return CallResult { outcome: Err(CandidateError::Io(e.to_string())), mutated: vec![], aliased: vec![], elapsed: start.elapsed(), layouts_applied: false };
        }
        let got = rx.recv_timeout(limit + grace);
        let elapsed = start.elapsed();
        let mut res = match got {
            Err(_) => CallResult {
                outcome: Err(CandidateError::TimedOut { limit_s: limit.as_secs_f64() }),
                mutated: vec![],
                aliased: vec![],
                elapsed,
                layouts_applied: false,
            },
            Ok((inputs_after, r)) => {
                let mutated: Vec<usize> =
                    inputs_after.iter().zip(&before).enumerate().filter(|(_, (t, h))| t.checksum() != **h).map(|(i, _)| i).collect();
                match r {
                    Err(e) => CallResult { outcome: Err(e), mutated, aliased: vec![], elapsed, layouts_applied: false },
                    Ok(CandidateOutput { outputs, reported_mutations, reported_aliases, layouts_applied }) => {
                        let mut mutated = mutated;
                        for m in reported_mutations {
                            if !mutated.contains(&m) {
                                mutated.push(m);
                            }
                        }
                        let mut aliased = reported_aliases;
                        for (o, t) in outputs.iter().enumerate() {
                            for (i, id) in ids.iter().enumerate() {
                                let now = inputs_after.get(i).map(|x| x.storage_id());
                                if t.storage_id() == *id || Some(t.storage_id()) == now {
                                    if !aliased.contains(&(o, i)) {
                                        aliased.push((o, i));
                                    }
                                }
                            }
                        }
                        CallResult { outcome: Ok(outputs), mutated, aliased, elapsed, layouts_applied }
                    }
                }
            }
        };
        res.mutated.sort_unstable();
        self.record(gate, dims, &res);
        res
    }

    fn record(&self, gate: &str, dims: &Dims, r: &CallResult) {
        let mut evs = Vec::new();
        if let Err(e) = &r.outcome {
            if e.is_runtime_failure() {
                evs.push(e.to_string());
            }
        }
        if !r.mutated.is_empty() {
            evs.push(format!("mutated input(s) {:?}", r.mutated));
        }
        if !r.aliased.is_empty() {
            evs.push(format!("output aliases input (output, input) {:?}", r.aliased));
        }
        if let Ok(mut log) = self.log.lock() {
            for what in evs {
                log.push(Event { gate: gate.into(), dims: dims.to_string(), what });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Harness;
    use crate::candidate::{Candidate, CandidateError, CandidateOutput};
    use crate::error_model::Precision;
    use crate::references::Dims;
    use crate::tensor::{DType, Tensor};
    use std::sync::Arc;
    use std::time::Duration;

    /// A backward that takes 300 ms and returns its incoming gradients.
    struct SlowBackward;

    impl Candidate for SlowBackward {
        fn name(&self) -> String {
            "slow-backward".into()
        }
        fn op_id(&self) -> String {
            "matmul".into()
        }
        fn precision(&self) -> Precision {
            Precision::F32
        }
        fn kind(&self) -> &'static str {
            "in-process"
        }
        fn forward(&self, _dims: &Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError> {
            Ok(CandidateOutput { outputs: vec![inputs[0].deep_copy()], ..Default::default() })
        }
        fn backward(&self, _dims: &Dims, _inputs: &mut [Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
            std::thread::sleep(Duration::from_millis(300));
            Ok(CandidateOutput { outputs: grads.iter().map(Tensor::deep_copy).collect(), ..Default::default() })
        }
    }

    #[test]
    fn a_backwards_limit_counts_its_incoming_gradients() {
        // A 100 ms limit; the gradient (25 MB of bf16) adds one second, the tiny input nothing:
        // the 300 ms backward finishes in time only if the gradient is counted.
        let h = Harness::new(Arc::new(SlowBackward), Duration::from_millis(100));
        let x = Tensor::from_f64(vec![4], &[1.0; 4], DType::F32);
        let g = Tensor::from_f64(vec![12_500_000], &vec![0.5; 12_500_000], DType::Bf16);
        let r = h.backward("CMP-02", &Dims(vec![]), vec![x.clone()], vec![g]);
        assert!(r.outcome.is_ok(), "{:?}", r.outcome.err());
        // The same call without the gradient's bytes times out at the bare limit.
        let small = Tensor::from_f64(vec![4], &[0.5; 4], DType::Bf16);
        let r = h.backward("CMP-02", &Dims(vec![]), vec![x], vec![small]);
        assert!(matches!(r.outcome, Err(CandidateError::TimedOut { limit_s }) if (limit_s - 0.1).abs() < 1e-3), "{:?}", r.outcome);
    }
}
