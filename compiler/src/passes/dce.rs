//! Dead-code elimination on the tile IR: removes every instruction whose effect reaches no store
//! to global memory.
//!
//! Why: a kernel instance may drop an output (`kernel dqkwg_gla = dqkwg_channel(dw: none);`,
//! docs/language.md "Kernel instances"); the code that only fed it — its loads, products and
//! loops — must go with it, or the instance saves nothing. LLVM cannot do this for us: copies
//! into shared memory, wgmma and TMA are barriers and inline assembly to it.
//!
//! Liveness (a fixpoint over the whole kernel, loops included, since a variable written in one
//! iteration may be read in the next):
//! * a `store` is live;
//! * the instruction defining a value a live instruction reads is live, and so is the loop
//!   whose index it is;
//! * every write of a variable that a live instruction reads is live (an accumulating matrix
//!   product reads its destination too);
//! * the loops around a live instruction are live (their bounds with them).
//!
//! Everything else is removed, loads included: a load, view or gather whose value is never used
//! is not made, so an out-of-bounds index there is not reported (docs/language.md, "What happens
//! out of bounds"). The interpreter runs the same IR, so it agrees with the GPU. The TMEM
//! lifecycle instructions do not exist yet: the pass runs before the TMEM planner.

use cranelift_entity::{EntitySet, PrimaryMap, SecondaryMap};

use crate::ir::{Block, Inst, Kernel, Op, ValueDef, Var};

/// Removes `k`'s dead instructions; returns how many were removed (0 for almost every kernel
/// written by hand: the unused-`let` and unused-load lints flag such code). The `let` bindings
/// and variables named in `keep` stay, with what they depend on (the interpreter's `--dump`).
pub fn run(k: &mut Kernel, keep: &[String]) -> usize {
    // The loop around each instruction, and every writer of each variable.
    let mut parent: SecondaryMap<Inst, Option<Inst>> = SecondaryMap::new();
    let mut writers: SecondaryMap<Var, Vec<Inst>> = SecondaryMap::new();
    let mut all = vec![];
    fn index(k: &Kernel, b: Block, outer: Option<Inst>, parent: &mut SecondaryMap<Inst, Option<Inst>>, writers: &mut SecondaryMap<Var, Vec<Inst>>, all: &mut Vec<Inst>) {
        for &i in &k.blocks[b].insts {
            parent[i] = outer;
            all.push(i);
            for v in k.inst_vars(i).1 {
                writers[v].push(i);
            }
            if let Op::For { body, .. } = k.insts[i].op {
                index(k, body, Some(i), parent, writers, all);
            }
        }
    }
    index(k, k.body, None, &mut parent, &mut writers, &mut all);

    let mut live: EntitySet<Inst> = EntitySet::new();
    let mut work: Vec<Inst> = all.iter().copied().filter(|&i| has_effect(&k.insts[i].op)).collect();
    for (name, v) in &k.bindings {
        if keep.contains(name) {
            // A name for a loop index keeps its loop.
            let (ValueDef::Result(d) | ValueDef::LoopIndex(d)) = k.values[*v].def;
            work.push(d);
        }
    }
    for (v, d) in k.vars.iter() {
        if keep.contains(&d.name) {
            work.extend(writers[v].iter().copied());
        }
    }
    let mut var_seen: EntitySet<Var> = EntitySet::new();
    while let Some(i) = work.pop() {
        if !live.insert(i) {
            continue;
        }
        work.extend(parent[i]);
        for a in k.inst_args(i) {
            match k.values[a].def {
                ValueDef::Result(d) | ValueDef::LoopIndex(d) => work.push(d),
            }
        }
        for v in k.inst_vars(i).0 {
            if var_seen.insert(v) {
                work.extend(writers[v].iter().copied());
            }
        }
    }

    let removed = all.len() - all.iter().filter(|&&i| live.contains(i)).count();
    if removed > 0 {
        let blocks: Vec<Block> = k.blocks.keys().collect();
        for b in blocks {
            k.blocks[b].insts.retain(|&i| live.contains(i));
        }
        // The removed instructions stay in `k.insts` (entities are not renumbered): make them
        // inert, so that a scan of every instruction ("has the kernel an MMA?") cannot see them
        // nor the variables renumbered below.
        for &i in &all {
            if !live.contains(i) {
                k.insts[i] = crate::ir::InstData { op: Op::ConstInt(0), result: None };
            }
        }
        // A removed instruction may have had a name: drop the debug names of removed values.
        let values = &k.values;
        k.bindings.retain(|(_, v)| match values[*v].def {
            ValueDef::Result(d) | ValueDef::LoopIndex(d) => live.contains(d),
        });
        drop_unused_vars(k);
    }
    removed
}

/// Renumbers `k`'s variables without those no instruction touches any more, so that no later
/// pass plans memory, a TMEM header or a layout for them.
fn drop_unused_vars(k: &mut Kernel) {
    let mut used: EntitySet<Var> = EntitySet::new();
    k.walk(|i| {
        let (r, w) = k.inst_vars(i);
        for v in r.into_iter().chain(w) {
            used.insert(v);
        }
    });
    if k.vars.keys().all(|v| used.contains(v)) {
        return;
    }
    let mut vars = PrimaryMap::new();
    let mut new: SecondaryMap<Var, Option<Var>> = SecondaryMap::new();
    for (v, d) in k.vars.iter() {
        if used.contains(v) {
            new[v] = Some(vars.push(d.clone()));
        }
    }
    let to = |v: &mut Var| *v = new[*v].expect("a touched variable is kept");
    let mut kept = vec![];
    k.walk(|i| kept.push(i));
    for i in kept {
        match &mut k.insts[i].op {
            Op::ReadVar(v) | Op::WriteVar(v, _) => to(v),
            Op::Mma { dst, a, b, .. } => {
                to(dst);
                to(&mut a.var);
                to(&mut b.var);
            }
            _ => {}
        }
    }
    k.vars = vars;
}

/// Whether an operation has an effect outside the kernel's own values and variables.
/// Exhaustive, so a new op must decide.
fn has_effect(op: &Op) -> bool {
    match op {
        Op::Store { .. } | Op::TmemAlloc { .. } | Op::TmemRelinquish | Op::TmemDealloc { .. } => true,
        Op::ConstInt(_)
        | Op::ConstFloat(_)
        | Op::ProgramId(_)
        | Op::Size(_)
        | Op::ScalarParam(_)
        | Op::Unary(..)
        | Op::Binary(..)
        | Op::Cmp(..)
        | Op::Select(..)
        | Op::Cast(..)
        | Op::Splat(_)
        | Op::Iota(_)
        | Op::Mask(_)
        | Op::Reduce(..)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Gather { .. }
        | Op::Insert { .. }
        | Op::Scan { .. }
        | Op::Load { .. }
        | Op::ReadVar(_)
        | Op::WriteVar(..)
        | Op::Mma { .. }
        | Op::For { .. } => false,
    }
}
