//! Liveness of variables and values over program points.
//!
//! A live range is an inclusive interval `[first, last]` of program points
//! ([`ProgramPoints`], pre-order). Loops are handled structurally: if a variable (or value) is
//! defined outside a loop and touched inside it, it is live for the whole loop — the next
//! iteration may touch it again — so its range is extended to the loop's last point. Anything
//! first defined inside a loop body is re-created each iteration and stays local.

use cranelift_entity::SecondaryMap;
use petgraph::graphmap::DiGraphMap;

use crate::ir::{Inst, Kernel, ProgramPoints, Value, Var};

/// The def-use dependency graph: an edge `a → b` when instruction `b` reads the value that `a`
/// defines (or the induction variable of loop `a`).
pub fn dependency_graph(k: &Kernel) -> DiGraphMap<Inst, Value> {
    let mut g = DiGraphMap::new();
    k.walk(|i| {
        g.add_node(i);
        for a in k.inst_args(i) {
            let (crate::ir::ValueDef::Result(d) | crate::ir::ValueDef::LoopIndex(d)) = k.values[a].def;
            g.add_edge(d, i, a);
        }
    });
    g
}

/// An inclusive interval of program points.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    /// First point.
    pub start: u32,
    /// Last point (inclusive).
    pub end: u32,
}

impl Interval {
    /// Whether two intervals share a point.
    pub fn overlaps(self, o: Interval) -> bool {
        self.start <= o.end && o.start <= self.end
    }
    /// Whether `p` lies inside.
    pub fn contains(self, p: u32) -> bool {
        self.start <= p && p <= self.end
    }
}

/// Live ranges of a kernel's variables and values.
#[derive(Clone, Debug)]
pub struct Liveness {
    /// Program numbering the ranges refer to.
    pub points: ProgramPoints,
    /// Range of each variable that is accessed at all.
    pub vars: SecondaryMap<Var, Option<Interval>>,
    /// Range of each value, from its definition to its last use.
    pub values: SecondaryMap<Value, Option<Interval>>,
}

/// Computes live ranges.
pub fn liveness(k: &Kernel) -> Liveness {
    let points = ProgramPoints::compute(k);
    // Accesses: (entity, instruction) pairs; the first access of a var is its definition.
    let mut var_access: SecondaryMap<Var, Vec<Inst>> = SecondaryMap::new();
    k.walk(|i| {
        let (r, w) = k.inst_vars(i);
        for v in r.into_iter().chain(w) {
            var_access[v].push(i);
        }
    });
    let deps = dependency_graph(k);
    let range = |def: Inst, uses: &[Inst]| -> Interval {
        let d = points.point[def];
        // Loops enclosing a use but not the definition keep the entity alive throughout.
        let end = uses.iter().map(|&u| points.live_end(u, Some(d))).fold(d, u32::max);
        Interval { start: d, end }
    };
    let mut vars = SecondaryMap::new();
    for (v, _) in k.vars.iter() {
        let acc = &var_access[v];
        if let Some(&first) = acc.iter().min_by_key(|i| points.point[**i]) {
            vars[v] = Some(range(first, acc));
        }
    }
    let mut values = SecondaryMap::new();
    for def in deps.nodes() {
        let Some(v) = k.insts[def].result else { continue };
        let uses: Vec<Inst> = deps.edges(def).filter(|(_, _, val)| **val == v).map(|(_, u, _)| u).collect();
        values[v] = Some(range(def, &uses));
    }
    Liveness { points, vars, values }
}
