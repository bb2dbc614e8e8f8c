//! Size expressions: the small integer language of shapes and grids in the metadata.
//!
//! A parameter's shape is a list of expressions over the kernel's symbolic sizes (`"B"`,
//! `"T*H"`, `"K"`), and so is the launch grid (`"cdiv(V, 64)"`). This module parses them into a
//! tree once and evaluates them against a map of size values.
//!
//! Grammar (whitespace is ignored):
//! ```text
//! expr   := term (('+' | '-') term)*
//! term   := unary (('*' | '/' | '%') unary)*
//! unary  := '-' unary | atom
//! atom   := INT | IDENT | IDENT '(' expr (',' expr)* ')' | '(' expr ')'
//! ```
//! Functions: `cdiv(a, b)`, `min(a, b)`, `max(a, b)`.
//!
//! # Semantics: the kernel's integer arithmetic
//! Arithmetic is on `i64` with overflow checks, and division is the one the generated kernels
//! perform (`div.s32` / `rem.s32` in PTX, C99 `/` and `%`): `a / b` **truncates toward zero**,
//! `a % b` has the sign of `a` (`a == (a / b) * b + a % b`), and `cdiv(a, b)` is
//! `(a + b - 1) / b` with that truncating division — exactly the instruction sequence the
//! compiler emits. For the non-negative operands sizes usually have this is ceiling division;
//! with a negative intermediate it is not, and then the host must still agree with the kernel:
//! `(T - 100) / 64 + 1` at `T = 50` is `-50 / 64 + 1 = 0 + 1 = 1` in the kernel, so it is 1
//! here too (floor division would give 0). Every tool that evaluates a size — the runtime's
//! binder, the interpreter, `kverify` — goes through [`SizeExpr::eval`] / [`apply`], so none
//! can disagree with another. `docs/metadata.md` states the same rules.
//!
//! Every malformed input is an [`ExprError`], never a panic.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

/// Errors from parsing or evaluating a size expression. Each names the expression text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExprError {
    /// The text is not a valid expression; `pos` is the byte offset where parsing stopped.
    #[error("cannot parse size expression `{expr}` at byte {pos}: {message}")]
    Parse {
        /// The whole expression text.
        expr: String,
        /// Byte offset of the problem.
        pos: usize,
        /// What was expected.
        message: String,
    },
    /// A call to a function other than `cdiv`, `min`, `max`, or with the wrong argument count.
    #[error("size expression `{expr}`: unknown function `{name}` with {arity} argument(s) (known: cdiv(a,b), min(a,b), max(a,b))")]
    UnknownFunction {
        /// The whole expression text.
        expr: String,
        /// The function name.
        name: String,
        /// How many arguments it was given.
        arity: usize,
    },
    /// A symbol without a value in the evaluation environment.
    #[error("size expression `{expr}` uses `{name}`, which has no value")]
    UnknownSymbol {
        /// The whole expression text.
        expr: String,
        /// The symbol.
        name: String,
    },
    /// Division, remainder or `cdiv` by zero.
    #[error("size expression `{expr}` divides by zero")]
    DivisionByZero {
        /// The whole expression text.
        expr: String,
    },
    /// An intermediate result does not fit in `i64`.
    #[error("size expression `{expr}` overflows 64-bit integers")]
    Overflow {
        /// The whole expression text.
        expr: String,
    },
}

/// The binary operators and functions of the language (a function of two arguments is just a
/// binary operator with call syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`, truncating toward zero (PTX `div.s32`).
    Div,
    /// `a % b`, with the sign of `a` (PTX `rem.s32`).
    Rem,
    /// `cdiv(a, b)` = `(a + b - 1) / b` with truncating division.
    Cdiv,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
}

/// Why [`apply`] has no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithError {
    /// `/`, `%` or `cdiv` by zero.
    DivisionByZero,
    /// The result (or `a + b - 1` inside `cdiv`) does not fit in `i64`.
    Overflow,
}

/// Applies `op` to `a` and `b` with the kernel's semantics (see the module docs). This is the
/// single definition of size arithmetic; the compiler's constant folder is tested against it.
///
/// # Errors
/// [`ArithError::DivisionByZero`] when `b == 0` for `/`, `%`, `cdiv`; [`ArithError::Overflow`]
/// when a result leaves `i64` (including `i64::MIN / -1`).
pub fn apply(op: Op, a: i64, b: i64) -> Result<i64, ArithError> {
    use ArithError::{DivisionByZero, Overflow};
    if matches!(op, Op::Div | Op::Rem | Op::Cdiv) && b == 0 {
        return Err(DivisionByZero);
    }
    match op {
        Op::Add => a.checked_add(b),
        Op::Sub => a.checked_sub(b),
        Op::Mul => a.checked_mul(b),
        // `checked_div` / `checked_rem` are Rust's truncating `/` and `%`, i.e. `div.s32`.
        Op::Div => a.checked_div(b),
        Op::Rem => a.checked_rem(b),
        // The kernel computes `(a + (b - 1)) / b`; so do we, overflow-checked.
        Op::Cdiv => b.checked_sub(1).and_then(|b1| a.checked_add(b1)).and_then(|t| t.checked_div(b)),
        Op::Min => Some(a.min(b)),
        Op::Max => Some(a.max(b)),
    }
    .ok_or(Overflow)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Int(i64),
    Sym(String),
    Neg(Box<Node>),
    Bin(Op, Box<Node>, Box<Node>),
}

/// A parsed size expression. Keeps its source text for error messages and display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeExpr {
    text: String,
    root: Node,
}

/// Every symbol under `n`, in tree order (with repeats).
fn collect_symbols(n: &Node, out: &mut Vec<String>) {
    match n {
        Node::Int(_) => {}
        Node::Sym(s) => out.push(s.clone()),
        Node::Neg(a) => collect_symbols(a, out),
        Node::Bin(_, a, b) => {
            collect_symbols(a, out);
            collect_symbols(b, out);
        }
    }
}

impl SizeExpr {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`ExprError::Parse`] for malformed text, [`ExprError::UnknownFunction`] for a call to an
    /// unknown function or with the wrong number of arguments, [`ExprError::Overflow`] for an
    /// integer literal beyond `i64`.
    pub fn parse(text: &str) -> Result<SizeExpr, ExprError> {
        // Hostile metadata must not exhaust the stack (parsing, evaluation and dropping recurse
        // over the tree): real size expressions are a few dozen bytes and a few levels deep.
        if text.len() > MAX_TEXT_BYTES {
            return Err(ExprError::Parse { expr: text.chars().take(64).collect::<String>() + "…", pos: MAX_TEXT_BYTES, message: format!("size expression longer than {MAX_TEXT_BYTES} bytes") });
        }
        let mut p = Parser { text, pos: 0, depth: 0 };
        let root = p.expr()?;
        p.skip_ws();
        if p.pos != text.len() {
            return Err(p.err("unexpected trailing input"));
        }
        Ok(SizeExpr { text: text.to_string(), root })
    }

    /// The source text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The symbol name when the expression is a bare identifier (`"T"`), which is what lets the
    /// binder infer a size from a tensor's extent; `None` for anything else (`"T*H"`, `"64"`).
    pub fn as_symbol(&self) -> Option<&str> {
        match &self.root {
            Node::Sym(s) => Some(s),
            _ => None,
        }
    }

    /// Solves a product dimension for its one unknown factor: for `X * S` or `S * X` with `S` a
    /// symbol not in `env` and `X` evaluable, `extent = X·S` gives `Some(Ok((S, extent / X)))`,
    /// or `Some(Err(X))` when `extent` is not a positive multiple of a positive `X` (how GVA's
    /// value heads `H * G` are refused unless a multiple of H). `None` for any other form.
    pub fn solve_factor(&self, extent: i64, env: &BTreeMap<String, i64>) -> Option<Result<(String, i64), i64>> {
        let (name, known) = self.product_unknown(&|s| env.contains_key(s))?;
        let x = self.eval_node(known, env).ok()?;
        Some(if x > 0 && extent > 0 && extent % x == 0 { Ok((name.to_string(), extent / x)) } else { Err(x) })
    }

    /// The factor [`SizeExpr::solve_factor`] solves for, without values: for `X * S` or `S * X`
    /// with `S` a symbol `is_known` refuses and every symbol of `X` known, `S` (what decides
    /// whether a size can be bound at all: `tilec check` refuses an operator size that cannot).
    pub fn unknown_factor(&self, is_known: &dyn Fn(&str) -> bool) -> Option<&str> {
        let (name, x) = self.product_unknown(is_known)?;
        let mut syms = vec![];
        collect_symbols(x, &mut syms);
        syms.iter().all(|s| is_known(s)).then_some(name)
    }

    /// `X * S` or `S * X` with exactly one side a symbol `is_known` refuses: that symbol and X.
    fn product_unknown(&self, is_known: &dyn Fn(&str) -> bool) -> Option<(&str, &Node)> {
        let Node::Bin(Op::Mul, a, b) = &self.root else { return None };
        let unknown = |n: &Node| matches!(n, Node::Sym(s) if !is_known(s));
        let (sym, known) = match (unknown(a), unknown(b)) {
            (true, false) => (a, b),
            (false, true) => (b, a),
            _ => return None,
        };
        let Node::Sym(name) = sym.as_ref() else { return None };
        Some((name, known))
    }

    /// Every symbol the expression mentions, sorted and without duplicates.
    pub fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_symbols(&self.root, &mut out);
        out.sort();
        out.dedup();
        out
    }

    /// Evaluates the expression with sizes taken from `env`.
    ///
    /// # Errors
    /// [`ExprError::UnknownSymbol`], [`ExprError::DivisionByZero`], [`ExprError::Overflow`].
    pub fn eval(&self, env: &BTreeMap<String, i64>) -> Result<i64, ExprError> {
        self.eval_node(&self.root, env)
    }

    fn eval_node(&self, n: &Node, env: &BTreeMap<String, i64>) -> Result<i64, ExprError> {
        let overflow = || ExprError::Overflow { expr: self.text.clone() };
        Ok(match n {
            Node::Int(v) => *v,
            Node::Sym(s) => *env.get(s).ok_or_else(|| ExprError::UnknownSymbol {
                expr: self.text.clone(),
                name: s.clone(),
            })?,
            Node::Neg(a) => self.eval_node(a, env)?.checked_neg().ok_or_else(overflow)?,
            Node::Bin(op, a, b) => {
                let (x, y) = (self.eval_node(a, env)?, self.eval_node(b, env)?);
                apply(*op, x, y).map_err(|e| match e {
                    ArithError::DivisionByZero => ExprError::DivisionByZero { expr: self.text.clone() },
                    ArithError::Overflow => overflow(),
                })?
            }
        })
    }
}

impl fmt::Display for SizeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `s` is a valid size or parameter name: an ASCII letter or `_`, then letters,
/// digits or `_`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Longest size-expression text accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Deepest nesting of parentheses, calls and unary minus accepted.
pub const MAX_DEPTH: usize = 64;

/// Recursive-descent parser over the source bytes (the language is ASCII).
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    /// Current nesting of `(`, calls and unary `-`.
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, message: &str) -> ExprError {
        ExprError::Parse { expr: self.text.to_string(), pos: self.pos, message: message.to_string() }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(c) if c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// Consumes `c` (after whitespace) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Result<Node, ExprError> {
        let mut lhs = self.term()?;
        loop {
            let op = if self.eat(b'+') {
                Op::Add
            } else if self.eat(b'-') {
                Op::Sub
            } else {
                return Ok(lhs);
            };
            let rhs = self.term()?;
            lhs = Node::Bin(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn term(&mut self) -> Result<Node, ExprError> {
        let mut lhs = self.unary()?;
        loop {
            let op = if self.eat(b'*') {
                Op::Mul
            } else if self.eat(b'/') {
                Op::Div
            } else if self.eat(b'%') {
                Op::Rem
            } else {
                return Ok(lhs);
            };
            let rhs = self.unary()?;
            lhs = Node::Bin(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.eat(b'-') {
            let inner = self.nested(Self::unary)?;
            return Ok(Node::Neg(Box::new(inner)));
        }
        self.atom()
    }

    /// Runs `f` one nesting level deeper, refusing to go past [`MAX_DEPTH`].
    fn nested(&mut self, f: fn(&mut Self) -> Result<Node, ExprError>) -> Result<Node, ExprError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.err(&format!("nested deeper than {MAX_DEPTH} levels")));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                    self.pos += 1;
                }
                let digits = &self.text[start..self.pos];
                let v = digits.parse::<i64>().map_err(|_| ExprError::Overflow { expr: self.text.to_string() })?;
                Ok(Node::Int(v))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
                    self.pos += 1;
                }
                let name = self.text[start..self.pos].to_string();
                if !self.eat(b'(') {
                    return Ok(Node::Sym(name));
                }
                let mut args = vec![self.nested(Self::expr)?];
                while self.eat(b',') {
                    args.push(self.nested(Self::expr)?);
                }
                if !self.eat(b')') {
                    return Err(self.err("expected `,` or `)` in function call"));
                }
                let func = match (name.as_str(), args.len()) {
                    ("cdiv", 2) => Op::Cdiv,
                    ("min", 2) => Op::Min,
                    ("max", 2) => Op::Max,
                    _ => {
                        return Err(ExprError::UnknownFunction {
                            expr: self.text.to_string(),
                            name,
                            arity: args.len(),
                        })
                    }
                };
                let b = args.pop().map(Box::new);
                let a = args.pop().map(Box::new);
                match (a, b) {
                    (Some(a), Some(b)) => Ok(Node::Bin(func, a, b)),
                    _ => Err(self.err("internal: argument list")),
                }
            }
            Some(b'(') => {
                self.pos += 1;
                let inner = self.nested(Self::expr)?;
                if !self.eat(b')') {
                    return Err(self.err("expected `)`"));
                }
                Ok(inner)
            }
            Some(_) => Err(self.err("expected an integer, a size name, a call or `(`")),
            None => Err(self.err("unexpected end of expression")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_nesting_and_length_are_errors_not_stack_overflows() {
        // The fuzzer's metadata: 10,000 nested parentheses, 30,000 unary minuses.
        let deep = format!("{}T{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(matches!(SizeExpr::parse(&deep), Err(ExprError::Parse { .. })));
        let minus = format!("{}T", "-".repeat(30_000));
        assert!(matches!(SizeExpr::parse(&minus), Err(ExprError::Parse { .. })));
        let e = SizeExpr::parse(&format!("{}T{}", "(".repeat(65), ")".repeat(65))).unwrap_err();
        assert!(e.to_string().contains("nested deeper than 64"), "{e}");
        // At the limit it still parses and evaluates.
        let ok = SizeExpr::parse(&format!("{}T{}", "(".repeat(64), ")".repeat(64))).expect("64 levels");
        assert_eq!(ok.eval(&env(&[("T", 7)])), Ok(7));
        let long = vec!["T"; 3000].join("+");
        assert!(SizeExpr::parse(&long).unwrap_err().to_string().contains("longer than 4096 bytes"));
    }

    fn env(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn ev(text: &str, pairs: &[(&str, i64)]) -> Result<i64, ExprError> {
        SizeExpr::parse(text)?.eval(&env(pairs))
    }

    #[test]
    fn evaluates_shapes_and_grids() {
        let e = [("B", 2), ("T", 100), ("H", 4), ("V", 130)];
        assert_eq!(ev("B", &e), Ok(2));
        assert_eq!(ev("T*H", &e), Ok(400));
        assert_eq!(ev("cdiv(V, 64)", &e), Ok(3));
        assert_eq!(ev("cdiv(128, 64)", &e), Ok(2));
        assert_eq!(ev("min(T, 64)", &e), Ok(64));
        assert_eq!(ev("max(T,64)", &e), Ok(100));
        assert_eq!(ev("1 + 2 * 3", &e), Ok(7));
        assert_eq!(ev("(1 + 2) * 3", &e), Ok(9));
        assert_eq!(ev("T / 64 + T % 64", &e), Ok(1 + 36));
        assert_eq!(ev("10 - 3 - 2", &e), Ok(5));
        assert_eq!(ev("-3 + 5", &e), Ok(2));
        assert_eq!(ev("  B*H * cdiv(T,  64) ", &e), Ok(16));
    }

    #[test]
    fn division_truncates_like_the_kernel() {
        // The review's example: the kernel computes div.s32(-50, 64) + 1 = 0 + 1.
        assert_eq!(ev("(T - 100) / 64 + 1", &[("T", 50)]), Ok(1));
        assert_eq!(ev("(T - 100) / 64 + 1", &[("T", 228)]), Ok(3));
        // C99 / PTX rules, derived from a == (a / b) * b + a % b with |a % b| < |b|.
        assert_eq!(ev("-7 / 2", &[]), Ok(-3));
        assert_eq!(ev("-7 % 2", &[]), Ok(-1));
        assert_eq!(ev("7 / -2", &[]), Ok(-3));
        assert_eq!(ev("7 % -2", &[]), Ok(1));
        // cdiv is (a + b - 1) / b truncating: ceil for a >= 0, not for a <= -b.
        assert_eq!(ev("cdiv(T, 64)", &[("T", 0)]), Ok(0));
        assert_eq!(ev("cdiv(T, 64)", &[("T", 65)]), Ok(2));
        assert_eq!(ev("cdiv(T - 100, 64)", &[("T", 50)]), Ok((-50 + 63) / 64));
        assert_eq!(ev("cdiv(T - 200, 64)", &[("T", 50)]), Ok((-150 + 63) / 64));
        assert_eq!(ev("cdiv(T - 200, 64)", &[("T", 50)]), Ok(-1));
        assert_eq!(apply(Op::Div, i64::MIN, -1), Err(ArithError::Overflow));
        assert_eq!(apply(Op::Rem, 3, 0), Err(ArithError::DivisionByZero));
        assert_eq!(apply(Op::Cdiv, i64::MAX, 2), Err(ArithError::Overflow));
    }

    #[test]
    fn symbol_queries() {
        let s = SizeExpr::parse("T").unwrap();
        assert_eq!(s.as_symbol(), Some("T"));
        let s = SizeExpr::parse("cdiv(T*H, K) + T").unwrap();
        assert_eq!(s.as_symbol(), None);
        assert_eq!(s.symbols(), vec!["H", "K", "T"]);
        assert_eq!(s.to_string(), "cdiv(T*H, K) + T");
    }

    #[test]
    fn parse_errors_are_errors() {
        for bad in ["", "T*", "(T", "T)", "cdiv(T 64)", "3 $ 4", "T H", "min()", ",", "cdiv(T,"] {
            assert!(
                matches!(SizeExpr::parse(bad), Err(ExprError::Parse { .. }) | Err(ExprError::UnknownFunction { .. })),
                "`{bad}` should not parse"
            );
        }
        assert!(matches!(
            SizeExpr::parse("pow(T, 2)"),
            Err(ExprError::UnknownFunction { name, arity: 2, .. }) if name == "pow"
        ));
        assert!(matches!(
            SizeExpr::parse("min(T)"),
            Err(ExprError::UnknownFunction { arity: 1, .. })
        ));
        assert!(matches!(SizeExpr::parse("99999999999999999999"), Err(ExprError::Overflow { .. })));
        match SizeExpr::parse("T + * 2") {
            Err(ExprError::Parse { pos, .. }) => assert_eq!(pos, 4),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn evaluation_errors() {
        assert!(matches!(ev("T", &[]), Err(ExprError::UnknownSymbol { name, .. }) if name == "T"));
        assert!(matches!(ev("T / 0", &[("T", 1)]), Err(ExprError::DivisionByZero { .. })));
        assert!(matches!(ev("T % 0", &[("T", 1)]), Err(ExprError::DivisionByZero { .. })));
        assert!(matches!(ev("cdiv(T, 0)", &[("T", 1)]), Err(ExprError::DivisionByZero { .. })));
        assert!(matches!(ev("T * T", &[("T", i64::MAX)]), Err(ExprError::Overflow { .. })));
        assert!(matches!(ev("cdiv(T, 1)", &[("T", i64::MAX)]), Ok(i64::MAX)));
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("T"));
        assert!(is_identifier("_x1"));
        assert!(!is_identifier("1x"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("a-b"));
    }
}
