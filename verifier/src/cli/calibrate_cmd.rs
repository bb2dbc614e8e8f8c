//! `kverify calibrate`: table and SVG plot of noise floor, threshold and onset per band gate,
//! and a second table for the probes added since (cancellation, sizes past 2^k).

use crate::battery::Options;
use crate::calibrate::{calibrate, plot, table, PlotError};
use crate::calibrate_probes::{self, calibrate_probes};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `kverify calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Where to write the plot (SVG).
    #[arg(long, default_value = "kverify-calibrate.svg")]
    pub plot: PathBuf,
    /// Where to write both tables as JSON (optional): `{"gates": [...], "probes": [...]}`
    /// (an infinite figure is written as `null`).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Run `kverify calibrate`; exit 0 when every gate's and every probe's threshold sits strictly
/// between its noise floor and the onset of real error.
pub fn run(a: &CalibrateArgs) -> Result<i32, PlotError> {
    let rows = calibrate(&Options::default());
    print!("{}", table(&rows));
    plot(&rows, &a.plot)?;
    println!("plot: {}", a.plot.display());
    let probes = calibrate_probes();
    println!();
    print!("{}", calibrate_probes::table(&probes));
    if let Some(p) = &a.json {
        let doc = serde_json::json!({"gates": rows, "probes": probes});
        std::fs::write(p, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .map_err(|e| PlotError { path: p.display().to_string(), msg: e.to_string() })?;
    }
    let ok = rows.iter().all(|r| r.lower_margin > 1.0 && r.upper_margin > 1.0) && probes.iter().all(|r| r.lower_margin > 1.0 && r.upper_margin > 1.0);
    Ok(if ok { 0 } else { 1 })
}
