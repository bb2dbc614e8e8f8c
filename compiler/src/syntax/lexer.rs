//! The lexer (logos). Yields `(start, Token, end)` triples for the lalrpop parser; characters
//! that start no token become [`LexError`]s, which the parser reports and skips.

use std::fmt;

use logos::Logos;

/// A lexical error: the byte range of a character sequence that starts no token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LexError;

/// Tokens of the tile language.
#[derive(Logos, Clone, Debug, PartialEq)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip r"//[^\n]*")]
#[logos(error = LexError)]
pub enum Token {
    /// `const`
    #[token("const")]
    Const,
    /// `kernel`
    #[token("kernel")]
    Kernel,
    /// `operator`: a multi-kernel operator.
    #[token("operator")]
    Operator,
    /// `contract`: what an operator is verified against.
    #[token("contract")]
    Contract,
    /// `import`: kernels of another file.
    #[token("import")]
    Import,
    /// A string literal (`"k1_reverse_scan.tile"`): the text between the quotes, no escapes.
    #[regex(r#""[^"\n]*""#, |lex| { let s = lex.slice(); s[1..s.len() - 1].to_string() })]
    Str(String),
    /// `let`
    #[token("let")]
    Let,
    /// `mut`
    #[token("mut")]
    Mut,
    /// `for`
    #[token("for")]
    For,
    /// `if` — not part of the language; a keyword so that the parser can say so once and
    /// skip the whole construct (see the grammar).
    #[token("if")]
    If,
    /// `else` (only after `if`, to skip it).
    #[token("else")]
    Else,
    /// `while` — not part of the language (as `if`).
    #[token("while")]
    While,
    /// `in`
    #[token("in")]
    In,
    /// `rev`
    #[token("rev")]
    Rev,
    /// `where` (a masked store)
    #[token("where")]
    Where,
    /// `load`
    #[token("load")]
    Load,
    /// `store`
    #[token("store")]
    Store,
    /// `grid`
    #[token("grid")]
    Grid,
    /// `threads`
    #[token("threads")]
    Threads,
    /// `out`
    #[token("out")]
    Out,
    /// `reg`
    #[token("reg")]
    Reg,
    /// `smem`
    #[token("smem")]
    Smem,
    /// `tmem`
    #[token("tmem")]
    Tmem,
    /// An identifier.
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice().to_string())]
    Ident(String),
    /// A decimal integer literal (kept as text; range-checked by the parser actions).
    #[regex(r"[0-9]+", |lex| lex.slice().to_string(), priority = 3)]
    Int(String),
    /// A float literal (`1.0`, `0.5e-3`, `1e6`, and `inf`: positive infinity).
    #[regex(r"[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+", |lex| lex.slice().to_string())]
    #[token("inf", |lex| lex.slice().to_string())]
    Float(String),
    /// `(`
    #[token("(")]
    LParen,
    /// `)`
    #[token(")")]
    RParen,
    /// `[`
    #[token("[")]
    LBracket,
    /// `]`
    #[token("]")]
    RBracket,
    /// `{`
    #[token("{")]
    LBrace,
    /// `}`
    #[token("}")]
    RBrace,
    /// `,`
    #[token(",")]
    Comma,
    /// `;`
    #[token(";")]
    Semi,
    /// `:`
    #[token(":")]
    Colon,
    /// `..`
    #[token("..")]
    DotDot,
    /// `.`
    #[token(".")]
    Dot,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`
    #[token("*")]
    Star,
    /// `/`
    #[token("/")]
    Slash,
    /// `%`
    #[token("%")]
    Percent,
    /// `@` (matrix multiply)
    #[token("@")]
    At,
    /// `=`
    #[token("=")]
    Eq,
    /// `+=`
    #[token("+=")]
    PlusEq,
    /// `-=`
    #[token("-=")]
    MinusEq,
    /// `==`
    #[token("==")]
    EqEq,
    /// `!=`
    #[token("!=")]
    Ne,
    /// `<`
    #[token("<")]
    Lt,
    /// `<=`
    #[token("<=")]
    Le,
    /// `>`
    #[token(">")]
    Gt,
    /// `>=`
    #[token(">=")]
    Ge,
    /// `&&`
    #[token("&&")]
    AndAnd,
    /// `||`
    #[token("||")]
    OrOr,
    /// `!`
    #[token("!")]
    Bang,
    /// A run of characters that is not part of any token (never produced by logos: [`lex`] makes
    /// it from a lexical error, already reported). The grammar reads it as a poisoned operand, so
    /// `max(a, é)` has two arguments and does not cascade into an arity error.
    Invalid,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "identifier `{s}`"),
            Token::Int(s) | Token::Float(s) => write!(f, "number `{s}`"),
            Token::Str(s) => write!(f, "string \"{s}\""),
            other => write!(f, "`{}`", token_text(other)),
        }
    }
}

/// The source spelling of a fixed token.
pub fn token_text(t: &Token) -> &'static str {
    match t {
        Token::Const => "const",
        Token::Kernel => "kernel",
        Token::Operator => "operator",
        Token::Import => "import",
        Token::Contract => "contract",
        Token::Str(_) => "string",
        Token::Let => "let",
        Token::Mut => "mut",
        Token::For => "for",
        Token::If => "if",
        Token::Else => "else",
        Token::While => "while",
        Token::In => "in",
        Token::Rev => "rev",
        Token::Where => "where",
        Token::Load => "load",
        Token::Store => "store",
        Token::Grid => "grid",
        Token::Threads => "threads",
        Token::Out => "out",
        Token::Reg => "reg",
        Token::Smem => "smem",
        Token::Tmem => "tmem",
        Token::Ident(_) => "identifier",
        Token::Int(_) | Token::Float(_) => "number",
        Token::LParen => "(",
        Token::RParen => ")",
        Token::LBracket => "[",
        Token::RBracket => "]",
        Token::LBrace => "{",
        Token::RBrace => "}",
        Token::Comma => ",",
        Token::Semi => ";",
        Token::Colon => ":",
        Token::DotDot => "..",
        Token::Dot => ".",
        Token::Plus => "+",
        Token::Minus => "-",
        Token::Star => "*",
        Token::Slash => "/",
        Token::Percent => "%",
        Token::At => "@",
        Token::Eq => "=",
        Token::PlusEq => "+=",
        Token::MinusEq => "-=",
        Token::EqEq => "==",
        Token::Ne => "!=",
        Token::Lt => "<",
        Token::Le => "<=",
        Token::Gt => ">",
        Token::Ge => ">=",
        Token::AndAnd => "&&",
        Token::OrOr => "||",
        Token::Bang => "!",
        Token::Invalid => "invalid character",
    }
}

/// Lexes `src` into `(start, token, end)` triples; invalid characters become errors at their span.
pub fn lex(src: &str) -> Vec<Result<(usize, Token, usize), (usize, usize)>> {
    Token::lexer(src)
        .spanned()
        .map(|(tok, span)| match tok {
            Ok(t) => Ok((span.start, t, span.end)),
            Err(LexError) => Err((span.start, span.end)),
        })
        .collect()
}
