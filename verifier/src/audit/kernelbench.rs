//! KernelBench's correctness check, the other side of the audit's differential: the part kverify
//! decides, the trial seeds. The worker runs the trials (`kernelbench_check.py`)
//! and [`super::judge::kernelbench`] reads them; the tolerance is [`super::judge::KB_TOL`].
//!
//! Source, reimplemented (no code copied): ScalingIntelligence/KernelBench, MIT licence,
//! Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini — `run_and_check_correctness` in
//! `src/eval.py` at commit 48642c5 (2025-01-13; KernelBench v0.1, `atol = rtol = 1e-2`), whose
//! seeding is unchanged in `src/kernelbench/eval.py` at 423217d (2026-03-05). Called with
//! `seed = 42` and `num_correct_trials = 5` (`scripts/eval_from_generations.py`), it seeds
//! PyTorch's CPU generator with the seed and draws each trial's seed as
//! `torch.randint(0, 2**32 - 1, (1,)).item()`, one draw per trial.
//!
//! That generator is `at::mt19937` (`aten/src/ATen/core/MT19937RNGEngine.h`): MT19937 whose
//! state is initialised from the low 32 bits of the seed by the reference `init_genrand`. A
//! `randint` over a range below 2^32 on the CPU takes one 32-bit output `v` per element and
//! returns `v mod range + low` (`uniform_int_from_to_distribution`,
//! `aten/src/ATen/core/DistributionsHelper.h`), here `v mod (2^32 − 1)`. Tested without PyTorch
//! against the C++ standard's MT19937 check value, NumPy's legacy `MT19937` seeding (the same
//! `init_genrand`) and PyTorch's well-known `torch.manual_seed(42); torch.rand(3)`
//! (`tests/audit_kernelbench.rs`); against PyTorch itself by an ignored test in
//! `tests/audit_torch.rs`.

/// Trials of KernelBench's check (`num_correct_trials` of its evaluation scripts).
pub const TRIALS: usize = 5;

/// Upper bound (exclusive) of KernelBench's `torch.randint(0, 2**32 - 1, (1,))`.
pub const SEED_RANGE: u64 = (1 << 32) - 1;

/// MT19937, seeded as PyTorch's CPU generator is by `torch.manual_seed`.
pub struct Mt19937 {
    state: [u32; 624],
    next: usize,
}

impl Mt19937 {
    /// The generator after `torch.manual_seed(seed)`: `init_genrand` of the seed's low 32 bits.
    pub fn new(seed: u64) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed as u32;
        for i in 1..624 {
            let p = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(p ^ (p >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { state, next: 624 }
    }

    /// The next 32-bit output (tempered).
    pub fn next_u32(&mut self) -> u32 {
        if self.next == 624 {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn twist(&mut self) {
        for k in 0..624 {
            let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % 624] & 0x7fff_ffff);
            let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
            self.state[k] = self.state[(k + 397) % 624] ^ (y >> 1) ^ mag;
        }
        self.next = 0;
    }
}

/// PyTorch's CPU `randint(0, SEED_RANGE)` of one 32-bit generator output `v`.
pub fn randint_of(v: u32) -> u64 {
    u64::from(v) % SEED_RANGE
}

/// KernelBench's trial seeds for base `seed`: `n` values in [0, 2^32 − 1), the first `n` of the
/// sequence `run_and_check_correctness` draws after `torch.manual_seed(seed)`.
pub fn trial_seeds(seed: u64, n: usize) -> Vec<u64> {
    let mut g = Mt19937::new(seed);
    (0..n).map(|_| randint_of(g.next_u32())).collect()
}
