"""Size expressions (docs/metadata.md, "Size expressions"), evaluated exactly as the kernels,
tilec-run's binder and the interpreter evaluate them (``tilec_abi::expr``):

    expr  := term (('+' | '-') term)*
    term  := unary (('*' | '/' | '%') unary)*
    unary := '-' unary | atom
    atom  := INTEGER | SIZE | FUNC '(' expr ',' expr ')' | '(' expr ')'      FUNC := cdiv | min | max

64-bit integers with overflow checks; ``/`` truncates toward zero (PTX ``div.s32``), ``%`` has the
sign of the dividend, ``cdiv(a, b) = (a + b - 1) / b`` with that division.
"""

from __future__ import annotations

import re

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
MAX_TEXT_BYTES = 4096
MAX_DEPTH = 64


class ExprError(ValueError):
    """A size expression that does not parse or cannot be evaluated."""


def _check(v: int, text: str) -> int:
    if not I64_MIN <= v <= I64_MAX:
        raise ExprError(f"size expression `{text}` overflows 64-bit integers")
    return v


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def apply(op: str, a: int, b: int, text: str = "") -> int:
    """One operation with the kernel's semantics (``tilec_abi::expr::apply``)."""
    if op in "/%c" and b == 0:
        raise ExprError(f"division by zero in size expression `{text}`")
    if op == "+":
        r = a + b
    elif op == "-":
        r = a - b
    elif op == "*":
        r = a * b
    elif op == "/":
        r = _tdiv(a, b)
    elif op == "%":
        r = a - _tdiv(a, b) * b
    elif op == "c":  # cdiv: (a + (b - 1)) / b, every step overflow-checked
        r = _tdiv(_check(a + _check(b - 1, text), text), b)
    elif op == "min":
        r = min(a, b)
    elif op == "max":
        r = max(a, b)
    else:
        raise ExprError(f"unknown operation {op}")
    return _check(r, text)


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SizeExpr:
    """A parsed size expression; ``eval(env)`` with sizes by name."""

    def __init__(self, text: str):
        if len(text.encode()) > MAX_TEXT_BYTES:
            raise ExprError(f"size expression longer than {MAX_TEXT_BYTES} bytes")
        self.text = text
        self._toks = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:  # trailing whitespace
                if text[pos:].strip() == "":
                    break
                raise ExprError(f"cannot parse size expression `{text}` at {pos}")
            num, ident, other = m.groups()
            if num is not None:
                self._toks.append(("int", int(num)))
            elif ident is not None:
                self._toks.append(("sym", ident))
            elif other is not None and other.strip():
                self._toks.append(("op", other))
            pos = m.end()
        self._i = 0
        self._depth = 0
        self.root = self._expr()
        if self._i != len(self._toks):
            raise ExprError(f"size expression `{text}`: unexpected trailing input")
        del self._toks

    # --- parser ---
    def _peek(self):
        return self._toks[self._i] if self._i < len(self._toks) else (None, None)

    def _eat(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self._i += 1
            return True
        return False

    def _nested(self, f):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ExprError(f"size expression `{self.text}` nests deeper than {MAX_DEPTH}")
        r = f()
        self._depth -= 1
        return r

    def _expr(self):
        node = self._term()
        while True:
            if self._eat("+"):
                node = ("+", node, self._term())
            elif self._eat("-"):
                node = ("-", node, self._term())
            else:
                return node

    def _term(self):
        node = self._unary()
        while True:
            for op in "*/%":
                if self._eat(op):
                    node = (op, node, self._unary())
                    break
            else:
                return node

    def _unary(self):
        if self._eat("-"):
            return ("neg", self._nested(self._unary))
        return self._atom()

    def _atom(self):
        kind, v = self._peek()
        if kind == "int":
            self._i += 1
            _check(v, self.text)
            return ("int", v)
        if kind == "sym":
            self._i += 1
            if self._eat("("):
                if v not in ("cdiv", "min", "max"):
                    raise ExprError(f"size expression `{self.text}`: unknown function `{v}`")
                a = self._nested(self._expr)
                if not self._eat(","):
                    raise ExprError(f"size expression `{self.text}`: `{v}` takes two arguments")
                b = self._nested(self._expr)
                if not self._eat(")"):
                    raise ExprError(f"size expression `{self.text}`: expected `)`")
                return ("c" if v == "cdiv" else v, a, b)
            return ("sym", v)
        if self._eat("("):
            node = self._nested(self._expr)
            if not self._eat(")"):
                raise ExprError(f"size expression `{self.text}`: expected `)`")
            return node
        raise ExprError(f"cannot parse size expression `{self.text}`")

    # --- queries ---
    def as_symbol(self):
        """The size name when the expression is a bare name, else None."""
        return self.root[1] if self.root[0] == "sym" else None

    def symbols(self) -> list:
        out = set()

        def walk(n):
            if n[0] == "sym":
                out.add(n[1])
            elif n[0] != "int":
                for c in n[1:]:
                    walk(c)

        walk(self.root)
        return sorted(out)

    def eval(self, env: dict) -> int:
        def ev(n):
            k = n[0]
            if k == "int":
                return n[1]
            if k == "sym":
                if n[1] not in env:
                    raise ExprError(f"size expression `{self.text}`: unknown size `{n[1]}`")
                return env[n[1]]
            if k == "neg":
                return _check(-ev(n[1]), self.text)
            return apply(k, ev(n[1]), ev(n[2]), self.text)

        return ev(self.root)

    def solve_factor(self, extent: int, env: dict):
        """For ``X * S`` / ``S * X`` with S an unknown size and X evaluable: ``(S, extent / X)``;
        raises ``NotMultiple(X)`` when extent is not a positive multiple of a positive X; None for
        any other form (``SizeExpr::solve_factor``)."""
        r = self.root
        if r[0] != "*":
            return None
        unknown = lambda n: n[0] == "sym" and n[1] not in env  # noqa: E731
        a, b = r[1], r[2]
        if unknown(a) and not unknown(b):
            sym, known = a, b
        elif unknown(b) and not unknown(a):
            sym, known = b, a
        else:
            return None
        try:
            x = SizeExpr._eval_node(self, known, env)
        except ExprError:
            return None
        if x > 0 and extent > 0 and extent % x == 0:
            return (sym[1], extent // x)
        raise NotMultiple(x)

    def _eval_node(self, node, env):
        saved = self.root
        try:
            self.root = node
            return self.eval(env)
        finally:
            self.root = saved

    def __repr__(self):
        return f"SizeExpr({self.text!r})"

    def __str__(self):
        return self.text


class NotMultiple(Exception):
    """A product dimension's extent is not a positive multiple of its known factor."""

    def __init__(self, factor: int):
        super().__init__(factor)
        self.factor = factor


_cache: dict = {}


def parse(text: str) -> SizeExpr:
    e = _cache.get(text)
    if e is None:
        e = _cache[text] = SizeExpr(text)
    return e
