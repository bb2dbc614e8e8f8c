//! Long source lines, trimmed for display: a diagnostic on a 36 KB line would otherwise print
//! the whole line once per label and once per diagnostic (4,000 syntax errors on one line made
//! 217 MB of output). Each labelled line longer than [`MAX_LINE`] bytes keeps a window around its
//! labels (with `…` marking what was cut); the label spans are moved to the trimmed text.

use std::borrow::Cow;

use super::{Diagnostic, Span, MAX_LINE};

/// Bytes of context kept on each side of the labels of a trimmed line.
const CONTEXT: usize = 40;
const ELLIPSIS: &str = "…";

/// The text to render `d` against and `d` with its spans moved into it (unchanged when no
/// labelled line is long, or a label spans lines).
pub(super) fn view<'s>(src: &'s str, d: &Diagnostic) -> (Cow<'s, str>, Diagnostic) {
    let clamp = |x: u32| (x as usize).min(src.len());
    let line_of = |at: usize| {
        let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = src[at..].find('\n').map_or(src.len(), |i| at + i);
        (start, end)
    };
    // One window per long line: (line start, line end, window start, window end).
    let mut windows: Vec<(usize, usize, usize, usize)> = vec![];
    for l in &d.labels {
        let (s, e) = (clamp(l.span.start), clamp(l.span.end));
        if !src.is_char_boundary(s) || !src.is_char_boundary(e) {
            return (Cow::Borrowed(src), d.clone());
        }
        let (ls, le) = line_of(s);
        if e > le {
            return (Cow::Borrowed(src), d.clone()); // a multi-line label: leave as is
        }
        if le - ls <= MAX_LINE {
            continue;
        }
        match windows.iter_mut().find(|w| w.0 == ls) {
            Some(w) => {
                w.2 = w.2.min(s);
                w.3 = w.3.max(e);
            }
            None => windows.push((ls, le, s, e)),
        }
    }
    if windows.is_empty() {
        return (Cow::Borrowed(src), d.clone());
    }
    windows.sort();
    let floor = |mut i: usize| {
        while !src.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let ceil = |mut i: usize| {
        while !src.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    // Build the trimmed text; per window remember where it landed and how much the line shrank.
    let mut text = String::with_capacity(src.len());
    let mut maps: Vec<(usize, usize, usize, usize, isize)> = vec![]; // (old ws, old we, new ws, old line end, delta)
    let mut pos = 0;
    for &(ls, le, s, e) in &windows {
        let (ws, we) = (floor(s.saturating_sub(CONTEXT).max(ls)), ceil((e + CONTEXT).min(le)));
        text.push_str(&src[pos..ls]);
        let line_start_new = text.len();
        if ws > ls {
            text.push_str(ELLIPSIS);
        }
        let nws = text.len();
        text.push_str(&src[ws..we]);
        if we < le {
            text.push_str(ELLIPSIS);
        }
        let delta = (text.len() - line_start_new) as isize - (le - ls) as isize;
        maps.push((ws, we, nws, le, delta));
        pos = le;
    }
    text.push_str(&src[pos..]);
    let moved = |x: u32| -> u32 {
        let x = clamp(x);
        match maps.iter().find(|m| m.0 <= x && x <= m.1) {
            Some(&(ws, _, nws, _, _)) => (nws + x - ws) as u32,
            // Not on a trimmed line: shifted by what the trimmed lines before it lost.
            None => {
                let shift: isize = maps.iter().filter(|m| m.3 <= x).map(|m| m.4).sum();
                (x as isize + shift).max(0) as u32
            }
        }
    };
    let mut d = d.clone();
    // codespan counts columns in the trimmed text: say where the primary label really is.
    if let Some(p) = d.labels.iter().find(|l| l.primary).or(d.labels.first()) {
        let (line, col) = super::line_col(src, clamp(p.span.start));
        d = d.with_note(format!("the long source line is shown trimmed; the error is at line {line}, column {col}"));
    }
    for l in &mut d.labels {
        l.span = Span::new(moved(l.span.start) as usize, moved(l.span.end) as usize);
    }
    (Cow::Owned(text), d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Code;

    #[test]
    fn a_long_line_is_shown_around_its_label() {
        let line = format!("let x = {}bad{};", "a".repeat(1000), "b".repeat(1000));
        let src = format!("kernel\n{line}\nend\n");
        let at = src.find("bad").unwrap();
        let d = Diagnostic::error(Code::ParseUnexpected, "unexpected", Span::new(at, at + 3), "here");
        let (text, moved) = view(&src, &d);
        let s = moved.labels[0].span;
        assert_eq!(&text[s.start as usize..s.end as usize], "bad");
        assert!(text.len() < 300, "{}", text.len());
        assert!(text.contains("…aaaa") && text.contains("bbbb…"));
        assert!(moved.notes.iter().any(|n| n.contains("line 2, column 1009")), "{:?}", moved.notes);
        // A label on a short line after the trimmed one moves with the text.
        let end = src.find("end").unwrap();
        let two = Diagnostic::error(Code::ParseUnexpected, "unexpected", Span::new(at, at + 3), "here").with_label(Span::new(end, end + 3), "and here");
        let (text, moved) = view(&src, &two);
        let s = moved.labels[1].span;
        assert_eq!(&text[s.start as usize..s.end as usize], "end");
        // Short lines are left alone.
        let short = "kernel k() { bad }";
        let d = Diagnostic::error(Code::ParseUnexpected, "unexpected", Span::new(13, 16), "here");
        assert_eq!(view(short, &d).0, short);
    }
}
