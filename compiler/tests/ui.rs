//! Diagnostics fixtures: every `tests/ui/*.tile` states its expected diagnostics inline, on the
//! offending line, as `//~ ERROR <code> <text>` or `//~ WARN <code> <text>` (several in a row
//! for several diagnostics on one line). The text must occur
//! in the diagnostic's message, one of its labels or one of its notes (the help lines). Missing *and* unexpected diagnostics fail.

use std::path::{Path, PathBuf};

use tilec::diag::{Diagnostic, Severity};
use tilec::frontend::{check_source, Options};

struct Expect {
    line: usize,
    severity: Severity,
    code: String,
    text: String,
}

fn expectations(src: &str) -> Vec<Expect> {
    let mut out = vec![];
    for (n, line) in src.lines().enumerate() {
        // Several expectations on one line (one diagnostic per target at the same span) are
        // written one after the other: `//~ ERROR E0405 a //~ ERROR E0405 b`.
        for rest in line.split("//~ ").skip(1) {
            let (sev, rest) = if let Some(r) = rest.strip_prefix("ERROR ") {
                (Severity::Error, r)
            } else if let Some(r) = rest.strip_prefix("WARN ") {
                (Severity::Warning, r)
            } else {
                panic!("bad expectation on line {}: {line}", n + 1)
            };
            let (code, text) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Expect { line: n + 1, severity: sev, code: code.to_string(), text: text.trim().to_string() });
        }
    }
    out
}

fn line_of(src: &str, d: &Diagnostic) -> usize {
    let start = d.primary_span().map(|s| s.start as usize).unwrap_or(0).min(src.len());
    src[..start].matches('\n').count() + 1
}

fn matches(e: &Expect, d: &Diagnostic, line: usize) -> bool {
    let all_text = std::iter::once(d.message.as_str()).chain(d.labels.iter().map(|l| l.message.as_str())).chain(d.notes.iter().map(String::as_str)).collect::<Vec<_>>().join(" | ");
    e.line == line && e.severity == d.severity && e.code == d.code.as_str() && all_text.contains(&e.text)
}

fn check_file(path: &Path) -> Result<(), String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let checked = check_source(&src, &Options::default().for_file(path));
    let expects = expectations(&src);
    let diags: Vec<&Diagnostic> = checked.diags.iter().collect();
    let mut used = vec![false; diags.len()];
    let mut problems = vec![];
    for e in &expects {
        let hit = diags.iter().enumerate().find(|(i, d)| !used[*i] && matches(e, d, line_of(&src, d)));
        match hit {
            Some((i, _)) => used[i] = true,
            None => problems.push(format!("line {}: expected {:?} {} containing {:?}, not reported", e.line, e.severity, e.code, e.text)),
        }
    }
    for (i, d) in diags.iter().enumerate() {
        if !used[i] {
            problems.push(format!("line {}: unexpected {:?} {} {}", line_of(&src, d), d.severity, d.code.as_str(), d.message));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}:\n  {}\n--- rendered ---\n{}", path.display(), problems.join("\n  "), checked.diags.render(&path.display().to_string(), &src, false)))
    }
}

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tile"))
        .collect();
    v.sort();
    v
}

#[test]
fn ui_fixtures_report_exactly_their_expected_diagnostics() {
    let files = fixtures("tests/ui");
    assert!(files.len() >= 6, "expected the ui fixtures, found {}", files.len());
    let failures: Vec<String> = files.iter().filter_map(|f| check_file(f).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn negative_examples_report_expected_diagnostics() {
    for f in fixtures("dsl-examples/negative") {
        let src = std::fs::read_to_string(&f).unwrap();
        let checked = check_source(&src, &Options::default());
        assert!(checked.diags.has_errors(), "{} must be rejected", f.display());
    }
}

#[test]
fn shipped_examples_check_cleanly() {
    for f in fixtures("dsl-examples") {
        let src = std::fs::read_to_string(&f).unwrap();
        let checked = check_source(&src, &Options { deny_warnings: true, ..Options::default() }.for_file(&f));
        assert!(checked.ok(), "{}:\n{}", f.display(), checked.diags.render("x", &src, false));
        assert!(!checked.module.kernels.is_empty());
    }
}
