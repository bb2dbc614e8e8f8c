//! No input makes the front end panic: thousands of random and mutated inputs (byte flips,
//! truncations, token shuffles, splices of the shipped examples) all come back as diagnostics.

use proptest::prelude::*;

use tilec::frontend::{check_source, Options};
use tilec::syntax::lexer;

fn corpus() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = vec![];
    for dir in ["dsl-examples", "dsl-examples/negative", "tests/ui"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "tile")).collect();
        files.sort();
        out.extend(files.iter().map(|f| std::fs::read_to_string(f).unwrap()));
    }
    assert!(out.len() >= 8);
    out
}

/// Runs the whole front end (and the renderer) and checks that errors carry in-bounds spans.
fn survives(src: &str) {
    let c = check_source(src, &Options { deny_warnings: true, ..Options::default() });
    let rendered = c.diags.render("fuzz.tile", src, false);
    for d in c.diags.iter() {
        if let Some(s) = d.primary_span() {
            assert!(s.start <= s.end && s.end as usize <= src.len(), "span {s:?} out of bounds");
        }
    }
    if c.diags.has_errors() {
        assert!(!rendered.is_empty());
    }
}

/// Replaces the tokens of `src` by a shuffle of them (a crude but effective mutator).
fn shuffle_tokens(src: &str, seed: u64) -> String {
    let mut toks: Vec<String> = lexer::lex(src).into_iter().filter_map(|t| t.ok()).map(|(s, _, e)| src[s..e].to_string()).collect();
    let mut x = seed | 1;
    for i in (1..toks.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        toks.swap(i, (x % (i as u64 + 1)) as usize);
    }
    toks.join(" ")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn byte_flips_truncations_and_splices(which in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6), cut in any::<prop::sample::Index>(), splice in any::<prop::sample::Index>()) {
        let corpus = corpus();
        let mut bytes = corpus[which.index(corpus.len())].clone().into_bytes();
        for (at, b) in flips {
            let i = at.index(bytes.len().max(1));
            if i < bytes.len() { bytes[i] = b; }
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep);
        let other = corpus[splice.index(corpus.len())].as_bytes();
        bytes.extend_from_slice(&other[..other.len() / 3]);
        survives(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn token_shuffles(which in any::<prop::sample::Index>(), seed in any::<u64>()) {
        let corpus = corpus();
        survives(&shuffle_tokens(&corpus[which.index(corpus.len())], seed));
    }

    #[test]
    fn arbitrary_text(s in "\\PC{0,300}") {
        survives(&s);
    }

    #[test]
    fn token_soup(toks in prop::collection::vec(prop::sample::select(vec![
        "kernel", "k", "(", ")", "x", ":", "f32", "bf16", "[", "]", ",", "N", "grid", "{", "}", "let", "mut",
        "=", "+=", "-=", "load", "store", "..", "+", "-", "*", "/", "@", ".T", "for", "in", "rev", ";", "0", "64",
        "128", "1.5", "tmem", "smem", "out", "const", "C", "select", "exp2", "row_sum", "zeros", "threads", "<", "&&",
    ]), 0..80)) {
        survives(&toks.join(" "));
    }
}

#[test]
fn huge_literals_and_deep_nesting_do_not_panic() {
    survives("const C = 99999999999999999999999; kernel k(x: f32[N, C]) grid(N) { }");
    survives("kernel k(x: f32[N, 64]) grid(1) { let a = 1e999; }");
    survives(&format!("kernel k(x: f32[N, 64]) grid(1) {{ let a = {}1{}; }}", "(".repeat(200), ")".repeat(200)));
    survives("kernel k(x: f32[N, 64], y: out f32[N, 64]) grid(cdiv(N, 0)) { store y[0..+2000000, :] = load x[0..+64, :]; }");
    survives("const A = 2147483647 * 2147483647; const B = 1 / 0; const C = 5 % 0;");
}

/// Codes of the errors `src` gets (the whole front end runs).
fn error_codes(src: &str) -> Vec<&'static str> {
    survives(src);
    check_source(src, &Options::default()).diags.iter().filter(|d| d.severity == tilec::diag::Severity::Error).map(|d| d.code.as_str()).collect()
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let kernel = |body: String| format!("kernel k(x: f32[N, 64]) grid(1) {{ {body} }}");
    // These used to abort the process (stack overflow in lowering, constant evaluation or drop).
    let sum = |n: usize| vec!["1"; n].join("+");
    assert_eq!(error_codes(&kernel(format!("let a = {};", sum(10_000)))), ["E0103"]);
    assert!(error_codes(&format!("const C = {};", sum(10_000))).contains(&"E0103"));
    assert_eq!(error_codes(&kernel(format!("let t = load x[0..+64, :]; let a = t{};", ".T".repeat(10_000)))), ["E0103"]);
    assert_eq!(error_codes(&kernel(format!("let a = {}1;", "-".repeat(10_000)))), ["E0103"]);
    assert_eq!(error_codes(&kernel(format!("let a = {}1{};", "(".repeat(10_000), ")".repeat(10_000)))), ["E0103"]);
    assert_eq!(error_codes(&kernel(format!("{} {}", "for i in 0..2 {".repeat(5_000), "}".repeat(5_000)))), ["E0103"]);
    assert_eq!(error_codes(&kernel(format!("{} {}", "for i in 0..2 {".repeat(65), "}".repeat(65)))), ["E0103"]);
    // A syntax error after a huge left-deep sum: the parser drops the tree while recovering.
    assert_eq!(error_codes(&kernel(format!("let a = {}", sum(200_000)))), ["E0101"]);
    // Up to the limits everything still compiles, inside a test thread's 2 MiB stack.
    let at_limit = kernel(format!("{} let a = {}; {}", "for i in 0..2 {".repeat(64), sum(256), "}".repeat(64)));
    assert_eq!(error_codes(&at_limit), Vec::<&str>::new());
    assert_eq!(error_codes(&kernel(format!("let a = {};", sum(257)))), ["E0103"]);
}
