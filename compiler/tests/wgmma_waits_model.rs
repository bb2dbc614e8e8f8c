//! The sm_90a wgmma waits of `passes::barriers` against a reference model, over random
//! straight-line programs of MMAs into two register accumulators from four operand tiles,
//! overwrites of those tiles, and reads and updates of the accumulators.
//!
//! The model (PTX ISA, wgmma.commit_group / wgmma.wait_group): each deferred MMA is one group;
//! `wait_group N` completes every group but the newest N. Before an instruction that writes an
//! operand tile, no group reading it may be in flight and a barrier must follow the wait (other
//! warps' groups); before one that touches an accumulator's registers (other than an MMA
//! chaining into it), no group into it may be in flight; nothing is in flight at the block's
//! end. The pass must also not over-wait: its `N` is the most groups that may stay in flight
//! (or, before an instruction touching a settled accumulator while others run, the count in
//! flight: a wait that returns at once, for ptxas), and no wait is placed elsewhere.

use proptest::prelude::*;
use tilec::ir::read::read_module;
use tilec::ir::validate::validate;
use tilec::ir::{Op, Var};
use tilec::passes::target_plan;
use tilec::target::Target;

#[derive(Clone, Debug)]
enum Step {
    /// `mma acc[d] (+)= tile[a] @ tile[b]`
    Mma { d: usize, a: usize, b: usize, accumulate: bool },
    /// `write tile[t] = load x`
    Overwrite { t: usize },
    /// `store out = read acc[d]`
    Store { d: usize },
    /// `write acc[d] = read acc[d] * 2.0`
    Scale { d: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize, 0..4usize, 0..4usize, any::<bool>()).prop_map(|(d, a, b, accumulate)| Step::Mma { d, a, b, accumulate }),
        2 => (0..4usize).prop_map(|t| Step::Overwrite { t }),
        1 => (0..2usize).prop_map(|d| Step::Store { d }),
        1 => (0..2usize).prop_map(|d| Step::Scale { d }),
    ]
}

/// IR text: tiles var0..var3, accumulators var4, var5 (each first written by an MMA `=`).
fn program(steps: &[Step]) -> String {
    let mut s = String::from(
        "kernel w(p0 x: bf16[64, 64], p1 y: out f32[64, 64])\n  sizes []\n  grid (1, 1, 1) threads 128\n  var0 t0: smem bf16[64, 64]\n  var1 t1: smem bf16[64, 64]\n  var2 t2: smem bf16[64, 64]\n  var3 t3: smem bf16[64, 64]\n  var4 acc0: tmem f32[64, 64]\n  var5 acc1: tmem f32[64, 64]\n{\n",
    );
    let (mut i, mut v) = (0, 0);
    let mut line = |s: &mut String, text: String| {
        s.push_str(&format!("  i{i}: {text}\n"));
        i += 1;
    };
    line(&mut s, format!("v{v} = const 0 : i32"));
    v += 1;
    line(&mut s, format!("v{v} = const 2.0 : f32"));
    v += 1;
    let mut all = (0..4).map(|t| Step::Overwrite { t }).collect::<Vec<_>>();
    all.push(Step::Mma { d: 0, a: 0, b: 1, accumulate: false });
    all.push(Step::Mma { d: 1, a: 2, b: 3, accumulate: false });
    all.extend(steps.iter().cloned());
    all.push(Step::Store { d: 0 });
    all.push(Step::Store { d: 1 });
    for st in all {
        match st {
            Step::Mma { d, a, b, accumulate } => line(&mut s, format!("mma var{} {}= var{a} @ var{b}", d + 4, if accumulate { "+" } else { "" })),
            Step::Overwrite { t } => {
                line(&mut s, format!("v{v} = load p0[v0..+64, v0..+64] : bf16[64, 64]"));
                line(&mut s, format!("write var{t} = v{v}"));
                v += 1;
            }
            Step::Store { d } => {
                line(&mut s, format!("v{v} = read var{} : f32[64, 64]", d + 4));
                line(&mut s, format!("store p1[v0..+64, v0..+64] = v{v}"));
                v += 1;
            }
            Step::Scale { d } => {
                line(&mut s, format!("v{v} = read var{} : f32[64, 64]", d + 4));
                line(&mut s, format!("v{} = mul v{v}, v1 : f32[64, 64]", v + 1));
                line(&mut s, format!("write var{} = v{}", d + 4, v + 1));
                v += 2;
            }
        }
    }
    s.push_str("}\n");
    s
}

/// Checks the pass's waits, barriers and deferrals on `text` against the model.
fn check(text: &str) -> Result<(), String> {
    let m = read_module(text).map_err(|e| format!("{e}"))?;
    let k = &m.kernels[0];
    let v = validate(k).map_err(|e| format!("{e:?}"))?;
    let tp = target_plan::run(&v, Target::Sm90a).map_err(|d| d.message.clone())?;
    let acc = |x: Var| tp.roles.accumulator(x).is_some();
    // In flight, oldest first: (MMA, accumulator, operand tiles).
    let mut flight: Vec<(tilec::ir::Inst, Var, [Var; 2])> = vec![];
    for &i in &k.blocks[k.body].insts {
        if k.insts[i].result.is_some_and(|r| tp.fusion.is_fused(r)) {
            continue;
        }
        let (r, w) = k.inst_vars(i);
        let touched: Vec<Var> = r.iter().chain(&w).copied().chain(tp.fusion.leaves(k, i).1).collect();
        let (chain_into, writes_tile) = match &k.insts[i].op {
            Op::Mma { dst, a, b, .. } => (Some((*dst, a.var, b.var)), None),
            Op::WriteVar(x, _) if !acc(*x) => (None, Some(*x)),
            _ => (None, None),
        };
        // The newest group this instruction needs complete, and whether through a tile.
        let mut need: Option<(usize, bool)> = None;
        for (j, (_, dst, ops)) in flight.iter().enumerate() {
            let regs = touched.contains(dst) && !chain_into.is_some_and(|(d, a, b)| d == *dst && a != *dst && b != *dst);
            let tile = writes_tile.is_some_and(|t| ops.contains(&t));
            if regs || tile {
                need = Some((j, tile || need.is_some_and(|n| n.1)));
            }
        }
        let wait = tp.barriers.wait_before(i);
        let expected = match need {
            Some((j, _)) => Some((flight.len() - 1 - j) as u32),
            None if !flight.is_empty() && chain_into.is_none() && touched.iter().any(|&x| acc(x)) => Some(flight.len() as u32),
            None => None,
        };
        if wait != expected {
            return Err(format!("{i}: wait {wait:?}, the model needs {expected:?} (in flight: {flight:?})"));
        }
        if need.is_some_and(|n| n.1) && !tp.barriers.before(i) {
            return Err(format!("{i} overwrites a tile an MMA in flight reads: no barrier after the wait"));
        }
        if let Some(n) = wait {
            let keep = (n as usize).min(flight.len());
            flight.drain(..flight.len() - keep);
        }
        if let Some((dst, a, b)) = chain_into {
            if !tp.barriers.deferred(i) {
                return Err(format!("{i}: an MMA into a register accumulator not left in flight"));
            }
            flight.push((i, dst, [a, b]));
        }
    }
    if !flight.is_empty() && !tp.barriers.settles_at_end(k.body) {
        return Err(format!("the block ends with {} MMA(s) in flight and no wait", flight.len()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn waits_match_the_model(steps in prop::collection::vec(step(), 0..14)) {
        let text = program(&steps);
        prop_assert_eq!(check(&text), Ok(()), "{}", text);
    }
}

/// A fixed program with every kind of wait: two groups in flight and a chained MMA, an update
/// of one accumulator while the other's group runs (`wait_group 1`), an overwritten operand
/// (wait and barrier), and the block's end.
#[test]
fn the_model_accepts_a_fixed_program_with_every_kind_of_wait() {
    let steps = [
        Step::Mma { d: 0, a: 1, b: 2, accumulate: true },
        Step::Mma { d: 1, a: 3, b: 0, accumulate: true },
        Step::Scale { d: 0 },
        Step::Overwrite { t: 0 },
        Step::Mma { d: 1, a: 0, b: 0, accumulate: true },
        Step::Store { d: 0 },
    ];
    assert_eq!(check(&program(&steps)), Ok(()));
}
