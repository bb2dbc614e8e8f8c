//! The arithmetic of an S-stage copy ring on mbarriers (PTX ISA 9.7.13.15), written once over
//! [`IndexArith`]: the code generator emits it (`backend::pipeline`, `backend::warp_spec`) and
//! the model test below runs it, so a wrong stage or parity in either fails the model.
//!
//! Positions `p = 0, 1, …` are iterations in execution order. Position `p` uses stage `p mod S`
//! in round `p / S`. An mbarrier's phases complete in order; waiting for parity `q` returns
//! once the phase of parity `q` has completed (the barrier's completed-phase count has the other
//! parity).
//! - Full barrier of a stage: one phase per fill, so position `p` waits for parity `round mod 2`.
//! - Empty barrier of a stage (warp specialisation): one phase per hand-back. The producer fills
//!   position `p ≥ S` after the hand-back of position `p − S`, the stage's previous round, whose
//!   phase has parity `(round − 1) mod 2 = (round + 1) mod 2`.
//! - A consumer whose MMA stays in flight into the next iteration hands back at the end of
//!   position `p ≥ 1` the stage of `p − 1`: `(p + S − 1) mod S`.

use super::IndexArith;

/// The ring stage of position `p` in an `s`-stage ring.
pub fn stage<A: IndexArith>(a: &A, p: A::V, s: u32) -> Result<A::V, A::E> {
    a.urem(p, s)
}

/// The parity of the full-barrier phase position `p` waits for (`s` stages).
pub fn fill_parity<A: IndexArith>(a: &A, p: A::V, s: u32) -> Result<A::V, A::E> {
    a.and(a.udiv(p, s)?, 1)
}

/// The parity of the empty-barrier phase the producer waits for before filling position
/// `p ≥ s`: the hand-back of position `p − s`.
pub fn empty_parity<A: IndexArith>(a: &A, p: A::V, s: u32) -> Result<A::V, A::E> {
    a.and(a.add(a.udiv(p, s)?, a.c(1))?, 1)
}

/// The stage a consumer hands back at the end of position `p ≥ 1`: position `p − 1`'s.
pub fn handed_back<A: IndexArith>(a: &A, p: A::V, s: u32) -> Result<A::V, A::E> {
    a.urem(a.add(p, a.c(s - 1))?, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{eval, Eval};

    /// One run of the warp-specialised protocol with `s` stages, `n` positions and `warps`
    /// consumer warps, the agents stepping in an order drawn from `seed`; the copies complete at
    /// once. Panics on a stage overwritten while a consumer may still read it, a consumer reading
    /// another position's tiles, or a deadlock.
    fn run(s: u32, n: u32, warps: usize, seed: u64) {
        let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = |m: usize| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) as usize % m
        };
        let stages = s as usize;
        let (mut full, mut empty, mut arrivals) = (vec![0u32; stages], vec![0u32; stages], vec![0usize; stages]);
        let mut data = vec![u32::MAX; stages];
        let mut producer = 0u32;
        // Per warp: the next position to run, and whether it waits for its stage (true) or
        // is between the wait and the end of the position (false).
        let mut warp: Vec<(u32, bool)> = vec![(0, true); warps];
        // Positions a warp may still be reading: its current one and, its MMA in flight, the one
        // before, until that is handed back at the end of the current one.
        let reading = |warp: &[(u32, bool)], p: u32| warp.iter().any(|&(q, waiting)| p + 1 == q || (p == q && !waiting));
        let done = |producer: u32, warp: &[(u32, bool)]| producer == n && warp.iter().all(|w| w.0 == n);
        let mut steps = 0;
        while !done(producer, &warp) {
            steps += 1;
            assert!(steps < 100_000, "no progress: s={s} n={n}");
            let mut can = vec![];
            if producer < n {
                let p = producer;
                let st = eval(stage(&Eval, p, s)) as usize;
                if p < s || empty[st] % 2 != eval(empty_parity(&Eval, p, s)) {
                    can.push(usize::MAX);
                }
            }
            for (w, &(p, waiting)) in warp.iter().enumerate() {
                if p == n {
                    continue;
                }
                let st = eval(stage(&Eval, p, s)) as usize;
                if !waiting || full[st] % 2 != eval(fill_parity(&Eval, p, s)) {
                    can.push(w);
                }
            }
            assert!(!can.is_empty(), "deadlock: s={s} n={n} seed={seed} producer at {producer}, warps {warp:?}");
            match can[next(can.len())] {
                usize::MAX => {
                    let p = producer;
                    let st = eval(stage(&Eval, p, s)) as usize;
                    // Whatever the stage held must no longer be read by anyone.
                    if data[st] != u32::MAX {
                        assert!(!reading(&warp, data[st]), "s={s} n={n} seed={seed}: position {p} overwrites stage {st} while position {} is read", data[st]);
                    }
                    data[st] = p;
                    full[st] += 1;
                    producer += 1;
                }
                w => {
                    let (p, waiting) = warp[w];
                    let st = eval(stage(&Eval, p, s)) as usize;
                    if waiting {
                        assert_eq!(data[st], p, "s={s} n={n} seed={seed}: warp {w} at position {p} reads position {}'s tiles", data[st]);
                        warp[w].1 = false;
                    } else {
                        if p >= 1 {
                            let back = eval(handed_back(&Eval, p, s)) as usize;
                            arrivals[back] += 1;
                            if arrivals[back] == warps {
                                arrivals[back] = 0;
                                empty[back] += 1;
                            }
                        }
                        warp[w] = (p + 1, true);
                    }
                }
            }
        }
    }

    #[test]
    fn the_protocol_never_overwrites_a_stage_in_use_and_never_deadlocks() {
        for s in 3..=4 {
            for n in 0..=13 {
                for seed in 0..40 {
                    run(s, n, 3, seed);
                }
            }
        }
    }

    #[test]
    fn the_formulas_at_a_glance() {
        // 4 stages: position 5 is stage 1 in round 1; it waits for the second fill (parity 1)
        // and, producer side, for the first hand-back (parity 0); position 4 hands back stage 3.
        assert_eq!(eval(stage(&Eval, 5, 4)), 1);
        assert_eq!(eval(fill_parity(&Eval, 5, 4)), 1);
        assert_eq!(eval(empty_parity(&Eval, 5, 4)), 0);
        assert_eq!(eval(handed_back(&Eval, 4, 4)), 3);
        assert_eq!(eval(handed_back(&Eval, 1, 4)), 0);
    }
}
