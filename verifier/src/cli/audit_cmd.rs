//! `kverify audit CORPUS.jsonl --out DIR`: judge a KernelBench-style corpus (docs/audit.md).

use crate::audit::{self, run, summary, AuditError};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `kverify audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Corpus: JSON lines with `ref_code` (Model) and `custom_code` (ModelNew).
    pub corpus: PathBuf,
    /// Output folder: `kernels-<i>of<n>.jsonl` (one line per kernel; rerunning skips those
    /// already there), `summary.{json,txt}`, `funnel.svg`, `gates.svg`.
    #[arg(long)]
    pub out: PathBuf,
    /// Device(s), comma-separated (`cpu`, `cuda:0`, `cuda:0,cuda:1`): job j runs on device j mod n.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Parallel workers (default: one per device).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run shard i of n (0-based): every n-th kernel. Shards writing into one folder merge.
    #[arg(long, default_value = "0/1")]
    pub shard: String,
    /// Judge at most N kernels of this shard.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Positive control: submit every task's own Model as its ModelNew.
    #[arg(long)]
    pub control: bool,
    /// Judge every task's positive control beside its candidate, in the same worker (the
    /// reference side is measured once for both; the control runs first in every gate), with
    /// the control's records and summary in DIR. Shards and --limit then count rows.
    #[arg(long, value_name = "DIR", conflicts_with = "control")]
    pub with_control: Option<PathBuf>,
    /// Only rebuild the summary from the records in --out (merging shards); judge nothing.
    #[arg(long)]
    pub report_only: bool,
    /// Time limit of one worker request, seconds.
    #[arg(long, default_value_t = 600.0, value_parser = super::seconds)]
    pub time_limit: f64,
    /// Address-space limit of a worker, MiB (default 16384 on cpu, none with CUDA).
    #[arg(long)]
    pub mem_limit_mb: Option<u64>,
    /// Base seed (both models are built after seeding with it, as KernelBench does).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Worker command (default `python3 verifier/python/audit_worker.py`); `--device D` is
    /// appended. Split on whitespace.
    #[arg(long)]
    pub worker: Option<String>,
    /// Persistent build cache of `load_inline` extensions (`TORCH_EXTENSIONS_DIR` of every
    /// worker; default `<out>/torch_extensions`).
    #[arg(long)]
    pub extensions_dir: Option<PathBuf>,
    /// Builds at a time in the build-ahead pass over `load_inline` kernels, beside the judging
    /// (default with a CUDA device: the cores left by --jobs, at least 1; on cpu 0 = none).
    #[arg(long)]
    pub build_jobs: Option<usize>,
    /// Start no kernel after this many seconds: those in flight finish and are recorded, the
    /// rest are left for a rerun (exit code 3 when any are left).
    #[arg(long, value_parser = super::seconds)]
    pub stop_after: Option<f64>,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
}

/// Run the audit; returns the exit code (0 when it completed, 3 when `--stop-after` left kernels
/// unjudged; the report then covers what was recorded).
pub fn run(a: &AuditArgs) -> Result<i32, AuditError> {
    let shard = audit::parse_shard(&a.shard)?;
    let devices: Vec<String> = a.device.split(',').map(|d| d.trim().to_string()).filter(|d| !d.is_empty()).collect();
    if devices.iter().any(|d| d != "cpu" && !d.starts_with("cuda")) {
        return Err(AuditError::Usage(format!("--device wants cpu or cuda:N, got `{}`", a.device)));
    }
    let mut incomplete = false;
    let corpus_rows = if a.report_only {
        audit::load_corpus(&a.corpus, a.control)?.0
    } else {
        let jobs = a.jobs.unwrap_or(devices.len());
        let opts = run::Options {
            worker: a.worker.as_ref().map(|w| w.split_whitespace().map(str::to_string).collect()).unwrap_or_else(run::default_worker),
            jobs,
            mem_limit_mb: a.mem_limit_mb.unwrap_or(if devices.iter().all(|d| d == "cpu") { 16384 } else { 0 }),
            devices,
            time_limit: Duration::from_secs_f64(a.time_limit),
            seed: a.seed,
            progress: !a.quiet,
            extensions_dir: Some(a.extensions_dir.clone().unwrap_or_else(|| a.out.join("torch_extensions"))),
            stop_after: a.stop_after.map(Duration::from_secs_f64),
            // Builds run beside the judges: by default they get the cores the judges leave.
            build_jobs: a.build_jobs.unwrap_or(if a.device.contains("cuda") { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).saturating_sub(jobs).max(1) } else { 0 }),
        };
        let dirs = run::Folders { out: &a.out, control_out: a.with_control.as_deref() };
        let o = run::audit(&a.corpus, &dirs, shard, a.limit, a.control, &opts)?;
        eprintln!("kverify audit: shard {}/{}: {} kernels selected, {} already recorded, {} judged now", shard.0, shard.1, o.selected, o.resumed, o.judged_now);
        if o.left > 0 {
            eprintln!("kverify audit: --stop-after passed: {} kernels left unjudged; rerun the same command to continue", o.left);
            incomplete = true;
        }
        o.corpus_rows
    };
    for dir in std::iter::once(&a.out).chain(a.with_control.as_ref()) {
        let records = audit::load_records(dir)?;
        let s = summary::summarize(corpus_rows, &records);
        summary::write(dir, &s)?;
        print!("{}", summary::table(&s));
        println!("report: {}", dir.join("summary.json").display());
    }
    Ok(if incomplete { 3 } else { 0 })
}
