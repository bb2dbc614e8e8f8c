//! What the fuzz bench (`benches/fuzz.rs`) does with one input, shared with the regression test
//! over the corpus of minimized past failures (`tests/fuzz_corpus.rs`, `../tests/fuzz-corpus/`),
//! so a corpus file is replayed exactly as the fuzzer ran it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use tilec::frontend::{check_source, Options};
use tilec::interp::{run_kernel_with, Options as InterpOptions};
use tilec::ir::ParamKind;
use tilec_abi::rng::NormalRng;
use tilec_abi::tensor::HostTensor;

/// A seeded source of choices.
pub struct Rng(pub NormalRng);

impl Rng {
    /// Uniform in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.0.uniform_open0() * n as f64) as usize).min(n.saturating_sub(1))
    }
}

/// Which reader of untrusted input an input goes to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `check_source`, then the interpreter when the program checks.
    FrontEnd,
    /// `KernelMeta::from_json_str` and `validate`.
    Metadata,
    /// The safetensors reader.
    Safetensors,
    /// The size-expression parser and evaluator (every symbol = 2⁴⁰).
    SizeExpr,
}

/// What one input did, besides not panicking.
#[derive(Copy, Clone, Debug, Default)]
pub struct Outcome {
    /// The front end reported an internal compiler error (E0900).
    pub internal: bool,
    /// The program checked and ran on the interpreter.
    pub interpreted: bool,
}

/// Runs `input` through `reader`. Panics propagate (the caller catches and counts them).
pub fn exercise(reader: Reader, input: &[u8], rng: &mut Rng) -> Outcome {
    let mut o = Outcome::default();
    let text = String::from_utf8_lossy(input);
    match reader {
        Reader::FrontEnd => {
            let c = check_source(&text, &Options::default());
            o.internal = c.diags.iter().any(|d| d.code.as_str() == "E0900");
            if c.ok() {
                if let Some(k) = c.module.kernels.first() {
                    o.interpreted = true;
                    interpret(k, rng);
                }
            }
        }
        Reader::Metadata => {
            if let Ok(m) = tilec_abi::meta::KernelMeta::from_json_str(&text) {
                let _ = m.validate();
            }
        }
        Reader::Safetensors => {
            let _ = tilec_abi::st::from_bytes(input);
        }
        Reader::SizeExpr => {
            if let Ok(e) = tilec_abi::expr::SizeExpr::parse(&text) {
                let env: BTreeMap<String, i64> = e.symbols().into_iter().map(|s| (s, 1 << 40)).collect();
                let _ = e.eval(&env);
            }
        }
    }
    o
}

/// Runs `input` through every reader (replaying a file whose reader is unknown).
pub fn exercise_all(input: &[u8], rng: &mut Rng) -> Outcome {
    let mut o = Outcome::default();
    for r in [Reader::FrontEnd, Reader::Metadata, Reader::Safetensors, Reader::SizeExpr] {
        let x = exercise(r, input, rng);
        o.internal |= x.internal;
        o.interpreted |= x.interpreted;
    }
    o
}

/// Runs a kernel that checked cleanly on the interpreter with every size 1..=8 and zero inputs,
/// under a 2,000-step and 200 ms budget. Errors are fine; panics are not.
pub fn interpret(k: &tilec::ir::Kernel, rng: &mut Rng) {
    let env: BTreeMap<String, i64> = k.sizes.values().map(|s| (s.clone(), 1 + rng.below(8) as i64)).collect();
    let mut inputs = BTreeMap::new();
    for p in k.params.values() {
        let (elem, shape) = match &p.kind {
            ParamKind::Tensor { output: true, .. } => continue,
            ParamKind::Tensor { elem, shape, .. } => (*elem, shape.clone()),
            ParamKind::Scalar(e) => (*e, vec![]),
        };
        let Some(dtype) = tilec::interp::bind::dtype_of(elem) else { return };
        let Ok(dims) = shape.iter().map(|d| tilec::interp::bind::eval_size(k, d, &env).map(|x| x.max(0) as usize)).collect::<Result<Vec<_>, _>>() else { return };
        if dims.iter().product::<usize>() > 1 << 16 {
            return;
        }
        let Ok(t) = HostTensor::zeros(dtype, dims) else { return };
        inputs.insert(p.name.clone(), t);
    }
    let opts = InterpOptions { max_steps: 2_000, sizes: env, time_limit: Some(Duration::from_millis(200)), ..InterpOptions::default() };
    let _ = run_kernel_with(k, &inputs, &opts);
}

/// CPU time this thread has used (what the fuzzer's hang threshold measures: wall-clock time
/// grows with the machine's load, CPU time does not).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}
