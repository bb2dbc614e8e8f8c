//! `kverify calibrate`: table and SVG plot of noise floor, threshold and onset per band gate.

use crate::battery::Options;
use crate::calibrate::{calibrate, plot, table, PlotError};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `kverify calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Where to write the plot (SVG).
    #[arg(long, default_value = "kverify-calibrate.svg")]
    pub plot: PathBuf,
    /// Where to write the rows as JSON (optional).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Run `kverify calibrate`; exit 0 when every gate's threshold sits strictly between its noise
/// floor and the onset of real error.
pub fn run(a: &CalibrateArgs) -> Result<i32, PlotError> {
    let rows = calibrate(&Options::default());
    print!("{}", table(&rows));
    plot(&rows, &a.plot)?;
    println!("plot: {}", a.plot.display());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows).unwrap_or_default())
            .map_err(|e| PlotError { path: p.display().to_string(), msg: e.to_string() })?;
    }
    Ok(if rows.iter().all(|r| r.lower_margin > 1.0 && r.upper_margin > 1.0) { 0 } else { 1 })
}
