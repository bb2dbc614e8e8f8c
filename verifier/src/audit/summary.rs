//! The audit's summary over every record in the output folder (all shards): the funnel,
//! per-gate rates with their applicability denominators, the 2x2 differential of KernelBench's
//! check against kverify's verdict; written as a table (`summary.txt`), JSON (`summary.json`) and
//! SVG (`funnel.svg`, `gates.svg`, `differential.svg`). Nothing in it depends on timing or on the order in which
//! kernels finished, so an interrupted and resumed audit writes the same files.

use super::judge::{Status, GATES};
use super::{io, AuditError, Record};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Counts of one gate.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GateCounts {
    /// Applicable (pass + fail + error).
    pub applicable: usize,
    /// Passed.
    pub pass: usize,
    /// Failed.
    pub fail: usize,
    /// Crashed, hung or raised.
    pub error: usize,
    /// Not applicable.
    pub na: usize,
    /// (fail + error) / applicable, or null.
    pub rate: Option<f64>,
}

/// The 2x2 table: KernelBench's check (rows) against kverify (columns: clean / not clean).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Differential {
    /// KB passes, kverify clean.
    pub kb_pass_clean: usize,
    /// KB passes, kverify rejects (violation or broken).
    pub kb_pass_rejected: usize,
    /// KB fails, kverify clean.
    pub kb_fail_clean: usize,
    /// KB fails, kverify rejects.
    pub kb_fail_rejected: usize,
    /// Kernels where KB was n/a (not counted above).
    pub kb_na: usize,
}

/// The summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Rows in the corpus.
    pub corpus_rows: usize,
    /// Kernels recorded.
    pub recorded: usize,
    /// Of those, accepted by their own harness.
    pub accepted: usize,
    /// Skipped on this machine (reason per kernel in the records).
    pub skipped: usize,
    /// The task's own Model failed (n/a).
    pub reference_error: usize,
    /// Judged.
    pub judged: usize,
    /// Judged and accepted by their own harness.
    pub judged_accepted: usize,
    /// Judged accepted kernels with a tolerance-free failure or a crash (broken).
    pub accepted_broken: usize,
    /// Judged accepted kernels that are not clean (violation or broken).
    pub accepted_any_violation: usize,
    /// Verdict counts over all judged kernels.
    pub verdicts: BTreeMap<String, usize>,
    /// Per gate.
    pub gates: BTreeMap<String, GateCounts>,
    /// Over all judged kernels.
    pub differential: Differential,
    /// Judged kernels KernelBench's check passes but kverify rejects (keys).
    pub disputed: Vec<String>,
}

/// Summarise `records` (keyed, so in key order).
pub fn summarize(corpus_rows: usize, records: &BTreeMap<String, Record>) -> Summary {
    let mut s = Summary { corpus_rows, recorded: records.len(), ..Summary::default() };
    for g in GATES {
        s.gates.insert(g.to_string(), GateCounts::default());
    }
    for r in records.values() {
        s.accepted += r.accepted as usize;
        match r.status.as_str() {
            "skipped" => s.skipped += 1,
            "reference-error" => s.reference_error += 1,
            _ => {}
        }
        let Some(v) = r.verdict.as_deref() else { continue };
        s.judged += 1;
        *s.verdicts.entry(v.to_string()).or_default() += 1;
        if r.accepted {
            s.judged_accepted += 1;
            s.accepted_broken += (v == "broken") as usize;
            s.accepted_any_violation += (v != "clean") as usize;
        }
        for (id, g) in &r.gates {
            let c = s.gates.entry(id.clone()).or_default();
            match g.status {
                Status::Pass => c.pass += 1,
                Status::Fail => c.fail += 1,
                Status::Error => c.error += 1,
                Status::Na => c.na += 1,
            }
        }
        let clean = v == "clean";
        match r.gates.get("KB").map(|g| g.status) {
            Some(Status::Pass) if clean => s.differential.kb_pass_clean += 1,
            Some(Status::Pass) => {
                s.differential.kb_pass_rejected += 1;
                s.disputed.push(r.key.clone());
            }
            Some(Status::Fail | Status::Error) if clean => s.differential.kb_fail_clean += 1,
            Some(Status::Fail | Status::Error) => s.differential.kb_fail_rejected += 1,
            _ => s.differential.kb_na += 1,
        }
    }
    for c in s.gates.values_mut() {
        c.applicable = c.pass + c.fail + c.error;
        c.rate = if c.applicable > 0 { Some((c.fail + c.error) as f64 / c.applicable as f64) } else { None };
    }
    s
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1} %", 100.0 * a as f64 / b as f64)
    }
}

/// The summary as a text table.
pub fn table(s: &Summary) -> String {
    let mut t = String::new();
    t += "funnel\n";
    t += &format!("  corpus rows                          {:>6}\n", s.corpus_rows);
    t += &format!("  kernels recorded                     {:>6}\n", s.recorded);
    t += &format!("    accepted by their own harness      {:>6}\n", s.accepted);
    t += &format!("    skipped on this machine            {:>6}\n", s.skipped);
    t += &format!("    reference failed (n/a)             {:>6}\n", s.reference_error);
    t += &format!("    judged                             {:>6}\n", s.judged);
    t += &format!("  judged and accepted                  {:>6}\n", s.judged_accepted);
    t += &format!("    tolerance-free failure or crash    {:>6}  {}\n", s.accepted_broken, pct(s.accepted_broken, s.judged_accepted));
    t += &format!("    any violation                      {:>6}  {}\n", s.accepted_any_violation, pct(s.accepted_any_violation, s.judged_accepted));
    t += "verdicts (judged)\n";
    for (v, n) in &s.verdicts {
        t += &format!("  {v:<10} {n:>6}\n");
    }
    t += "gates        applicable   pass   fail  error    n/a   failure rate\n";
    for (id, c) in &s.gates {
        t += &format!("  {id:<10} {:>10} {:>6} {:>6} {:>6} {:>6}   {}\n", c.applicable, c.pass, c.fail, c.error, c.na, pct(c.fail + c.error, c.applicable));
    }
    let d = &s.differential;
    t += "differential (judged kernels)\n";
    t += "                      kverify clean   kverify rejects\n";
    t += &format!("  KernelBench pass    {:>13}   {:>15}\n", d.kb_pass_clean, d.kb_pass_rejected);
    t += &format!("  KernelBench fail    {:>13}   {:>15}\n", d.kb_fail_clean, d.kb_fail_rejected);
    if d.kb_na > 0 {
        t += &format!("  (KernelBench n/a: {})\n", d.kb_na);
    }
    t
}

/// The four cells of the 2x2 differential as `(label, kernels)`, in the table's order (KB pass
/// row, then KB fail row; kverify clean before kverify rejects); each label ends with its count,
/// so the plot states the numbers as text.
pub fn differential_cells(d: &Differential) -> [(String, usize); 4] {
    let cell = |kb: &str, kv: &str, n: usize| (format!("KB {kb}, kverify {kv}: {n}"), n);
    [cell("pass", "clean", d.kb_pass_clean), cell("pass", "rejects", d.kb_pass_rejected), cell("fail", "clean", d.kb_fail_clean), cell("fail", "rejects", d.kb_fail_rejected)]
}

/// Write `summary.json`, `summary.txt`, `funnel.svg`, `gates.svg` and `differential.svg` (the
/// 2x2 as four bars, counts in their labels) into `dir`.
pub fn write(dir: &Path, s: &Summary) -> Result<(), AuditError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let j = dir.join("summary.json");
    let text = serde_json::to_string_pretty(s).map_err(|e| AuditError::Usage(e.to_string()))? + "\n";
    std::fs::write(&j, text).map_err(io(&j))?;
    let t = dir.join("summary.txt");
    std::fs::write(&t, table(s)).map_err(io(&t))?;
    let funnel = [
        ("recorded", s.recorded),
        ("accepted", s.accepted),
        ("judged+accepted", s.judged_accepted),
        ("not clean", s.accepted_any_violation),
        ("broken", s.accepted_broken),
    ];
    bars(&dir.join("funnel.svg"), "kverify audit: funnel (kernels)", &funnel.iter().map(|(l, n)| (l.to_string(), *n as f64)).collect::<Vec<_>>(), "kernels")?;
    let rates: Vec<(String, f64)> = s.gates.iter().map(|(id, c)| (format!("{id} (n={})", c.applicable), 100.0 * c.rate.unwrap_or(0.0))).collect();
    bars(&dir.join("gates.svg"), "kverify audit: failure rate per gate (of applicable)", &rates, "% of applicable")?;
    let cells: Vec<(String, f64)> = differential_cells(&s.differential).into_iter().map(|(l, n)| (l, n as f64)).collect();
    bars(&dir.join("differential.svg"), "kverify audit: KernelBench check (KB) against kverify, judged kernels", &cells, "kernels")?;
    Ok(())
}

/// A horizontal bar chart.
fn bars(path: &Path, title: &str, rows: &[(String, f64)], unit: &str) -> Result<(), AuditError> {
    use plotters::prelude::*;
    let err = |e: String| AuditError::Plot(format!("{}: {e}", path.display()));
    let root = SVGBackend::new(path, (900, 120 + 50 * rows.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let xmax = rows.iter().map(|r| r.1).fold(1.0, f64::max) * 1.1;
    let n = rows.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(160)
        .build_cartesian_2d(0.0..xmax, -0.5..(n - 0.5))
        .map_err(|e| err(e.to_string()))?;
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_labels(rows.len().max(1))
        .y_label_formatter(&|y| labels.get(y.round() as usize).cloned().unwrap_or_default())
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| Rectangle::new([(0.0, i as f64 - 0.35), (r.1, i as f64 + 0.35)], BLUE.mix(0.6).filled())))
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
