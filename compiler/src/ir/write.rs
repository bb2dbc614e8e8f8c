//! Deterministic text form of the IR (`tilec check --emit ir`).
//!
//! Everything is printed in entity order or program order, never in hash order, so the output
//! is stable across runs and suitable for golden tests.

use std::fmt::Write;

use super::*;

/// Prints a whole module.
pub fn write_module(m: &Module) -> String {
    let mut s = String::new();
    for (n, k) in m.kernels.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        s.push_str(&write_kernel(k));
    }
    s
}

/// Prints one kernel.
pub fn write_kernel(k: &Kernel) -> String {
    let mut s = String::new();
    let params: Vec<String> = k
        .params
        .iter()
        .map(|(p, d)| match &d.kind {
            ParamKind::Tensor { elem, shape, output } => {
                let dims: Vec<String> = shape.iter().map(|e| k.size_text(e)).collect();
                let edge = if d.edge == Edge::Zeros { " edge(zeros)" } else { "" };
                format!("{p} {}: {}{elem}[{}]{edge}", d.name, if *output { "out " } else { "" }, dims.join(", "))
            }
            ParamKind::Scalar(e) => format!("{p} {}: {e}", d.name),
        })
        .collect();
    let _ = writeln!(s, "kernel {}({})", k.name, params.join(", "));
    let sizes: Vec<&str> = k.sizes.values().map(String::as_str).collect();
    let _ = writeln!(s, "  sizes [{}]", sizes.join(", "));
    let _ = write!(s, "  grid ({}, {}, {}) threads {}", k.size_text(&k.grid[0]), k.size_text(&k.grid[1]), k.size_text(&k.grid[2]), k.threads);
    for (t, n, _) in &k.ctas_per_sm {
        let _ = write!(s, " ctas_per_sm {} {n}", t.name());
    }
    s.push('\n');
    for (v, d) in k.vars.iter() {
        let _ = writeln!(s, "  {v} {}: {} {}", d.name, d.space, d.ty);
    }
    s.push_str("{\n");
    write_block(k, k.body, 1, &mut s);
    s.push_str("}\n");
    s
}

fn write_block(k: &Kernel, b: Block, depth: usize, s: &mut String) {
    for &i in &k.blocks[b].insts {
        let pad = "  ".repeat(depth);
        let _ = write!(s, "{pad}{i}: ");
        if let Op::For { lo, hi, reverse, body } = &k.insts[i].op {
            let iv = k.insts[i].result.map(|v| v.to_string()).unwrap_or_default();
            let rev = if *reverse { "reverse " } else { "" };
            let _ = writeln!(s, "for {iv} in {rev}{lo}..{hi} {{");
            write_block(k, *body, depth + 1, s);
            let _ = writeln!(s, "{pad}}}");
            continue;
        }
        if let Some(r) = k.insts[i].result {
            let _ = write!(s, "{r} = ");
        }
        s.push_str(&op_text(k, &k.insts[i].op));
        if let Some(r) = k.insts[i].result {
            let _ = write!(s, " : {}", k.values[r].ty);
        }
        s.push('\n');
    }
}

fn index_text(index: &[Index]) -> String {
    let parts: Vec<String> = index
        .iter()
        .map(|ix| match ix {
            Index::Point(v) => v.to_string(),
            Index::Range { start, len } => format!("{start}..+{len}"),
        })
        .collect();
    parts.join(", ")
}

fn op_text(k: &Kernel, op: &Op) -> String {
    match op {
        Op::ConstInt(c) => format!("const {c}"),
        Op::ConstFloat(c) => format!("const {c:?}"),
        Op::ProgramId(a) => format!("program_id {a}"),
        Op::Size(i) => format!("size {}", k.sizes.get(*i).map(String::as_str).unwrap_or("?")),
        Op::ScalarParam(p) => format!("param {p}"),
        Op::Unary(u, a) => format!("{} {a}", format!("{u:?}").to_lowercase()),
        Op::Binary(b, x, y) => format!("{} {x}, {y}", format!("{b:?}").to_lowercase()),
        Op::Cmp(c, x, y) => format!("cmp.{} {x}, {y}", format!("{c:?}").to_lowercase()),
        Op::Select(c, a, b) => format!("select {c}, {a}, {b}"),
        Op::Cast(a, e) => format!("cast {a} to {e}"),
        Op::Splat(a) => format!("splat {a}"),
        Op::Iota(ax) => format!("iota.{}", axis(*ax)),
        Op::Mask(m) => format!("mask.{}", if *m == TriMask::StrictLower { "strict_lower" } else { "lower" }),
        Op::Reduce(r, ax, a) => format!("reduce.{}.{} {a}", format!("{r:?}").to_lowercase(), axis(*ax)),
        Op::Transpose(a) => format!("transpose {a}"),
        Op::Slice { src, row, col } => format!("slice {src}[{row}, {col}]"),
        Op::Gather { src, row, col } => format!("gather {src}[{row}, {col}]"),
        Op::Insert { base, value, row, col, rows, cols } => format!("insert {base}[{row}..+{rows}, {col}..+{cols}] = {value}"),
        Op::Scan { src, reverse } => format!("scan.{} {src}", if *reverse { "rev" } else { "fwd" }),
        Op::Load { src, index } => format!("load {src}[{}]", index_text(index)),
        Op::Store { dst, index, value, mask } => match mask {
            None => format!("store {dst}[{}] = {value}", index_text(index)),
            Some(m) => format!("store {dst}[{}] = {value} where {m}", index_text(index)),
        },
        Op::ReadVar(v) => format!("read {v}"),
        Op::WriteVar(v, x) => format!("write {v} = {x}"),
        Op::Mma { dst, a, b, accumulate, negate } => {
            let t = |o: &MmaOperand| format!("{}{}", o.var, if o.transposed { ".T" } else { "" });
            let op = match (accumulate, negate) {
                (false, false) => "=",
                (false, true) => "= -",
                (true, false) => "+=",
                (true, true) => "-=",
            };
            format!("mma {dst} {op} {} @ {}", t(a), t(b))
        }
        Op::For { .. } => "for".into(),
        Op::TmemAlloc { columns } => format!("tmem.alloc {columns}"),
        Op::TmemRelinquish => "tmem.relinquish".into(),
        Op::TmemDealloc { columns } => format!("tmem.dealloc {columns}"),
    }
}

fn axis(a: Axis) -> &'static str {
    match a {
        Axis::Row => "row",
        Axis::Col => "col",
    }
}
