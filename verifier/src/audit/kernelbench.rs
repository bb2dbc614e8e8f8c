//! KernelBench's correctness check, the other side of the audit's differential: how many trials
//! it runs and from which seed. The worker draws the trial seeds and runs the trials
//! (`verifier/python/kernelbench_check.py`); [`super::judge::kernelbench`] reads them; the
//! tolerance is [`super::judge::KB_TOL`].
//!
//! Source, reimplemented (no code copied): ScalingIntelligence/KernelBench, MIT licence,
//! Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini — `run_and_check_correctness` in
//! `src/eval.py` at commit 48642c5 (2025-01-13; KernelBench v0.1, `atol = rtol = 1e-2`), whose
//! seeding is unchanged in `src/kernelbench/eval.py` at 423217d (2026-03-05). Called with
//! `seed = 42` and `num_correct_trials = 5` (`scripts/eval_from_generations.py`), it seeds
//! PyTorch's CPU generator with the seed and draws each trial's seed as
//! `torch.randint(0, 2**32 - 1, (1,)).item()`, one draw per trial.
//!
//! Why the worker draws them, with the PyTorch it runs on: what that `randint` returns depends
//! on the PyTorch version. PyTorch 2.11 maps one 32-bit MT19937 output `v` to `v mod (2^32 − 1)`
//! (seed 42: 1608637542, 3421126067, …); PyTorch 2.15 draws 64 bits for a range of 2^28 or more
//! (seed 42 gives other seeds). KernelBench run on a machine uses that machine's PyTorch, so
//! the audit does too; every trial's seed is in the KB facts.

/// Trials of KernelBench's check (`num_correct_trials` of its evaluation scripts).
pub const TRIALS: usize = 5;
