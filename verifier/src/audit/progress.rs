//! The progress line of `kverify audit` on stderr: a bar, kernels recorded by this run out of
//! those it has to judge, the percentage, the time elapsed, the ETA and the last kernel with
//! its verdict. On a terminal the line is redrawn in place (`\r`, erase to the end of line); to
//! a file or pipe (a Slurm log, a test) each update is a line of its own, so the log keeps the
//! history and has no control characters. kverify's own few lines, not indicatif: no
//! dependency for one line.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Width of the bar, characters.
pub const BAR: usize = 30;

/// The progress text after `n` of `total` kernels (`n <= total`; `total` 0 is shown as 1),
/// `elapsed` since the run started, the last kernel `key` and `what` it came out as:
/// `[####------] n/total P%  elapsed H:MM:SS  ETA H:MM:SS  key what`. The ETA assumes the
/// kernels left take the mean time of those done (`elapsed / n · (total − n)`, rounded to the
/// second); with `n` = 0 it is unknown and shown as `-:--:--`.
pub fn line(n: usize, total: usize, elapsed: Duration, key: &str, what: &str) -> String {
    let t = total.max(1);
    let filled = BAR * n.min(t) / t;
    let eta = if n == 0 { "-:--:--".to_string() } else { hms(elapsed.as_secs_f64() / n as f64 * total.saturating_sub(n) as f64) };
    format!("[{}{}] {n}/{total} {:.0}%  elapsed {}  ETA {eta}  {key} {what}", "#".repeat(filled), "-".repeat(BAR - filled), 100.0 * n as f64 / t as f64, hms(elapsed.as_secs_f64()))
}

/// Seconds as `H:MM:SS`, rounded to the second (hours unbounded).
pub fn hms(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Where the progress goes: stderr, redrawn in place on a terminal, one line per update
/// otherwise.
pub struct Progress {
    tty: bool,
    shown: bool,
}

impl Progress {
    /// For stderr as it is now (a terminal or not).
    pub fn stderr() -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), shown: false }
    }

    /// Show `text` (a [`line`]); write errors are ignored (progress is not a result).
    pub fn show(&mut self, text: &str) {
        let mut e = std::io::stderr().lock();
        let _ = if self.tty { write!(e, "\r{text}\x1b[K") } else { writeln!(e, "{text}") };
        let _ = e.flush();
        self.shown = true;
    }

    /// Ends a line redrawn in place, so what follows starts on a line of its own.
    pub fn finish(&mut self) {
        if self.tty && self.shown {
            let _ = writeln!(std::io::stderr());
        }
        self.shown = false;
    }
}
