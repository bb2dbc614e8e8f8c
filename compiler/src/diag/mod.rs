//! Diagnostics: spans, stable codes, labels and notes, rendered by `codespan-reporting`.
//!
//! Every phase pushes [`Diagnostic`]s into a [`Diagnostics`] sink and keeps going where it can;
//! the driver stops before code generation when [`Diagnostics::has_errors`] is true. Rendering
//! happens only at the edge (CLI, tests) through [`Diagnostics::render`].

mod codes;
mod trimmed;

pub use codes::Code;

use codespan_reporting::diagnostic as cs;
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term;

/// A byte range `start..end` in the source file.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// A span from byte offsets (saturating at `u32::MAX`).
    pub fn new(start: usize, end: usize) -> Span {
        let c = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Span { start: c(start), end: c(end.max(start)) }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
    /// As a `usize` range.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Severity of a diagnostic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// A lint that does not stop compilation (unless `-D warnings`).
    Warning,
    /// Stops compilation before code generation.
    Error,
}

/// A labelled span inside a diagnostic.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What to say there.
    pub message: String,
    /// The primary label (`^^^`) or a secondary one (`---`).
    pub primary: bool,
}

/// One diagnostic.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable code (`E0301`, `W0401`, ...).
    pub code: Code,
    /// Headline.
    pub message: String,
    /// Labelled spans.
    pub labels: Vec<Label>,
    /// Notes printed below the snippet.
    pub notes: Vec<String>,
}

impl Diagnostic {
    /// An error with a primary label.
    pub fn error(code: Code, message: impl Into<String>, span: Span, label: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: vec![Label { span, message: label.into(), primary: true }],
            notes: vec![],
        }
    }
    /// An error about no place in the source (the import graph as a whole, a command-line
    /// value), with one note.
    pub fn unlabelled(code: Code, message: impl Into<String>, note: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Error, code, message: message.into(), labels: vec![], notes: vec![note.into()] }
    }
    /// A warning with a primary label.
    pub fn warning(code: Code, message: impl Into<String>, span: Span, label: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, message, span, label) }
    }
    /// Adds a secondary label.
    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into(), primary: false });
        self
    }
    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
    /// The span of the first primary label (or of the first label).
    pub fn primary_span(&self) -> Option<Span> {
        self.labels.iter().find(|l| l.primary).or(self.labels.first()).map(|l| l.span)
    }
}

/// An accumulating sink of diagnostics.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// An empty sink.
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }
    /// Adds a diagnostic.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// How many errors (not warnings) have been pushed.
    pub fn error_count(&self) -> usize {
        self.items.iter().filter(|d| d.severity == Severity::Error).count()
    }

    /// Whether errors were pushed after the sink held `before` of them ([`Diagnostics::error_count`]).
    pub fn has_errors_since(&self, before: usize) -> bool {
        self.error_count() > before
    }
    /// Appends all of `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }
    /// Whether any error was reported.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }
    /// Turns every warning into an error (`-D warnings`).
    pub fn deny_warnings(&mut self) {
        for d in &mut self.items {
            if d.severity == Severity::Warning {
                d.severity = Severity::Error;
                d.notes.push("`-D warnings` turns this warning into an error".into());
            }
        }
    }
    /// The diagnostics, in source order (stable for equal positions).
    pub fn sorted(&self) -> Vec<&Diagnostic> {
        let mut v: Vec<&Diagnostic> = self.items.iter().collect();
        v.sort_by_key(|d| d.primary_span().map(|s| s.start).unwrap_or(0));
        v
    }
    /// Keeps only the diagnostics `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Diagnostic) -> bool) {
        self.items.retain(keep);
    }

    /// Every diagnostic, in the order pushed.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }
    /// Number of diagnostics.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Renders like rustc for the file `name` with contents `src`, at most
    /// [`DEFAULT_LIMIT`] diagnostics (see [`Diagnostics::render_with`]).
    pub fn render(&self, name: &str, src: &str, color: bool) -> String {
        self.render_with(name, src, color, DEFAULT_LIMIT)
    }

    /// Renders at most `limit` diagnostics (0: all) in source order, then one line counting the
    /// rest. Source lines longer than [`MAX_LINE`] bytes are shown trimmed around the labels,
    /// as rustc does, so a long line with many errors does not print itself once per error.
    pub fn render_with(&self, name: &str, src: &str, color: bool, limit: usize) -> String {
        let config = term::Config::default();
        let mut out: Vec<u8> = Vec::new();
        let all = self.sorted();
        let shown = if limit == 0 { all.len() } else { all.len().min(limit) };
        for d in &all[..shown] {
            let (text, d) = trimmed::view(src, d);
            let file = SimpleFile::new(name, text.as_ref());
            let cd = to_codespan(&d, text.len());
            if color {
                let mut w = term::termcolor::Ansi::new(&mut out);
                let _ = term::emit(&mut w, &config, &file, &cd);
            } else {
                let mut w = term::termcolor::NoColor::new(&mut out);
                let _ = term::emit(&mut w, &config, &file, &cd);
            }
        }
        let mut s = String::from_utf8_lossy(&out).into_owned();
        if shown < all.len() {
            let rest = all.len() - shown;
            s += &format!("note: {rest} more diagnostic{} not shown (the first {shown} are; change the limit with --error-limit, 0 for all)\n", if rest == 1 { "" } else { "s" });
        }
        s
    }
}

/// 1-based (line, column in characters) of byte `offset` of `src` (clamped; an offset inside a
/// multi-byte character counts as that character).
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(src.len());
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    (1 + src[..start].matches('\n').count(), 1 + src[start..at].chars().count())
}

/// How many diagnostics a run prints by default.
pub const DEFAULT_LIMIT: usize = 100;
/// Source lines longer than this many bytes are shown trimmed around the labels.
pub const MAX_LINE: usize = 160;


fn to_codespan(d: &Diagnostic, src_len: usize) -> cs::Diagnostic<()> {
    let sev = match d.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    let clamp = |s: Span| {
        let r = s.range();
        r.start.min(src_len)..r.end.min(src_len)
    };
    cs::Diagnostic::new(sev)
        .with_code(d.code.as_str())
        .with_message(&d.message)
        .with_labels(
            d.labels
                .iter()
                .map(|l| {
                    let lab = if l.primary {
                        cs::Label::primary((), clamp(l.span))
                    } else {
                        cs::Label::secondary((), clamp(l.span))
                    };
                    lab.with_message(&l.message)
                })
                .collect(),
        )
        .with_notes(d.notes.clone())
}
