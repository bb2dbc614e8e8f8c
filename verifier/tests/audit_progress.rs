//! The progress line of `kverify audit`: its text (count, percentage, bar, elapsed, ETA) from
//! given figures, and what an audit writes to a stderr that is not a terminal — one line per
//! kernel recorded, no control characters, the last one at n/n, 100 % and ETA 0:00:00.

#[allow(dead_code)] // the NumPy-candidate helpers are not used here
mod common;

use common::audit::{fake_worker, kverify, records, row, scratch, write_corpus};
use kverify::audit::progress::{hms, line, BAR};
use serde_json::json;
use std::time::Duration;

#[test]
fn the_line_states_count_percentage_elapsed_and_eta() {
    // 1 of 4 after 10 s: 7 of 30 bar cells, 25 %, 10 s per kernel so 30 s left.
    assert_eq!(line(1, 4, Duration::from_secs(10), "0001-L1-T1", "clean"), format!("[{}{}] 1/4 25%  elapsed 0:00:10  ETA 0:00:30  0001-L1-T1 clean", "#".repeat(7), "-".repeat(23)));
    // 2 of 3 after 1 h 2 min 3 s: ETA half of that, rounded to the second (1,861.5 s -> 1,862 s).
    assert_eq!(line(2, 3, Duration::from_secs(3723), "k", "broken"), format!("[{}{}] 2/3 67%  elapsed 1:02:03  ETA 0:31:02  k broken", "#".repeat(20), "-".repeat(10)));
    assert_eq!(line(5, 5, Duration::from_millis(90_400), "k", "skipped"), format!("[{}] 5/5 100%  elapsed 0:01:30  ETA 0:00:00  k skipped", "#".repeat(BAR)));
    assert!(line(0, 5, Duration::from_secs(7), "k", "x").contains("ETA -:--:--"));
    assert_eq!((hms(0.4), hms(59.5), hms(86_399.0), hms(90_000.0)), ("0:00:00".to_string(), "0:01:00".to_string(), "23:59:59".to_string(), "25:00:00".to_string()));
}

/// Three kernels, one judge, stderr piped: three progress lines in order, each naming a
/// recorded kernel and its verdict, whose ETA agrees with the elapsed time it states (to the
/// rounding of both); the last is complete.
#[test]
fn an_audit_logs_one_progress_line_per_kernel_to_a_file() {
    let dir = scratch("progress");
    let slow = |run: Option<serde_json::Value>| {
        let mut d = json!({"sleep": 0.03});
        if let Some(r) = run {
            d["run"] = r;
        }
        Some(d)
    };
    let rows = vec![row(1, slow(None), true), row(2, slow(Some(json!({"EXC-01": {"mismatches": 1, "total": 9}}))), true), row(3, slow(None), true)];
    let corpus = write_corpus(&dir, &rows);
    let out = dir.join("out");
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", out.to_str().unwrap_or(""), "--worker", &fake_worker(), "--jobs", "1"]).output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "control characters in a non-terminal log: {err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 3, "{err}");
    let verdicts: std::collections::BTreeMap<String, String> = records(&out).iter().map(|r| (r["key"].as_str().unwrap_or("").to_string(), r["verdict"].as_str().unwrap_or("").to_string())).collect();
    let secs = |t: &str| t.split(':').map(|x| x.parse::<f64>().expect("H:MM:SS")).fold(0.0, |a, x| a * 60.0 + x);
    for (i, l) in lines.iter().enumerate() {
        let n = i + 1;
        let w: Vec<&str> = l.split_whitespace().collect();
        // [bar] n/3 P% elapsed H:MM:SS ETA H:MM:SS key verdict
        assert_eq!((w[1], w[2]), (format!("{n}/3").as_str(), format!("{:.0}%", 100.0 * n as f64 / 3.0).as_str()), "{l}");
        assert_eq!(w[0].matches('#').count(), 30 * n / 3, "{l}");
        assert_eq!(verdicts.get(w[7]).map(String::as_str), Some(w[8]), "{l}: not a recorded kernel with its verdict");
        let (el, eta) = (secs(w[4]), secs(w[6]));
        let want = el * (3 - n) as f64 / n as f64;
        assert!((eta - want).abs() <= 0.5 * (3 - n) as f64 / n as f64 + 0.5 + 1e-9, "{l}: ETA {eta} s, elapsed {el} s predicts {want} s");
    }
    assert!(lines[2].contains("3/3 100%") && lines[2].contains("ETA 0:00:00"), "{}", lines[2]);
    assert_eq!(verdicts.values().filter(|v| *v == "broken").count(), 1);
    assert!(err.contains("3 kernels selected, 0 already recorded, 3 judged now"), "{err}");
    // --quiet: no progress line at all.
    let o = kverify(&[corpus.to_str().unwrap_or(""), "--out", dir.join("quiet").to_str().unwrap_or(""), "--worker", &fake_worker(), "--quiet"]).output().expect("run");
    assert!(!String::from_utf8_lossy(&o.stderr).lines().any(|l| l.starts_with('[')));
}
