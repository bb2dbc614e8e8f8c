//! The red-team matrix: every candidate (tricks and honest ones) against every gate.

use crate::battery::{self, BatteryError, Options, Report, Verdict};
use crate::candidate::Candidate;
use crate::gates::{Status, GATES};
use serde::Serialize;
use std::sync::Arc;

/// One entry to judge.
pub struct Entry {
    /// Row label.
    pub name: String,
    /// Gate meant to catch it (None for honest candidates).
    pub target: Option<String>,
    /// The candidate.
    pub cand: Arc<dyn Candidate>,
}

/// One row of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Row label.
    pub name: String,
    /// Gate meant to catch it.
    pub target: Option<String>,
    /// The full report.
    pub report: Report,
}

impl Row {
    /// Status of one gate in this row.
    pub fn status(&self, gate: &str) -> Option<Status> {
        self.report.gates.iter().find(|g| g.id == gate).map(|g| g.status)
    }
    /// For a trick: its target gate failed (or errored). For an honest row: verdict clean and no
    /// gate failed.
    pub fn as_expected(&self) -> bool {
        match &self.target {
            Some(t) => matches!(self.status(t), Some(Status::Fail) | Some(Status::Error)),
            None => self.report.verdict == Verdict::Clean,
        }
    }
}

/// Run the battery on every entry. An entry whose battery cannot run is left out of the rows
/// and handed to `on_error` (with its name) as soon as it fails.
pub fn run(entries: Vec<Entry>, opts: &Options, mut on_error: impl FnMut(&str, &BatteryError)) -> Vec<Row> {
    entries
        .into_iter()
        .filter_map(|e| match battery::run(Arc::clone(&e.cand), None, opts) {
            Ok(report) => Some(Row { name: e.name, target: e.target, report }),
            Err(err) => {
                on_error(&e.name, &err);
                None
            }
        })
        .collect()
}

fn cell(s: Option<Status>, target: bool) -> String {
    let c = match s {
        Some(Status::Pass) => ".",
        Some(Status::Fail) => "X",
        Some(Status::NotApplicable) => "-",
        Some(Status::Error) => "E",
        None => " ",
    };
    if target {
        format!("[{c}]")
    } else {
        format!(" {c} ")
    }
}

/// The matrix as text: `.` pass, `X` fail, `E` error (crash/hang), `-` n/a; brackets mark the
/// gate meant to catch the trick.
pub fn format(rows: &[Row]) -> String {
    let labels: Vec<String> = rows.iter().map(|r| format!("{} ({})", r.name, r.report.op)).collect();
    let w = labels.iter().map(|l| l.len() + 2).max().unwrap_or(0).max(36);
    let mut s = format!("{:<w$}", "candidate");
    for g in GATES.iter() {
        s += &format!("{:^7}", g.id);
    }
    s += "  verdict    expected\n";
    for (r, label) in rows.iter().zip(&labels) {
        s += &format!("{label:<w$}");
        for g in GATES.iter() {
            let t = r.target.as_deref() == Some(g.id);
            s += &format!("{:^7}", cell(r.status(g.id), t));
        }
        s += &format!("  {:<10} {}\n", format!("{:?}", r.report.verdict).to_lowercase(), if r.as_expected() { "yes" } else { "NO" });
    }
    let bad = rows.iter().filter(|r| !r.as_expected()).count();
    s += &format!(
        "{} candidates; {} tricks caught by their gate; {} honest clean; {} unexpected\n",
        rows.len(),
        rows.iter().filter(|r| r.target.is_some() && r.as_expected()).count(),
        rows.iter().filter(|r| r.target.is_none() && r.as_expected()).count(),
        bad
    );
    s
}
