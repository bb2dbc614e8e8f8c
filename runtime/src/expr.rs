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
//! Functions: `cdiv(a, b)` (ceiling division), `min(a, b)`, `max(a, b)`.
//! Arithmetic is on `i64` with overflow checks; `/` and `%` are Euclidean (floor for the
//! non-negative values sizes have), so `T / 64` and `T % 64` mean what a kernel author expects.
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

/// Binary operators, in the order of the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// Built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Cdiv,
    Min,
    Max,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Int(i64),
    Sym(String),
    Neg(Box<Node>),
    Bin(BinOp, Box<Node>, Box<Node>),
    Call(Func, Box<Node>, Box<Node>),
}

/// A parsed size expression. Keeps its source text for error messages and display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeExpr {
    text: String,
    root: Node,
}

impl SizeExpr {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`ExprError::Parse`] for malformed text, [`ExprError::UnknownFunction`] for a call to an
    /// unknown function or with the wrong number of arguments, [`ExprError::Overflow`] for an
    /// integer literal beyond `i64`.
    pub fn parse(text: &str) -> Result<SizeExpr, ExprError> {
        let mut p = Parser { text, pos: 0 };
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

    /// Every symbol the expression mentions, sorted and without duplicates.
    pub fn symbols(&self) -> Vec<String> {
        fn walk(n: &Node, out: &mut Vec<String>) {
            match n {
                Node::Int(_) => {}
                Node::Sym(s) => out.push(s.clone()),
                Node::Neg(a) => walk(a, out),
                Node::Bin(_, a, b) | Node::Call(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
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
        let div0 = || ExprError::DivisionByZero { expr: self.text.clone() };
        Ok(match n {
            Node::Int(v) => *v,
            Node::Sym(s) => *env.get(s).ok_or_else(|| ExprError::UnknownSymbol {
                expr: self.text.clone(),
                name: s.clone(),
            })?,
            Node::Neg(a) => self.eval_node(a, env)?.checked_neg().ok_or_else(overflow)?,
            Node::Bin(op, a, b) => {
                let (x, y) = (self.eval_node(a, env)?, self.eval_node(b, env)?);
                match op {
                    BinOp::Add => x.checked_add(y).ok_or_else(overflow)?,
                    BinOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
                    BinOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
                    BinOp::Div if y == 0 => return Err(div0()),
                    BinOp::Div => x.checked_div_euclid(y).ok_or_else(overflow)?,
                    BinOp::Rem if y == 0 => return Err(div0()),
                    BinOp::Rem => x.checked_rem_euclid(y).ok_or_else(overflow)?,
                }
            }
            Node::Call(f, a, b) => {
                let (x, y) = (self.eval_node(a, env)?, self.eval_node(b, env)?);
                match f {
                    Func::Min => x.min(y),
                    Func::Max => x.max(y),
                    Func::Cdiv if y == 0 => return Err(div0()),
                    // ceil(x / y) = floor((x + y - 1) / y) for y > 0; written with a
                    // remainder test so that it cannot overflow and is right for any sign.
                    Func::Cdiv => {
                        let q = x.checked_div_euclid(y).ok_or_else(overflow)?;
                        if x.rem_euclid(y) != 0 && y > 0 {
                            q.checked_add(1).ok_or_else(overflow)?
                        } else {
                            q
                        }
                    }
                }
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

/// Recursive-descent parser over the source bytes (the language is ASCII).
struct Parser<'a> {
    text: &'a str,
    pos: usize,
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
                BinOp::Add
            } else if self.eat(b'-') {
                BinOp::Sub
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
                BinOp::Mul
            } else if self.eat(b'/') {
                BinOp::Div
            } else if self.eat(b'%') {
                BinOp::Rem
            } else {
                return Ok(lhs);
            };
            let rhs = self.unary()?;
            lhs = Node::Bin(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.eat(b'-') {
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        self.atom()
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
                let mut args = vec![self.expr()?];
                while self.eat(b',') {
                    args.push(self.expr()?);
                }
                if !self.eat(b')') {
                    return Err(self.err("expected `,` or `)` in function call"));
                }
                let func = match (name.as_str(), args.len()) {
                    ("cdiv", 2) => Func::Cdiv,
                    ("min", 2) => Func::Min,
                    ("max", 2) => Func::Max,
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
                    (Some(a), Some(b)) => Ok(Node::Call(func, a, b)),
                    _ => Err(self.err("internal: argument list")),
                }
            }
            Some(b'(') => {
                self.pos += 1;
                let inner = self.expr()?;
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
