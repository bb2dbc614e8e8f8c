//! Reader for the text form of the IR: exactly what [`super::write`] prints, back into a
//! [`Module`].
//!
//! Entity numbers are kept: instruction `i7` becomes `Inst` 7, value `v3` becomes `Value` 3, so
//! printing a read kernel gives back the text it was read from. Numbers the text skips (the
//! printer shows only instructions reachable from the body) are filled with unreachable
//! placeholders: a result-less `const 0` instruction and an `i32` value. Parameters and
//! variables are printed in full, so they must be numbered `p0, p1, ...` and `var0, var1, ...`
//! in order. Blocks are not printed; loop bodies get new blocks in program order.
//!
//! Comments start with `;` and run to the end of the line (file tests keep directives there).
//! Names (kernel, parameters, variables, sizes) are identifier-like: letters, digits, `_`, `%`,
//! `$` and inner dots. The reader checks syntax and references (every used value is defined
//! somewhere, every variable, parameter and size exists); types and scopes are the validator's
//! business ([`super::validate`]), so IR that breaks its rules can be written down and tested.
//! Any input gives a module or a [`ReadError`], never a panic.

use std::collections::BTreeMap;
use std::str::FromStr;

use cranelift_entity::packed_option::ReservedValue;

use super::*;

/// A syntax or reference error in IR text, at a 1-based line and column.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ReadError {
    /// Line (1-based).
    pub line: usize,
    /// Column (1-based, in bytes).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Entity numbers above this are rejected (they would make the reader allocate placeholders
/// for every number below).
pub const MAX_ENTITY: u32 = 1 << 20;

/// Loops and size expressions nested deeper than this are rejected.
const MAX_DEPTH: usize = 256;

/// Reads a module: zero or more kernels.
///
/// # Errors
/// The first syntax or reference error.
pub fn read_module(text: &str) -> Result<Module, ReadError> {
    let lines = lex(text)?;
    let mut m = Module::default();
    let mut n = 0;
    while n < lines.len() {
        m.kernels.push(KernelReader::read(&lines, &mut n, text)?);
    }
    Ok(m)
}

/// Reads a text that holds exactly one kernel.
///
/// # Errors
/// As [`read_module`], and when the text holds no kernel or more than one.
pub fn read_kernel(text: &str) -> Result<Kernel, ReadError> {
    let mut m = read_module(text)?;
    match m.kernels.len() {
        1 => Ok(m.kernels.remove(0)),
        n => Err(ReadError { line: 1, column: 1, message: format!("expected one kernel, found {n}") }),
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer: one token list per non-empty line.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'a> {
    /// A name, keyword, opcode or entity (`v3`, `cmp.lt`, `var1.T`).
    Word(&'a str),
    /// A number, possibly negative (`-3`, `0.5`, `1e-7`).
    Num(&'a str),
    /// Punctuation.
    Punct(&'static str),
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    col: usize,
}

struct Line<'a> {
    no: usize,
    toks: Vec<Token<'a>>,
    end: usize,
}

const PUNCT: [&str; 18] = ["..", "+=", "-=", "(", ")", "[", "]", "{", "}", ",", ":", "=", "@", "+", "-", "*", "/", "%"];

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'%' | b'$')
}

fn lex(text: &str) -> Result<Vec<Line<'_>>, ReadError> {
    let mut lines = vec![];
    for (n, raw) in text.lines().enumerate() {
        let code = raw.split(';').next().unwrap_or("");
        let b = code.as_bytes();
        let at = |i: usize| b.get(i).copied().unwrap_or(0);
        let mut toks = vec![];
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            let start = i;
            let tok = if c.is_ascii_whitespace() {
                i += 1;
                continue;
            } else if c.is_ascii_digit() || (c == b'-' && at(i + 1).is_ascii_digit()) {
                i += 1;
                while at(i).is_ascii_digit() || (at(i) == b'.' && at(i + 1).is_ascii_digit()) || matches!(at(i), b'e' | b'E') {
                    if matches!(at(i), b'e' | b'E') && matches!(at(i + 1), b'-' | b'+') {
                        i += 1;
                    }
                    i += 1;
                }
                Tok::Num(&code[start..i])
            } else if is_word_byte(c) && (c != b'%' || is_word_byte(at(i + 1))) {
                while is_word_byte(at(i)) || (at(i) == b'.' && (at(i + 1).is_ascii_alphabetic() || at(i + 1) == b'_')) {
                    i += 1;
                }
                Tok::Word(&code[start..i])
            } else if let Some(p) = PUNCT.iter().find(|p| code[i..].starts_with(**p)) {
                i += p.len();
                Tok::Punct(p)
            } else {
                let ch = code[i..].chars().next().unwrap_or('?');
                return Err(ReadError { line: n + 1, column: i + 1, message: format!("unexpected character `{ch}`") });
            };
            toks.push(Token { tok, col: start + 1 });
        }
        if !toks.is_empty() {
            lines.push(Line { no: n + 1, toks, end: code.trim_end().len() + 1 });
        }
    }
    Ok(lines)
}

// ---------------------------------------------------------------------------------------------
// Cursor over one line's tokens.

struct Cur<'a, 'l> {
    line: &'l Line<'a>,
    pos: usize,
}

fn describe(t: Option<Tok<'_>>) -> String {
    match t {
        Some(Tok::Word(s) | Tok::Num(s)) => format!("`{s}`"),
        Some(Tok::Punct(p)) => format!("`{p}`"),
        None => "end of line".into(),
    }
}

impl<'a> Cur<'a, '_> {
    fn col(&self) -> usize {
        self.line.toks.get(self.pos).map_or(self.line.end, |t| t.col)
    }
    fn error_at<T>(&self, col: usize, message: String) -> Result<T, ReadError> {
        Err(ReadError { line: self.line.no, column: col, message })
    }
    fn unexpected<T>(&self, what: &str) -> Result<T, ReadError> {
        self.error_at(self.col(), format!("expected {what}, found {}", describe(self.peek())))
    }
    fn peek(&self) -> Option<Tok<'a>> {
        self.line.toks.get(self.pos).map(|t| t.tok)
    }
    fn peek_at(&self, ahead: usize) -> Option<Tok<'a>> {
        self.line.toks.get(self.pos + ahead).map(|t| t.tok)
    }
    fn eat(&mut self, p: &str) -> bool {
        let hit = matches!(self.peek(), Some(Tok::Punct(q)) if q == p);
        self.pos += usize::from(hit);
        hit
    }
    fn expect(&mut self, p: &str) -> Result<(), ReadError> {
        if self.eat(p) { Ok(()) } else { self.unexpected(&format!("`{p}`")) }
    }
    fn word(&mut self, what: &str) -> Result<&'a str, ReadError> {
        let Some(Tok::Word(w)) = self.peek() else { return self.unexpected(what) };
        self.pos += 1;
        Ok(w)
    }
    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = self.peek() == Some(Tok::Word(kw));
        self.pos += usize::from(hit);
        hit
    }
    fn keyword(&mut self, kw: &str) -> Result<(), ReadError> {
        if self.eat_keyword(kw) { Ok(()) } else { self.unexpected(&format!("`{kw}`")) }
    }
    fn num<T: FromStr>(&mut self, what: &str) -> Result<T, ReadError> {
        let col = self.col();
        let Some(Tok::Num(s)) = self.peek() else { return self.unexpected(what) };
        self.pos += 1;
        s.parse().or_else(|_| self.error_at(col, format!("`{s}` is not a valid {what}")))
    }
    /// An entity written `<prefix><number>` (`v12`), with an optional `.T` suffix when
    /// `transposable`. Returns the number, the column and whether it was transposed.
    fn entity_t(&mut self, prefix: &str, what: &str, transposable: bool) -> Result<(u32, usize, bool), ReadError> {
        let col = self.col();
        let Some(Tok::Word(w)) = self.peek() else { return self.unexpected(what) };
        let (w, t) = match w.strip_suffix(".T") {
            Some(base) if transposable => (base, true),
            _ => (w, false),
        };
        let digits = w.strip_prefix(prefix).filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && (d.len() == 1 || !d.starts_with('0')));
        let Some(n) = digits.and_then(|d| d.parse::<u32>().ok()) else { return self.unexpected(what) };
        if n > MAX_ENTITY {
            return self.error_at(col, format!("{what} number {n} is too large (at most {MAX_ENTITY})"));
        }
        self.pos += 1;
        Ok((n, col, t))
    }
    fn entity(&mut self, prefix: &str, what: &str) -> Result<(u32, usize), ReadError> {
        self.entity_t(prefix, what, false).map(|(n, c, _)| (n, c))
    }
    fn done(&self) -> Result<(), ReadError> {
        match self.peek() {
            None => Ok(()),
            t => self.error_at(self.col(), format!("unexpected {} at end of line", describe(t))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Names of operators: the printer's spellings.

const UNOPS: [(&str, UnOp); 7] = [("neg", UnOp::Neg), ("exp2", UnOp::Exp2), ("log2", UnOp::Log2), ("exp", UnOp::Exp), ("abs", UnOp::Abs), ("sqrt", UnOp::Sqrt), ("not", UnOp::Not)];
const BINOPS: [(&str, BinOp); 12] = [
    ("add", BinOp::Add),
    ("sub", BinOp::Sub),
    ("mul", BinOp::Mul),
    ("div", BinOp::Div),
    ("rem", BinOp::Rem),
    ("min", BinOp::Min),
    ("max", BinOp::Max),
    ("fmin", BinOp::FMin),
    ("fmax", BinOp::FMax),
    ("cdiv", BinOp::Cdiv),
    ("and", BinOp::And),
    ("or", BinOp::Or),
];
const CMPOPS: [(&str, CmpOp); 6] = [("eq", CmpOp::Eq), ("ne", CmpOp::Ne), ("lt", CmpOp::Lt), ("le", CmpOp::Le), ("gt", CmpOp::Gt), ("ge", CmpOp::Ge)];
const REDUCEOPS: [(&str, ReduceOp); 3] = [("sum", ReduceOp::Sum), ("max", ReduceOp::Max), ("min", ReduceOp::Min)];
const AXES: [(&str, Axis); 2] = [("row", Axis::Row), ("col", Axis::Col)];
const SPACES: [(&str, Space); 3] = [("reg", Space::Reg), ("smem", Space::Smem), ("tmem", Space::Tmem)];
const SIZE_FUNCS: [(&str, SizeOp); 3] = [("cdiv", SizeOp::Cdiv), ("min", SizeOp::Min), ("max", SizeOp::Max)];
const SIZE_INFIX: [(&str, SizeOp); 5] = [("+", SizeOp::Add), ("-", SizeOp::Sub), ("*", SizeOp::Mul), ("/", SizeOp::Div), ("%", SizeOp::Rem)];

fn lookup<T: Copy>(table: &[(&str, T)], name: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

// ---------------------------------------------------------------------------------------------
// Kernel reader.

struct KernelReader {
    k: Kernel,
    insts: BTreeMap<u32, InstData>,
    values: BTreeMap<u32, ValueData>,
    /// Every value use: (number, line, column).
    uses: Vec<(u32, usize, usize)>,
}

impl KernelReader {
    fn read(lines: &[Line<'_>], n: &mut usize, text: &str) -> Result<Kernel, ReadError> {
        let eof = || ReadError { line: text.lines().count().max(1), column: text.lines().last().map_or(0, str::len) + 1, message: "unexpected end of input: missing `}`".into() };
        let next = |n: &mut usize| -> Result<Cur<'_, '_>, ReadError> {
            *n += 1;
            lines.get(*n - 1).map(|line| Cur { line, pos: 0 }).ok_or_else(eof)
        };
        let mut c = next(n)?;
        c.keyword("kernel")?;
        let name = c.word("a kernel name")?;
        let mut r = KernelReader { k: Kernel::new(name, Span::default()), insts: BTreeMap::new(), values: BTreeMap::new(), uses: vec![] };
        r.params(&mut c)?;
        c.done()?;
        let mut c = next(n)?;
        c.keyword("sizes")?;
        c.expect("[")?;
        // Sizes are numbered in order of first use in the parameter shapes, which declared them
        // already; the list must agree, and may add sizes the shapes do not use.
        let col = c.col();
        let listed = list(&mut c, "]", |c| c.word("a size name").map(String::from))?;
        for (i, name) in listed.iter().enumerate() {
            let at = r.k.declare_size(name).as_u32() as usize;
            if at != i {
                return c.error_at(col, format!("size `{name}` is listed at position {i} but the parameter shapes use it at position {at}"));
            }
        }
        if listed.len() != r.k.sizes.len() {
            let names: Vec<&str> = r.k.sizes.values().map(String::as_str).collect();
            return c.error_at(col, format!("the parameter shapes use sizes [{}], but `sizes` lists [{}]", names.join(", "), listed.join(", ")));
        }
        c.done()?;
        let mut c = next(n)?;
        c.keyword("grid")?;
        c.expect("(")?;
        let mut axis = |sep: &str| -> Result<SizeExpr, ReadError> {
            let e = size_expr(&mut c, 0, &mut r.k.sizes)?;
            c.expect(sep)?;
            Ok(e)
        };
        r.k.grid = [axis(",")?, axis(",")?, axis(")")?];
        c.keyword("threads")?;
        r.k.threads = c.num("thread count")?;
        while c.eat_keyword("ctas_per_sm") {
            let col = c.col();
            let name = c.word("a target (sm_90a, sm_100a)")?;
            let Ok(info) = crate::target::lookup(name) else { return c.error_at(col, format!("unknown target `{name}`")) };
            r.k.ctas_per_sm.push((info.target, c.num("CTAs per SM")?, Span::default()));
        }
        c.done()?;
        loop {
            let mut c = next(n)?;
            if c.eat("{") {
                break c.done()?;
            }
            let (v, col) = c.entity("var", "a variable `varN` or `{`")?;
            if v as usize != r.k.vars.len() {
                return c.error_at(col, format!("expected var{}: variables are numbered in order", r.k.vars.len()));
            }
            let name = c.word("a variable name")?.to_string();
            c.expect(":")?;
            let col = c.col();
            let sp = c.word("a memory space")?;
            let Some(space) = lookup(&SPACES, sp) else { return c.error_at(col, format!("unknown memory space `{sp}`")) };
            let ty = ty(&mut c)?;
            c.done()?;
            r.k.vars.push(VarData { name, space, ty, span: Span::default() });
        }
        // The body: an explicit stack of open blocks instead of recursion.
        let mut stack = vec![r.k.body];
        while let Some(&block) = stack.last() {
            let mut c = next(n)?;
            if c.eat("}") {
                c.done()?;
                stack.pop();
                continue;
            }
            let (i, col) = c.entity("i", "an instruction `iN:` or `}`")?;
            if r.insts.contains_key(&i) {
                return c.error_at(col, format!("instruction i{i} is defined twice"));
            }
            c.expect(":")?;
            let inst = Inst::from_u32(i);
            let data = if c.eat_keyword("for") {
                if stack.len() > MAX_DEPTH {
                    return c.error_at(col, format!("loops nested deeper than {MAX_DEPTH}"));
                }
                let iv = if c.peek() == Some(Tok::Word("in")) { None } else { {
                    let (v, col) = c.entity("v", "a value `vN` or `in`")?;
                    Some(r.define(v, col, &c, Type::Scalar(Elem::I32), ValueDef::LoopIndex(inst))?)
                } };
                c.keyword("in")?;
                let reverse = c.eat_keyword("reverse");
                let lo = r.value(&mut c)?;
                c.expect("..")?;
                let hi = r.value(&mut c)?;
                c.expect("{")?;
                let body = r.k.blocks.push(BlockData::default());
                stack.push(body);
                InstData { op: Op::For { lo, hi, reverse, body }, result: iv }
            } else {
                let result = if c.peek_at(1) == Some(Tok::Punct("=")) { Some(c.entity("v", "a result value `vN`")?) } else { None };
                c.pos += usize::from(result.is_some()); // the `=`
                let op = r.op(&mut c)?;
                let result = match result {
                    Some((v, col)) => {
                        c.expect(":")?;
                        let t = ty(&mut c)?;
                        Some(r.define(v, col, &c, t, ValueDef::Result(inst))?)
                    }
                    None => None,
                };
                InstData { op, result }
            };
            c.done()?;
            r.insts.insert(i, data);
            r.k.blocks[block].insts.push(inst);
        }
        r.finish()
    }

    fn params(&mut self, c: &mut Cur<'_, '_>) -> Result<(), ReadError> {
        c.expect("(")?;
        let sizes = &mut self.k.sizes;
        let params = list(c, ")", |c| {
            let (p, col) = c.entity("p", "a parameter `pN`")?;
            let name = c.word("a parameter name")?.to_string();
            c.expect(":")?;
            let output = c.peek() == Some(Tok::Word("out")) && matches!(c.peek_at(1), Some(Tok::Word(_)));
            c.pos += usize::from(output);
            let e = elem(c)?;
            let kind = if c.eat("[") {
                ParamKind::Tensor { elem: e, shape: list(c, "]", |c| size_expr(c, 0, sizes))?, output }
            } else if output {
                return c.unexpected("`[` after an output tensor's element type");
            } else {
                ParamKind::Scalar(e)
            };
            let mut edge = Edge::Error;
            if matches!(kind, ParamKind::Tensor { .. }) && c.peek() == Some(Tok::Word("edge")) {
                c.pos += 1;
                c.expect("(")?;
                if c.word("`zeros`")? != "zeros" {
                    return c.unexpected("`zeros` (the one edge fill)");
                }
                c.expect(")")?;
                edge = Edge::Zeros;
            }
            Ok((p, col, ParamData { name, kind, span: Span::default(), edge }))
        })?;
        for (p, col, d) in params {
            if p as usize != self.k.params.len() {
                return c.error_at(col, format!("expected p{}: parameters are numbered in order", self.k.params.len()));
            }
            self.k.params.push(d);
        }
        Ok(())
    }

    /// A value use.
    fn value(&mut self, c: &mut Cur<'_, '_>) -> Result<Value, ReadError> {
        let (v, col) = c.entity("v", "a value `vN`")?;
        self.uses.push((v, c.line.no, col));
        Ok(Value::from_u32(v))
    }

    fn define(&mut self, v: u32, col: usize, c: &Cur<'_, '_>, ty: Type, def: ValueDef) -> Result<Value, ReadError> {
        if self.values.insert(v, ValueData { ty, def }).is_some() {
            return c.error_at(col, format!("value v{v} is defined twice"));
        }
        Ok(Value::from_u32(v))
    }

    fn param(&self, c: &mut Cur<'_, '_>) -> Result<Param, ReadError> {
        let (p, col) = c.entity("p", "a parameter `pN`")?;
        if p as usize >= self.k.params.len() {
            return c.error_at(col, format!("unknown parameter p{p}"));
        }
        Ok(Param::from_u32(p))
    }

    fn var(&self, c: &mut Cur<'_, '_>) -> Result<MmaOperand, ReadError> {
        let (v, col, transposed) = c.entity_t("var", "a variable `varN`", true)?;
        if v as usize >= self.k.vars.len() {
            return c.error_at(col, format!("unknown variable var{v}"));
        }
        Ok(MmaOperand { var: Var::from_u32(v), transposed })
    }

    fn plain_var(&self, c: &mut Cur<'_, '_>) -> Result<Var, ReadError> {
        let col = c.col();
        match self.var(c)? {
            MmaOperand { var, transposed: false } => Ok(var),
            _ => c.error_at(col, "`.T` is allowed on MMA operands only".into()),
        }
    }

    fn index(&mut self, c: &mut Cur<'_, '_>) -> Result<Vec<Index>, ReadError> {
        c.expect("[")?;
        list(c, "]", |c| {
            let start = self.value(c)?;
            Ok(if c.eat("..") {
                c.expect("+")?;
                Index::Range { start, len: c.num("range length")? }
            } else {
                Index::Point(start)
            })
        })
    }

    fn op(&mut self, c: &mut Cur<'_, '_>) -> Result<Op, ReadError> {
        let (line, col) = (c.line.no, c.col());
        let name = c.word("an operation")?;
        let (head, tail) = name.split_once('.').unwrap_or((name, ""));
        let bad = || ReadError { line, column: col, message: format!("unknown operation `{name}`") };
        Ok(match (head, tail) {
            ("const", "") => {
                // Integers print as digits; floats print with `.`, an exponent, `inf` or `NaN`.
                let col = c.col();
                let sign = if c.eat("-") { "-" } else { "" };
                let Some(Tok::Num(s) | Tok::Word(s)) = c.peek() else { return c.unexpected("a number") };
                c.pos += 1;
                let lit = format!("{sign}{s}");
                let op = if lit.contains(['.', 'e', 'E', 'i', 'N']) { lit.parse().ok().map(Op::ConstFloat) } else { lit.parse().ok().map(Op::ConstInt) };
                let Some(op) = op else { return c.error_at(col, format!("`{lit}` is not a valid constant")) };
                op
            }
            ("program_id", "") => Op::ProgramId(c.num("grid axis")?),
            ("size", "") => {
                let col = c.col();
                let s = c.word("a size name")?;
                let Some(i) = self.k.size_named(s) else { return c.error_at(col, format!("unknown size `{s}`")) };
                Op::Size(i)
            }
            ("param", "") => Op::ScalarParam(self.param(c)?),
            ("cmp", t) => Op::Cmp(lookup(&CMPOPS, t).ok_or_else(bad)?, self.value(c)?, self.after(c, ",")?),
            ("select", "") => Op::Select(self.value(c)?, self.after(c, ",")?, self.after(c, ",")?),
            ("cast", "") => Op::Cast(self.value(c)?, c.keyword("to").and_then(|()| elem(c))?),
            ("splat", "") => Op::Splat(self.value(c)?),
            ("iota", t) => Op::Iota(lookup(&AXES, t).ok_or_else(bad)?),
            ("mask", "strict_lower") => Op::Mask(TriMask::StrictLower),
            ("mask", "lower") => Op::Mask(TriMask::Lower),
            ("reduce", t) => {
                let (r, ax) = t.split_once('.').unwrap_or((t, ""));
                Op::Reduce(lookup(&REDUCEOPS, r).ok_or_else(bad)?, lookup(&AXES, ax).ok_or_else(bad)?, self.value(c)?)
            }
            ("transpose", "") => Op::Transpose(self.value(c)?),
            (name @ ("slice" | "gather"), "") => {
                let src = self.value(c)?;
                c.expect("[")?;
                let row = self.value(c)?;
                let col = self.after(c, ",")?;
                c.expect("]")?;
                if name == "slice" {
                    Op::Slice { src, row, col }
                } else {
                    Op::Gather { src, row, col }
                }
            }
            ("insert", "") => {
                let base = self.value(c)?;
                c.expect("[")?;
                let row = self.value(c)?;
                c.expect("..")?;
                c.expect("+")?;
                let rows = c.num("block rows")?;
                let col = self.after(c, ",")?;
                c.expect("..")?;
                c.expect("+")?;
                let cols = c.num("block columns")?;
                c.expect("]")?;
                Op::Insert { base, value: self.after(c, "=")?, row, col, rows, cols }
            }
            ("scan", "fwd") => Op::Scan { src: self.value(c)?, reverse: false },
            ("scan", "rev") => Op::Scan { src: self.value(c)?, reverse: true },
            ("load", "") => Op::Load { src: self.param(c)?, index: self.index(c)? },
            ("store", "") => {
                let (dst, index, value) = (self.param(c)?, self.index(c)?, self.after(c, "=")?);
                let mask = if c.eat_keyword("where") { Some(self.value(c)?) } else { None };
                Op::Store { dst, index, value, mask }
            }
            ("read", "") => Op::ReadVar(self.plain_var(c)?),
            ("write", "") => Op::WriteVar(self.plain_var(c)?, self.after(c, "=")?),
            ("mma", "") => {
                let dst = self.plain_var(c)?;
                let (accumulate, negate) = match (c.eat("+="), c.eat("-=")) {
                    (true, _) => (true, false),
                    (_, true) => (true, true),
                    _ => (false, c.expect("=").map(|()| c.eat("-"))?),
                };
                let a = self.var(c)?;
                c.expect("@")?;
                Op::Mma { dst, a, b: self.var(c)?, accumulate, negate }
            }
            ("tmem", "alloc") => Op::TmemAlloc { columns: c.num("column count")? },
            ("tmem", "relinquish") => Op::TmemRelinquish,
            ("tmem", "dealloc") => Op::TmemDealloc { columns: c.num("column count")? },
            (h, "") => match (lookup(&UNOPS, h), lookup(&BINOPS, h)) {
                (Some(u), _) => Op::Unary(u, self.value(c)?),
                (_, Some(b)) => Op::Binary(b, self.value(c)?, self.after(c, ",")?),
                _ => return Err(bad()),
            },
            _ => return Err(bad()),
        })
    }

    /// `p` followed by a value use.
    fn after(&mut self, c: &mut Cur<'_, '_>, p: &str) -> Result<Value, ReadError> {
        c.expect(p)?;
        self.value(c)
    }

    /// Checks references and builds the entity maps, filling skipped numbers.
    fn finish(mut self) -> Result<Kernel, ReadError> {
        for &(v, line, column) in &self.uses {
            if !self.values.contains_key(&v) {
                return Err(ReadError { line, column, message: format!("value v{v} is used but never defined") });
            }
        }
        let n_insts = self.insts.keys().next_back().map_or(0, |m| m + 1);
        for i in 0..n_insts {
            self.k.insts.push(self.insts.remove(&i).unwrap_or(InstData { op: Op::ConstInt(0), result: None }));
        }
        let n_values = self.values.keys().next_back().map_or(0, |m| m + 1);
        for v in 0..n_values {
            let placeholder = ValueData { ty: Type::Scalar(Elem::I32), def: ValueDef::Result(Inst::reserved_value()) };
            self.k.values.push(self.values.remove(&v).unwrap_or(placeholder));
        }
        Ok(self.k)
    }
}

/// Items separated by `,` up to the closing `close` (which is consumed); may be empty.
fn list<'a, T>(c: &mut Cur<'a, '_>, close: &str, mut item: impl FnMut(&mut Cur<'a, '_>) -> Result<T, ReadError>) -> Result<Vec<T>, ReadError> {
    let mut out = vec![];
    while !c.eat(close) {
        if !out.is_empty() {
            c.expect(",")?;
        }
        out.push(item(c)?);
    }
    Ok(out)
}

fn elem(c: &mut Cur<'_, '_>) -> Result<Elem, ReadError> {
    let col = c.col();
    let w = c.word("an element type")?;
    Elem::from_name(w).map_or_else(|| c.error_at(col, format!("unknown element type `{w}`")), Ok)
}

/// `elem` or `elem[rows, cols]`.
fn ty(c: &mut Cur<'_, '_>) -> Result<Type, ReadError> {
    let e = elem(c)?;
    if !c.eat("[") {
        return Ok(Type::Scalar(e));
    }
    let dims = list(c, "]", |c| c.num::<u32>("tile dimension"))?;
    match dims[..] {
        [rows, cols] => Ok(Type::tile(e, rows, cols)),
        _ => c.error_at(c.col(), format!("a tile type has two dimensions, not {}", dims.len())),
    }
}

/// A size expression; a name that is not a function is a size, declared in `sizes` if new.
fn size_expr(c: &mut Cur<'_, '_>, depth: usize, sizes: &mut PrimaryMap<SizeVar, String>) -> Result<SizeExpr, ReadError> {
    if depth > MAX_DEPTH {
        return c.error_at(c.col(), format!("size expression nested deeper than {MAX_DEPTH}"));
    }
    match c.peek() {
        Some(Tok::Num(_)) => Ok(SizeExpr::Const(c.num("integer")?)),
        Some(Tok::Word(w)) => {
            c.pos += 1;
            match lookup(&SIZE_FUNCS, w) {
                Some(op) if c.eat("(") => match &list(c, ")", |c| size_expr(c, depth + 1, sizes))?[..] {
                    [a, b] => Ok(SizeExpr::Bin(op, Box::new(a.clone()), Box::new(b.clone()))),
                    args => c.error_at(c.col(), format!("`{w}` takes two arguments, not {}", args.len())),
                },
                _ => Ok(SizeExpr::Sym(declare_size(sizes, w))),
            }
        }
        Some(Tok::Punct("(")) => {
            c.pos += 1;
            let a = size_expr(c, depth + 1, sizes)?;
            let op = match c.peek() {
                Some(Tok::Punct(p)) => lookup(&SIZE_INFIX, p),
                _ => None,
            };
            let Some(op) = op else { return c.unexpected("an operator (`+ - * / %`)") };
            c.pos += 1;
            let b = size_expr(c, depth + 1, sizes)?;
            c.expect(")")?;
            Ok(SizeExpr::Bin(op, Box::new(a), Box::new(b)))
        }
        _ => c.unexpected("a size expression"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::write::write_kernel;
    use super::*;

    #[test]
    fn skipped_numbers_are_kept() {
        let text = "kernel k()\n  sizes []\n  grid (1, 1, 1) threads 128\n{\n  i5: v9 = const 1 : i32 ; a comment\n  i2: v3 = add v9, v9 : i32\n}\n";
        let k = read_kernel(text).unwrap();
        assert_eq!((k.insts.len(), k.values.len()), (6, 10));
        assert_eq!(write_kernel(&k), text.replace(" ; a comment", ""));
        assert!(validate::validate(&k).is_ok());
    }

    #[test]
    fn errors_point_at_the_line() {
        let head = "kernel k(p0 a: f32[M, 4])\n  sizes [M]\n  grid (1, 1, 1) threads 128\n  var0 t: smem f32[4, 4]\n{\n";
        let cases: &[(&str, usize, &str)] = &[
            ("  i0: v0 = const 1 : i32\n  i1: v1 = frob v0 : i32\n}\n", 7, "unknown operation `frob`"),
            ("  i0: v0 = const 1 : i32\n  i0: v1 = const 2 : i32\n}\n", 7, "i0 is defined twice"),
            ("  i0: v0 = const 1 : i32\n  i1: v0 = const 2 : i32\n}\n", 7, "v0 is defined twice"),
            ("  i0: v0 = const 1 : i32\n\n  i1: v1 = add v0, v7 : i32\n}\n", 8, "v7 is used but never defined"),
            ("  i0: v0 = read var1 : f32[4, 4]\n}\n", 6, "unknown variable var1"),
            ("  i0: v0 = load p1[] : f32\n}\n", 6, "unknown parameter p1"),
            ("  i0: v0 = size N : i32\n}\n", 6, "unknown size `N`"),
            ("  i0: v0 = const 1 : f33\n}\n", 6, "unknown element type `f33`"),
            ("  i0: v0 = const 1 : i32 junk\n}\n", 6, "unexpected `junk` at end of line"),
            ("  i0: v0 = const 1 : i32 #\n}\n", 6, "unexpected character `#`"),
            ("  i0: v0 = const 1 : i32\n  i1: for v1 in v0..v0 {\n}\n", 8, "missing `}`"),
            ("  i0: mma var0.T = var0 @ var0\n}\n", 6, "`.T` is allowed on MMA operands only"),
        ];
        for (body, line, msg) in cases {
            let e = read_module(&format!("{head}{body}")).expect_err(body);
            assert_eq!(e.line, *line, "{body}: {e}");
            assert!(e.message.contains(msg), "{body}: {e}");
        }
        let e = read_module("kernel k(p1 a: f32)\n").unwrap_err();
        assert_eq!((e.line, e.column, e.message.contains("expected p0")), (1, 10, true), "{e}");
        let e = read_module("kernel k()\n  sizes []\n  grid (1, 1) threads 128\n").unwrap_err();
        assert_eq!((e.line, e.column), (3, 13), "{e}");
        let e = read_module(&format!("{head}  i{}: tmem.relinquish\n}}\n", MAX_ENTITY + 1)).unwrap_err();
        assert!(e.message.contains("too large"), "{e}");
        assert!(read_kernel("").is_err());
    }
}
