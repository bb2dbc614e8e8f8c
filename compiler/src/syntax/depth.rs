//! Nesting limits (E0103). Semantic analysis and constant evaluation recurse over the AST, so
//! a 10 000-term sum or 5 000 nested `for` loops overflowed the stack (an abort, not a
//! diagnostic). Two checks keep every later pass inside a small stack:
//!
//! * [`check_tokens`], before parsing: brackets plus runs of prefix `-`/`!` nested deeper than
//!   [`MAX_EXPR_DEPTH`]. These are the constructs that grow the parser's own stack; a deep
//!   stack also made the parser's error recovery quadratic (minutes on 10 000 nested loops
//!   with a missing `;`). Such a file is not parsed.
//! * [`limit`], after parsing: expressions deeper than [`MAX_EXPR_DEPTH`] (left-deep chains
//!   such as long sums do not grow the parser stack) and loops nested deeper than
//!   [`MAX_LOOP_DEPTH`] are reported and replaced by error nodes, which later passes skip.
//!
//! Nesting is measured without recursion; dropping a deep expression is iterative too
//! (`impl Drop for Expr`).

use super::ast::{Expr, ExprKind, File, IndexExpr, Item, OpStmt, Stmt};
use super::lexer::Token;
use crate::diag::{Code, Diagnostic, Diagnostics, Span};

/// Deepest accepted expression (a leaf is depth 1) and deepest bracket nesting. Measured in an
/// unoptimised build: lowering takes about 4 KiB of stack per level, so 256 levels stay well
/// inside a 2 MiB thread stack.
pub const MAX_EXPR_DEPTH: usize = 256;

/// Deepest accepted nesting of `for` loops.
pub const MAX_LOOP_DEPTH: usize = 64;

/// Checks bracket nesting and prefix-operator runs in a token stream (`(start, token, end)`).
/// Returns the diagnostic for the first place that goes deeper than [`MAX_EXPR_DEPTH`].
pub fn check_tokens(tokens: &[(usize, Token, usize)]) -> Option<Diagnostic> {
    let (mut brackets, mut prefix) = (0usize, 0usize);
    for (s, t, e) in tokens {
        match t {
            Token::LParen | Token::LBracket | Token::LBrace => brackets += 1,
            Token::RParen | Token::RBracket | Token::RBrace => brackets = brackets.saturating_sub(1),
            _ => {}
        }
        prefix = if matches!(t, Token::Minus | Token::Bang) { prefix + 1 } else { 0 };
        if brackets + prefix > MAX_EXPR_DEPTH {
            return Some(
                Diagnostic::error(Code::TooDeep, format!("brackets and prefix operators nested more than {MAX_EXPR_DEPTH} deep"), Span::new(*s, *e), "nested too deeply")
                    .with_note("the file is not parsed further; split deep expressions into `let` bindings"),
            );
        }
    }
    None
}

/// Enforces [`MAX_EXPR_DEPTH`] and [`MAX_LOOP_DEPTH`] on a parsed file, pushing one E0103 per
/// rejected construct.
pub fn limit(file: &mut File, diags: &mut Diagnostics) {
    for item in &mut file.items {
        match item {
            Item::Const(c) => expr(&mut c.value, diags),
            Item::Kernel(k) => {
                for p in &mut k.params {
                    for e in p.shape.iter_mut().flatten() {
                        expr(e, diags);
                    }
                }
                for e in k.grid.iter_mut().chain(k.threads.as_mut()).chain(k.attrs.iter_mut().map(|a| &mut a.value)) {
                    expr(e, diags);
                }
                stmts(&mut k.body, 0, diags);
            }
            Item::Operator(o) => {
                for p in &mut o.params {
                    for e in p.shape.iter_mut().flatten() {
                        expr(e, diags);
                    }
                }
                for st in &mut o.body {
                    if let OpStmt::Buffer(b) = st {
                        for e in b.shape.iter_mut().chain(b.init.as_mut()) {
                            expr(e, diags);
                        }
                    }
                }
            }
            Item::Import(_) | Item::Instance(_) | Item::Error(_) => {}
        }
    }
}

/// Checks statements inside `level` loops. Recursion is bounded by [`MAX_LOOP_DEPTH`]: a loop
/// nested deeper is replaced before its body is visited.
fn stmts(body: &mut [Stmt], level: usize, diags: &mut Diagnostics) {
    for s in body {
        match s {
            Stmt::Let { ann, value, .. } => {
                for e in ann.iter_mut().flat_map(|a| a.shape.iter_mut().flatten()) {
                    expr(e, diags);
                }
                expr(value, diags);
            }
            Stmt::Assign { index, value, .. } => {
                indices(index, diags);
                expr(value, diags);
            }
            Stmt::Store { index, value, mask, .. } => {
                indices(index, diags);
                expr(value, diags);
                if let Some(m) = mask {
                    expr(m, diags);
                }
            }
            Stmt::For { lo, hi, body, span, .. } => {
                if level + 1 > MAX_LOOP_DEPTH {
                    let span = *span;
                    diags.push(
                        Diagnostic::error(Code::TooDeep, format!("loops nested more than {MAX_LOOP_DEPTH} deep"), span, "nested too deeply")
                            .with_note("use fewer nested loops"),
                    );
                    *s = Stmt::Error(span);
                    continue;
                }
                expr(lo, diags);
                expr(hi, diags);
                stmts(body, level + 1, diags);
            }
            Stmt::Error(_) => {}
        }
    }
}

fn indices(index: &mut [IndexExpr], diags: &mut Diagnostics) {
    for i in index.iter_mut() {
        match i {
            IndexExpr::Point(e) => expr(e, diags),
            IndexExpr::Range { start, len, .. } => {
                expr(start, diags);
                expr(len, diags);
            }
            IndexExpr::Full(_) => {}
        }
    }
}

/// Replaces `e` by an error node if it is deeper than [`MAX_EXPR_DEPTH`].
fn expr(e: &mut Expr, diags: &mut Diagnostics) {
    let depth = expr_depth(e);
    if depth > MAX_EXPR_DEPTH {
        diags.push(
            Diagnostic::error(Code::TooDeep, format!("expression nested too deeply: {depth} levels, the limit is {MAX_EXPR_DEPTH}"), e.span, "nested too deeply")
                .with_note("split it into `let` bindings"),
        );
        e.kind = ExprKind::Error;
    }
}

/// Height of an expression tree (a leaf is 1), with an explicit stack.
fn expr_depth(root: &Expr) -> usize {
    let mut max = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        stack.extend(e.children().into_iter().map(|c| (c, d + 1)));
    }
    max
}
