//! `kverify redteam`: the tricks x gates matrix.

use crate::battery::Options;
use crate::candidate::external::{ExternalCandidate, Manifest};
use crate::candidate::Candidate;
use crate::redteam::matrix::{self, Entry, Row};
use crate::redteam::{external_only_tricks, honest_matmul, honest_max, honest_twins, tricks};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `kverify redteam`.
#[derive(Debug, Args)]
pub struct RedteamArgs {
    /// Also judge the external-process NumPy versions found in this folder (manifests
    /// `<trick>.json`, e.g. verifier/python/redteam).
    #[arg(long)]
    pub external: Option<PathBuf>,
    /// Skip the in-process rows.
    #[arg(long)]
    pub no_in_process: bool,
    /// Time limit per call, seconds.
    #[arg(long, default_value_t = 2.0, value_parser = super::seconds)]
    pub time_limit: f64,
    /// Write the rows as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Only write the default-seed answer the `hardcoded_seed` NumPy trick pastes in (a
    /// safetensors file with one tensor `answer`), then exit.
    #[arg(long)]
    pub write_hardcoded: Option<PathBuf>,
}

/// Errors of `kverify redteam`.
#[derive(Debug, thiserror::Error)]
pub enum RedteamError {
    /// A manifest of the external red team.
    #[error(transparent)]
    Manifest(#[from] crate::candidate::external::ManifestError),
    /// Writing JSON.
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
}

/// The entries of the in-process red team.
pub fn in_process_entries() -> Vec<Entry> {
    let mut v: Vec<Entry> = vec![
        Entry { name: "honest".into(), target: None, cand: Arc::new(honest_matmul()) },
        Entry { name: "honest-max".into(), target: None, cand: Arc::new(honest_max()) },
    ];
    for h in honest_twins() {
        v.push(Entry { name: h.name.clone(), target: None, cand: Arc::new(h) });
    }
    for t in tricks() {
        v.push(Entry { name: t.name.into(), target: Some(t.gate.into()), cand: Arc::new((t.build)()) });
    }
    v
}

/// The entries of the external red team in `dir` (`honest.json`, `honest-max.json`, one
/// `<name>.json` per honest twin of [`honest_twins`], `<trick>.json`, including the
/// [`external_only_tricks`]).
pub fn external_entries(dir: &std::path::Path, limit: Duration) -> Result<Vec<Entry>, RedteamError> {
    let mut v = Vec::new();
    let mut names: Vec<(String, Option<String>)> = vec![("honest".into(), None), ("honest-max".into(), None)];
    names.extend(honest_twins().into_iter().map(|h| (h.name, None)));
    names.extend(tricks().into_iter().map(|t| (t.name.to_string(), Some(t.gate.to_string()))));
    names.extend(external_only_tricks().into_iter().map(|t| (t.name.to_string(), Some(t.gate.to_string()))));
    for (n, target) in names {
        let m = Manifest::load(&dir.join(format!("{n}.json")))?;
        let c: Arc<dyn Candidate> = Arc::new(ExternalCandidate::new(m, limit, 2048));
        v.push(Entry { name: format!("{n} [numpy]"), target, cand: c });
    }
    Ok(v)
}

/// Run `kverify redteam`; exit code 0 when every row is as expected.
pub fn run(a: &RedteamArgs) -> Result<i32, RedteamError> {
    if let Some(p) = &a.write_hardcoded {
        let (d, ans) = crate::redteam::tricks::default_seed_answer();
        let t = crate::tensor::Tensor::f32(vec![d.get("M"), d.get("N")], ans);
        crate::candidate::safetensors_io::write(p, &[("answer".to_string(), &t)])
            .map_err(|e| RedteamError::Write(p.display().to_string(), std::io::Error::other(e.to_string())))?;
        println!("wrote {}", p.display());
        return Ok(0);
    }
    let limit = Duration::from_secs_f64(a.time_limit.max(0.1));
    let mut entries = Vec::new();
    if !a.no_in_process {
        entries.extend(in_process_entries());
    }
    if let Some(dir) = &a.external {
        entries.extend(external_entries(dir, limit)?);
    }
    let opts = Options { time_limit: limit, dims: None, gates: None };
    let rows: Vec<Row> = matrix::run(entries, &opts, |name, err| eprintln!("kverify: {name}: {err}"));
    print!("{}", matrix::format(&rows));
    if let Some(p) = &a.json {
        let j = serde_json::to_string_pretty(&rows).unwrap_or_default();
        std::fs::write(p, j).map_err(|e| RedteamError::Write(p.display().to_string(), e))?;
    }
    Ok(if rows.iter().all(|r| r.as_expected()) { 0 } else { 1 })
}
