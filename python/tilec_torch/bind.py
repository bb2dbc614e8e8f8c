"""Argument binding without a GPU: the rules of ``tilec_abi::bind::bind`` (docs/metadata.md, "How
the runtime binds arguments") over tensor *specs* (dtype and shape), so every check runs — and is
tested — on a machine without CUDA or torch.

1. every supplied name is a parameter; 2. each parameter in order: present (outputs may be left
out), tensor vs scalar, dtype, rank; 3. sizes from bare-name dimensions, explicit values and i32
scalars named like a size, all agreeing; then product dimensions ``X * S`` solve S; 4. envelope,
every dimension evaluated and compared, grid range-checked; 5. unsupplied i32 size scalars are
passed the size.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Optional

from .expr import ExprError, NotMultiple, parse

MAX_GRID = ((1 << 31) - 1, 65535, 65535)
MAX_TENSOR_BYTES = 1 << 40
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}


class BindError(ValueError):
    """Arguments that do not fit a signature; ``param`` names the tensor/scalar/size at fault."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class TensorSpec:
    """What the binder needs of a tensor: its element type and extents."""

    dtype: str
    shape: tuple


def _round_binary(x: float, precision: int, min_exp: int, max_exp: int) -> float:
    """``x`` rounded once, to nearest even, to a binary format with ``precision`` significand bits,
    smallest quantum ``2**min_exp`` and largest finite value below ``2**max_exp``; inf beyond."""
    if x == 0 or math.isnan(x) or math.isinf(x):
        return x
    _, e = math.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
    q = max(e - precision, min_exp)
    n = round(math.ldexp(x, -q))  # exact scaling; Python's round() is round-half-even on floats
    r = math.ldexp(n, q) if abs(n) < (1 << 1100) else math.inf
    if abs(r) >= math.ldexp(1.0, max_exp):
        return math.copysign(math.inf, x)
    return r


def scalar_bytes(dtype: str, value) -> bytes:
    """A scalar kernel argument's bytes (docs/metadata.md: f32/i32 as 32-bit, f16/bf16 as the
    16-bit pattern), rounding a Python number once to the dtype."""
    if dtype == "i32":
        if isinstance(value, bool) or not isinstance(value, int) and not (hasattr(value, "__index__")):
            raise TypeError(f"expected an int, found {type(value).__name__}")
        v = int(value)
        if not -(1 << 31) <= v < (1 << 31):
            raise OverflowError(f"{v} does not fit in i32")
        return struct.pack("<i", v)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"expected a number, found {type(value).__name__}") from None
    x = float(value)
    if dtype == "f32":
        return struct.pack("<f", _round_binary(x, 24, -149, 128))
    if dtype == "f16":
        return struct.pack("<e", _round_binary(x, 11, -24, 16))
    if dtype == "bf16":
        r = _round_binary(x, 8, -133, 128)
        # r is a bf16 value, so exactly an f32 whose low 16 bits are zero: keep the high half.
        return b"\xc0\x7f" if math.isnan(r) else struct.pack("<f", r)[2:4]
    raise ValueError(f"unknown dtype {dtype}")


@dataclass(frozen=True)
class BoundTensor:
    name: str
    dtype: str
    role: str
    shape: tuple
    supplied: bool


@dataclass(frozen=True)
class BoundScalar:
    name: str
    dtype: str
    value: object  # the caller's number (or the size)

    @property
    def bytes(self) -> bytes:
        return scalar_bytes(self.dtype, self.value)


@dataclass(frozen=True)
class Binding:
    sizes: dict
    grid: tuple
    block: tuple
    dynamic_smem_bytes: int
    args: tuple  # BoundTensor | BoundScalar, in parameter order


def _shape_text(shape) -> str:
    return "[" + ", ".join(shape) + "]"


def _extent_text(expr: str, value: int) -> str:
    return str(value) if expr.strip() == str(value) else f"{expr} = {value}"


def bind(name: str, sizes_declared, params, grid, block_threads: int, dynamic_smem_bytes: int, envelope, tensors: dict, scalars: dict, sizes: Optional[dict] = None, optional=()) -> Binding:
    """Binds ``tensors`` (name -> TensorSpec) and ``scalars`` (name -> number) against a signature.
    ``optional``: input tensors that may be left out (an operator plan's ``optional``): bound like
    an output the caller did not pass (``supplied`` false, extents from the other parameters).

    Raises ``BindError`` naming the parameter; checks run in a fixed order (unknown names, each
    parameter in order, sizes, extents, grid)."""
    sizes = dict(sizes or {})
    by_name = {p.name: p for p in params}
    for n in tensors:
        if n not in by_name:
            known = ", ".join(p.name for p in params if not p.is_scalar) or "none"
            raise BindError(f"`{name}` has no tensor parameter `{n}` (its tensor parameters: {known})", n)
    for n in scalars:
        if n not in by_name:
            known = ", ".join(p.name for p in params if p.is_scalar) or "none"
            raise BindError(f"`{name}` has no scalar parameter `{n}` (its scalar parameters: {known})", n)
    for n in sizes:
        if n not in sizes_declared:
            raise BindError(f"`{name}` has no size `{n}` (its sizes: {', '.join(sizes_declared) or 'none'})", n)

    table: dict = {}

    def record(size, value, source, param=None):
        if size in table and table[size][0] != value:
            first, v0 = table[size][1], table[size][0]
            raise BindError(f"size `{size}` is inconsistent: {first} gives {v0}, but {source} gives {value}", param)
        table.setdefault(size, (value, source))

    for n, v in sizes.items():
        record(n, int(v), f"the explicit value of `{n}`")

    for p in params:
        if p.is_scalar:
            if p.name in tensors:
                raise BindError(f"parameter `{p.name}`: expected a scalar, found a tensor", p.name)
            if p.name in scalars:
                v = scalars[p.name]
                try:
                    scalar_bytes(p.dtype, v)
                except (TypeError, OverflowError) as e:
                    raise BindError(f"parameter `{p.name}`: expected a {p.dtype} scalar: {e}", p.name) from None
                if p.dtype == "i32" and p.name in sizes_declared:
                    if int(v) < 0:
                        raise BindError(f"scalar `{p.name}` = `{p.name}` evaluates to {int(v)}, outside 0.. (it is a size)", p.name)
                    record(p.name, int(v), f"scalar `{p.name}`", p.name)
            elif not (p.dtype == "i32" and p.name in sizes_declared):
                raise BindError(f"missing {p.role} parameter `{p.name}`: expected {p.describe()}", p.name)
            continue
        if p.name in scalars:
            raise BindError(f"parameter `{p.name}`: expected a tensor, found a scalar", p.name)
        t = tensors.get(p.name)
        if t is None:
            if p.role == "output" or p.name in optional:
                continue
            raise BindError(f"missing {p.role} parameter `{p.name}`: expected {p.describe()}", p.name)
        if t.dtype != p.dtype:
            raise BindError(f"parameter `{p.name}`: expected dtype {p.dtype}, found {t.dtype}", p.name)
        if len(t.shape) != len(p.shape):
            raise BindError(f"parameter `{p.name}`: expected rank {len(p.shape)} ({_shape_text(p.shape)}), found rank {len(t.shape)} {list(t.shape)}", p.name)
        for d, text in enumerate(p.shape):
            s = parse(text).as_symbol()
            if s is not None:
                record(s, int(t.shape[d]), f"parameter `{p.name}` dim {d}", p.name)

    # Product dimensions: X * S gives S = extent / X (GVA's H * G), repeated while it binds one.
    while True:
        env = {k: v[0] for k, v in table.items()}
        found = []
        for p in params:
            t = tensors.get(p.name)
            if t is None or p.is_scalar:
                continue
            for d, text in enumerate(p.shape):
                try:
                    r = parse(text).solve_factor(int(t.shape[d]), env)
                except NotMultiple as nm:
                    raise BindError(f"parameter `{p.name}` dim {d} (`{text}`): {t.shape[d]} is not a positive multiple of {nm.factor}", p.name) from None
                if r is not None and r[0] not in [f[0] for f in found]:
                    found.append((r[0], r[1], f"parameter `{p.name}` dim {d} (`{text}`)", p.name))
        if not found:
            break
        for s, v, src, pn in found:
            record(s, v, src, pn)

    uses = [(f"parameter `{p.name}` dim {d}", t, p.name) for p in params for d, t in enumerate(p.shape)]
    uses += [(f"launch.grid[{a}]", t, None) for a, t in enumerate(grid)]
    for used_by, text, pn in uses:
        for s in parse(text).symbols():
            if s not in table:
                raise BindError(f"size `{s}` (used by {used_by} = `{text}`) cannot be inferred from the arguments; give it explicitly", pn)
    for b in envelope:
        if b.size in table and not b.admits(table[b.size][0]):
            raise BindError(f"size `{b.size}` = {table[b.size][0]} is outside the kernel's envelope ({b.describe()})", b.size)
    env = {k: v[0] for k, v in table.items()}

    out = []
    for p in params:
        if p.is_scalar:
            if p.name in scalars:
                out.append(BoundScalar(p.name, p.dtype, scalars[p.name]))
            else:
                v = env.get(p.name, 0)
                if v > (1 << 31) - 1:
                    raise BindError(f"size scalar `{p.name}` = `{p.name}` evaluates to {v}, outside 0..=2147483647 (passed as i32)", p.name)
                out.append(BoundScalar(p.name, "i32", v))
            continue
        shape = []
        for d, text in enumerate(p.shape):
            try:
                v = parse(text).eval(env)
            except ExprError as e:
                raise BindError(f"parameter `{p.name}` dim {d}: {e}", p.name) from None
            if v < 0:
                raise BindError(f"parameter `{p.name}` dim {d} = `{text}` evaluates to {v}, outside 0..", p.name)
            shape.append(v)
        nbytes = math.prod(shape) * DTYPE_BYTES[p.dtype]
        if nbytes > MAX_TENSOR_BYTES:
            raise BindError(f"parameter `{p.name}`: shape {shape} of {p.dtype} is too large ({nbytes} bytes, the limit is {MAX_TENSOR_BYTES}); refused before any allocation", p.name)
        t = tensors.get(p.name)
        if t is not None:
            for d, (want, got) in enumerate(zip(shape, t.shape)):
                if want != got:
                    err = BindError(f"parameter `{p.name}` dim {d}: expected {_extent_text(p.shape[d], want)}, found {got}", p.name)
                    err.dim, err.found = d, got
                    raise err
        out.append(BoundTensor(p.name, p.dtype, p.role, tuple(shape), t is not None))

    g = []
    for axis, text in enumerate(grid):
        try:
            e = parse(text)
            v = e.eval(env)
        except ExprError as e:
            raise BindError(f"launch.grid[{axis}]: {e}") from None
        if not 1 <= v <= MAX_GRID[axis]:
            # As the Rust binder: name the sizes behind a computed grid (`cdiv(T, 64)` with T = 0).
            given = [] if e.as_symbol() else [f"{n} = {env[n]}" for n in e.symbols() if n in env]
            with_ = f" with {', '.join(given)}" if given else ""
            raise BindError(f"launch.grid[{axis}] = `{text}` evaluates to {v}{with_}, outside 1..={MAX_GRID[axis]}")
        g.append(v)
    return Binding(env, tuple(g), (block_threads, 1, 1), dynamic_smem_bytes, tuple(out))


def bind_kernel(meta, tensors: dict, scalars: dict, sizes: Optional[dict] = None) -> Binding:
    """``bind`` against a kernel's metadata."""
    return bind(meta.kernel, meta.sizes, meta.params, meta.grid, meta.block_threads, meta.dynamic_smem_bytes, meta.envelope, tensors, scalars, sizes)
