"""Reading tilec build outputs: kernel metadata (``<kernel>.<target>.meta.json``, schema 1..2)
and operator plans (``<operator>.<target>.plan.json``, schema 1..3), as docs/metadata.md
specifies them. The schema version is checked before anything else, unknown fields are refused
(as the Rust reader's ``deny_unknown_fields``), and the structural checks the launcher relies on
(``KernelMeta::validate``, ``OperatorPlan::validate``) are repeated here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

from .expr import IDENT, ExprError, parse

META_SCHEMA_VERSION = 2
META_OLDEST_READ_VERSION = 1
PLAN_SCHEMA_VERSION = 3
PLAN_OLDEST_READ_VERSION = 1

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}
ROLES = ("input", "output", "inout")
MAX_BLOCK_THREADS = 1024
TENSOR_MAP_MAX_RANK = 5
TENSOR_MAP_MAX_BOX = 256
TENSOR_MAP_ALIGN = 16
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}


class MetaError(ValueError):
    """A metadata or plan file that cannot be used (the message names the file and field)."""


def _fields(obj, where: str, required: set, optional: set = frozenset()):
    if not isinstance(obj, dict):
        raise MetaError(f"{where}: expected an object, found {type(obj).__name__}")
    unknown = set(obj) - required - set(optional)
    if unknown:
        raise MetaError(f"{where}: unknown field `{sorted(unknown)[0]}` (expected {', '.join(sorted(required | set(optional)))})")
    missing = required - set(obj)
    if missing:
        raise MetaError(f"{where}: missing field `{sorted(missing)[0]}`")


def _int(v, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise MetaError(f"{where}: expected an integer, found {v!r}")
    return v


def _str(v, where: str) -> str:
    if not isinstance(v, str):
        raise MetaError(f"{where}: expected a string, found {v!r}")
    return v


def _list(raw: dict, key: str, where: str) -> list:
    """An optional array field: absent is empty; present, it must be an array (as serde reads it)."""
    if key not in raw:
        return []
    if not isinstance(raw[key], list):
        raise MetaError(f"{where}.{key}: expected an array, found {raw[key]!r}")
    return raw[key]


def _strs(v, where: str) -> list:
    if not isinstance(v, list):
        raise MetaError(f"{where}: expected an array, found {v!r}")
    return [_str(x, f"{where}[{i}]") for i, x in enumerate(v)]


@dataclass(frozen=True)
class Param:
    name: str
    dtype: str
    shape: tuple  # size expressions (text), outermost first; () for a scalar
    role: str

    @property
    def is_scalar(self) -> bool:
        return len(self.shape) == 0

    def describe(self) -> str:
        if self.is_scalar:
            return f"{self.dtype} scalar"
        return f"{self.dtype} tensor [{', '.join(self.shape)}]"


def _param(obj, where: str) -> Param:
    _fields(obj, where, {"name", "dtype", "shape", "role"})
    name = _str(obj["name"], f"{where}.name")
    if not IDENT.match(name):
        raise MetaError(f"{where}.name `{name}` is not an identifier")
    dtype = _str(obj["dtype"], f"{where}.dtype")
    if dtype not in DTYPE_BYTES:
        raise MetaError(f"{where}.dtype `{dtype}` is not one of bf16, f16, f32, i32")
    role = _str(obj["role"], f"{where}.role")
    if role not in ROLES:
        raise MetaError(f"{where}.role `{role}` is not input, output or inout")
    shape = tuple(_strs(obj["shape"], f"{where}.shape"))
    if not shape and role != "input":
        raise MetaError(f"{where}: scalar parameter `{name}` has role {role}; scalars can only be inputs")
    return Param(name, dtype, shape, role)


def _check_exprs(texts, sizes, where: str):
    for i, t in enumerate(texts):
        try:
            e = parse(t)
        except ExprError as err:
            raise MetaError(f"{where}[{i}]: {err}") from None
        for s in e.symbols():
            if s not in sizes:
                raise MetaError(f"{where}[{i}] = `{t}` uses `{s}`, which is not in `sizes`")


@dataclass(frozen=True)
class SizeBound:
    size: str
    min: int = 1
    max: Optional[int] = None
    multiple_of: int = 1

    def admits(self, v: int) -> bool:
        return v >= self.min and (self.max is None or v <= self.max) and v % self.multiple_of == 0

    def describe(self) -> str:
        s = f"{self.min} <= {self.size}"
        if self.max is not None:
            s += f" <= {self.max}"
        if self.multiple_of > 1:
            s += f", multiple of {self.multiple_of}"
        return s


@dataclass(frozen=True)
class TensorMapMeta:
    tensor: str
    box: tuple  # outermost first
    element_strides: tuple
    swizzle: str
    oob_fill: str

    @property
    def swizzle_bytes(self) -> int:
        return SWIZZLE_BYTES[self.swizzle]


@dataclass
class KernelMeta:
    """One kernel's metadata (``tilec_abi::meta::KernelMeta``)."""

    schema_version: int
    kernel: str
    target: str
    sizes: list
    params: list
    grid: tuple
    block_threads: int
    dynamic_smem_bytes: int
    envelope: list
    tensor_maps: list
    ptx: str
    cubin: Optional[str]
    dir: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def ptx_path(self) -> str:
        return os.path.join(self.dir, self.ptx)

    @property
    def cubin_path(self) -> Optional[str]:
        return os.path.join(self.dir, self.cubin) if self.cubin else None


def _check_version(raw, what: str, oldest: int, newest: int):
    if not isinstance(raw, dict):
        raise MetaError(f"{what}: the top level is not a JSON object")
    v = raw.get("schema_version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise MetaError(f"{what} has no integer `schema_version` field (this reader reads versions {oldest} to {newest})")
    if not oldest <= v <= newest:
        raise MetaError(f"unsupported {what} schema version {v} (this reader reads versions {oldest} to {newest}); rebuild the artifacts with a matching tilec")
    return v


def kernel_meta_from_dict(raw: dict, dir: str = "", where: str = "metadata") -> KernelMeta:
    """Validates a parsed ``*.meta.json`` (see the module docs)."""
    version = _check_version(raw, "metadata", META_OLDEST_READ_VERSION, META_SCHEMA_VERSION)
    _fields(raw, where, {"schema_version", "kernel", "target", "compiler", "source", "sizes", "params", "launch", "tmem", "smem_bytes", "ptxas", "contract", "files"}, {"tensor_maps"})
    kernel = _str(raw["kernel"], f"{where}.kernel")
    if not IDENT.match(kernel):
        raise MetaError(f"{where}: `kernel` must be a PTX identifier, found `{kernel}`")
    w = f"kernel `{kernel}` ({where})"
    target = _str(raw["target"], f"{w}.target")
    sizes = _strs(raw["sizes"], f"{w}.sizes")
    if len(set(sizes)) != len(sizes) or not all(IDENT.match(s) for s in sizes):
        raise MetaError(f"{w}.sizes: names must be distinct identifiers")
    if not isinstance(raw["params"], list):
        raise MetaError(f"{w}.params: expected an array")
    params = [_param(p, f"{w}.params[{i}]") for i, p in enumerate(raw["params"])]
    if len({p.name for p in params}) != len(params):
        raise MetaError(f"{w}: a parameter is declared twice")
    for i, p in enumerate(params):
        _check_exprs(p.shape, sizes, f"{w}.params[{i}] (`{p.name}`).shape")
    launch = raw["launch"]
    _fields(launch, f"{w}.launch", {"grid", "block_threads", "dynamic_smem_bytes"})
    grid = tuple(_strs(launch["grid"], f"{w}.launch.grid"))
    if len(grid) != 3:
        raise MetaError(f"{w}.launch.grid: expected 3 expressions")
    _check_exprs(grid, sizes, f"{w}.launch.grid")
    block = _int(launch["block_threads"], f"{w}.launch.block_threads")
    if not 1 <= block <= MAX_BLOCK_THREADS:
        raise MetaError(f"{w}: launch.block_threads = {block} is outside 1..={MAX_BLOCK_THREADS}")
    smem = _int(launch["dynamic_smem_bytes"], f"{w}.launch.dynamic_smem_bytes")
    if smem < 0:
        raise MetaError(f"{w}.launch.dynamic_smem_bytes is negative")
    contract = raw["contract"]
    _fields(contract, f"{w}.contract", {"no_spill", "accumulator"}, {"reference", "envelope"})
    envelope = []
    for i, b in enumerate(contract.get("envelope") or []):
        _fields(b, f"{w}.contract.envelope[{i}]", {"size"}, {"min", "max", "multiple_of"})
        sb = SizeBound(_str(b["size"], "size"), _int(b.get("min", 1), "min"), None if b.get("max") is None else _int(b["max"], "max"), _int(b.get("multiple_of", 1), "multiple_of"))
        if sb.size not in sizes:
            raise MetaError(f"{w}: contract.envelope names `{sb.size}`, which is not in `sizes`")
        if (sb.max is not None and sb.max < sb.min) or sb.multiple_of <= 0:
            raise MetaError(f"{w}: contract.envelope for `{sb.size}` admits no value")
        envelope.append(sb)
    files = raw["files"]
    _fields(files, f"{w}.files", {"ptx"}, {"cubin"})
    ptx = _str(files["ptx"], f"{w}.files.ptx")
    if not ptx:
        raise MetaError(f"{w}: files.ptx is empty")
    cubin = files.get("cubin")
    if cubin is not None:
        _str(cubin, f"{w}.files.cubin")
    maps = []
    for i, t in enumerate(raw.get("tensor_maps") or []):
        wm = f"{w}.tensor_maps[{i}]"
        _fields(t, wm, {"tensor", "box", "element_strides", "swizzle", "oob_fill"})
        tm = TensorMapMeta(_str(t["tensor"], wm), tuple(_int(x, wm) for x in t["box"]), tuple(_int(x, wm) for x in t["element_strides"]), _str(t["swizzle"], wm), _str(t["oob_fill"], wm))
        p = next((p for p in params if p.name == tm.tensor and not p.is_scalar), None)
        if p is None:
            raise MetaError(f"{wm}.tensor `{tm.tensor}` is not a tensor parameter")
        rank = len(p.shape)
        if not 1 <= rank <= TENSOR_MAP_MAX_RANK or len(tm.box) != rank or len(tm.element_strides) != rank:
            raise MetaError(f"{wm}: box and element_strides need one entry per dimension of `{tm.tensor}` (rank {rank}, at most {TENSOR_MAP_MAX_RANK})")
        if any(not 1 <= b <= TENSOR_MAP_MAX_BOX for b in tm.box) or any(not 1 <= e <= 8 for e in tm.element_strides):
            raise MetaError(f"{wm}: box extents must lie in 1..={TENSOR_MAP_MAX_BOX} and element strides in 1..=8")
        if tm.swizzle not in SWIZZLE_BYTES:
            raise MetaError(f"{wm}.swizzle `{tm.swizzle}` is not none, 32B, 64B or 128B")
        inner = tm.box[-1] * DTYPE_BYTES[p.dtype]
        if inner % TENSOR_MAP_ALIGN or (tm.swizzle_bytes and inner > tm.swizzle_bytes):
            raise MetaError(f"{wm}: the innermost box row is {inner} bytes; it must be a multiple of 16 and at most the swizzle width")
        if tm.oob_fill != "zero":
            raise MetaError(f"{wm}.oob_fill `{tm.oob_fill}` is not `zero`")
        maps.append(tm)
    if version < 2 and maps:
        raise MetaError(f"{w}: `tensor_maps` needs schema version 2")
    return KernelMeta(version, kernel, target, sizes, params, grid, block, smem, envelope, maps, ptx, cubin, dir, raw)


def _load_json(path: str, what: str, parse):
    """Reads the JSON file at `path` and parses it with `parse(raw, folder, file name)`; every
    error names the file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise MetaError(f"cannot read {what} file {path}: {e}") from None
    try:
        return parse(raw, os.path.dirname(path), os.path.basename(path))
    except MetaError as e:
        raise MetaError(f"{path}: {e}") from None


def load_kernel_meta(path: str) -> KernelMeta:
    return _load_json(path, "metadata", kernel_meta_from_dict)


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class Launch:
    kernel: str
    meta: str  # file name beside the plan
    args: tuple  # ((kernel param, operator value), ...) in the kernel's parameter order


@dataclass(frozen=True)
class SizeParam:
    name: str
    value: int
    supported: tuple
    dims: tuple  # "param[dim]"


@dataclass
class OperatorPlan:
    """An operator plan (``tilec_abi::plan::OperatorPlan``)."""

    schema_version: int
    operator: str
    target: str
    sizes: list
    params: list
    buffers: list
    launches: list
    size_params: list
    offsets: list  # [(param, total size)]
    dir: str = ""
    optional: tuple = ()  # inputs the caller may leave out: allocated zero-filled (version 3)

    def param(self, name: str) -> Optional[Param]:
        return next((p for p in self.params if p.name == name), None)


def plan_from_dict(raw: dict, dir: str = "", where: str = "plan") -> OperatorPlan:
    version = _check_version(raw, "plan", PLAN_OLDEST_READ_VERSION, PLAN_SCHEMA_VERSION)
    _fields(raw, where, {"schema_version", "operator", "target", "compiler", "source", "sizes", "params", "buffers", "launches"}, {"size_params", "offsets", "optional"})
    op = _str(raw["operator"], f"{where}.operator")
    w = f"plan `{op}`"
    sizes = _strs(raw["sizes"], f"{w}.sizes")
    params = [_param(p, f"{w}.params[{i}]") for i, p in enumerate(raw["params"])]
    for i, p in enumerate(params):
        _check_exprs(p.shape, sizes, f"{w}.params[{i}] (`{p.name}`).shape")
    buffers = []
    for i, b in enumerate(raw["buffers"]):
        _fields(b, f"{w}.buffers[{i}]", {"name", "dtype", "shape"})
        if b["dtype"] not in DTYPE_BYTES:
            raise MetaError(f"{w}.buffers[{i}].dtype `{b['dtype']}` is not one of bf16, f16, f32, i32")
        buf = Buffer(_str(b["name"], "name"), b["dtype"], tuple(_strs(b["shape"], f"{w}.buffers[{i}].shape")))
        _check_exprs(buf.shape, sizes, f"{w}.buffers[{i}] (`{buf.name}`).shape")
        buffers.append(buf)
    launches = []
    for i, l in enumerate(raw["launches"]):
        _fields(l, f"{w}.launches[{i}]", {"kernel", "meta", "args"})
        args = []
        for j, a in enumerate(l["args"]):
            _fields(a, f"{w}.launches[{i}].args[{j}]", {"param", "value"})
            args.append((_str(a["param"], "param"), _str(a["value"], "value")))
        launches.append(Launch(_str(l["kernel"], "kernel"), _str(l["meta"], "meta"), tuple(args)))
    size_params = []
    for i, s in enumerate(_list(raw, "size_params", w)):
        _fields(s, f"{w}.size_params[{i}]", {"name", "value", "supported", "dims"})
        size_params.append(SizeParam(_str(s["name"], "name"), _int(s["value"], "value"), tuple(_int(x, "supported") for x in s["supported"]), tuple(_strs(s["dims"], "dims"))))
    offsets = []
    for i, o in enumerate(_list(raw, "offsets", w)):
        _fields(o, f"{w}.offsets[{i}]", {"param", "total"})
        offsets.append((_str(o["param"], "param"), _str(o["total"], "total")))
    # An optional field, when present, has its type (serde refuses `null` or `false` there too).
    optional = tuple(_strs(raw["optional"], f"{w}.optional")) if "optional" in raw else ()
    plan = OperatorPlan(version, op, _str(raw["target"], "target"), sizes, params, buffers, launches, size_params, offsets, dir, optional)
    validate_plan(plan)
    return plan


def validate_plan(plan: OperatorPlan):
    """``OperatorPlan::validate``: unique names, known launch values, no tensor passed twice in one
    launch, well-formed size parameters and offset tables."""
    w = f"plan `{plan.operator}`"
    names = set()
    for n in [p.name for p in plan.params] + [b.name for b in plan.buffers]:
        if n in names:
            raise MetaError(f"{w}: `{n}` is declared twice")
        names.add(n)
    if plan.schema_version == 1 and (plan.size_params or plan.offsets):
        raise MetaError(f"{w}: a schema version 1 plan cannot have `size_params` or `offsets` (added in version 2)")
    for sp in plan.size_params:
        if not sp.supported or any(v <= 0 for v in sp.supported) or len(set(sp.supported)) != len(sp.supported):
            raise MetaError(f"{w}: size parameter `{sp.name}`: `supported` must list distinct positive sizes")
        if sp.value not in sp.supported:
            raise MetaError(f"{w}: size parameter `{sp.name}`: its `value` is not one of `supported`")
        if sp.name in plan.sizes:
            raise MetaError(f"{w}: size parameter `{sp.name}`: it is also a symbolic size of the plan")
        for d in sp.dims:
            pname, _, rest = d.partition("[")
            p = plan.param(pname)
            ok = p is not None and rest.endswith("]") and rest[:-1].isdigit() and int(rest[:-1]) < len(p.shape) and p.shape[int(rest[:-1])] == str(sp.value)
            if not ok:
                raise MetaError(f"{w}: size parameter `{sp.name}`: `{d}` is not a dimension of extent {sp.value} of a parameter")
    for param, total in plan.offsets:
        p = plan.param(param)
        if p is None or p.dtype != "i32" or len(p.shape) != 1 or total not in plan.sizes:
            raise MetaError(f"{w}: offsets `{param}` over `{total}`: not an i32 vector parameter over one of the sizes")
    if plan.schema_version < 3 and plan.optional:
        raise MetaError(f"{w}: a plan before schema version 3 cannot have `optional` inputs (added in version 3)")
    tables = {t for t, _ in plan.offsets}
    for n in plan.optional:
        p = plan.param(n)
        if p is None or p.role != "input" or p.is_scalar or n in tables:
            raise MetaError(f"{w}: optional `{n}`: not an input tensor (or an offset table) of the plan")
        if plan.optional.count(n) > 1:
            raise MetaError(f"{w}: optional `{n}` listed twice")
    scalars = {p.name for p in plan.params if p.is_scalar}
    for i, l in enumerate(plan.launches):
        seen = set()
        for _, v in l.args:
            if v not in names:
                raise MetaError(f"{w}: launch {i} (`{l.kernel}`) passes `{v}`, which is neither a parameter nor a buffer")
            if v not in scalars:
                if v in seen:
                    raise MetaError(f"{w}: launch {i} (`{l.kernel}`) passes tensor `{v}` twice")
                seen.add(v)


def load_plan(path: str) -> OperatorPlan:
    return _load_json(path, "plan", plan_from_dict)


@dataclass
class LoadedOperator:
    """A plan with every kernel's metadata it launches, checked against each other."""

    plan: OperatorPlan
    kernels: dict  # kernel name -> KernelMeta

    @property
    def target(self) -> str:
        return self.plan.target


def load_operator(plan_dir: str, name: str, target: Optional[str] = None) -> LoadedOperator:
    """Loads ``<name>.<target>.plan.json`` from ``plan_dir`` and the metadata of every kernel it
    launches (beside it). ``target`` may be left out when the folder holds exactly one target."""
    if target is None:
        prefix, suffix = f"{name}.", ".plan.json"
        found = sorted(f[len(prefix):-len(suffix)] for f in os.listdir(plan_dir) if f.startswith(prefix) and f.endswith(suffix))
        if not found:
            raise MetaError(f"no plan for operator `{name}` in {plan_dir} (expected {name}.<target>.plan.json; build it with `tilec build FILE --target sm_90a -o {plan_dir}`)")
        if len(found) > 1:
            raise MetaError(f"{plan_dir} holds plans of `{name}` for several targets ({', '.join(found)}): pass target=")
        target = found[0]
    plan = load_plan(os.path.join(plan_dir, f"{name}.{target}.plan.json"))
    kernels = {}
    for i, l in enumerate(plan.launches):
        if l.kernel in kernels:
            continue
        m = load_kernel_meta(os.path.join(plan_dir, l.meta))
        if m.kernel != l.kernel:
            raise MetaError(f"plan `{name}` launch {i}: {l.meta} describes kernel `{m.kernel}`, not `{l.kernel}`")
        if m.target != plan.target:
            raise MetaError(f"plan `{name}` launch {i}: kernel `{m.kernel}` is built for {m.target}, the plan for {plan.target}")
        kernels[l.kernel] = m
    for i, l in enumerate(plan.launches):
        m = kernels[l.kernel]
        given = [a[0] for a in l.args]
        order = [p.name for p in m.params if p.name in given]
        if given != order or len(set(given)) != len(given):
            raise MetaError(f"plan `{name}` launch {i} (`{l.kernel}`): its arguments {given} are not parameters of the kernel in its order {[p.name for p in m.params]}")
        for p in m.params:
            # What a launch leaves out must be an i32 size scalar, which the binder fills.
            if p.name not in given and not (p.is_scalar and p.dtype == "i32" and p.name in m.sizes):
                raise MetaError(f"plan `{name}` launch {i} (`{l.kernel}`): kernel parameter `{p.name}` receives nothing")
        for kp_name, value in l.args:
            kp = next(p for p in m.params if p.name == kp_name)
            op_param = plan.param(value)
            # The plan's dataflow rule: a kernel never writes an operator input (the caller's tensor).
            if kp.role != "input" and op_param is not None and op_param.role == "input":
                raise MetaError(f"plan `{name}` launch {i} (`{l.kernel}`): `{kp_name}` ({kp.role}) would write the operator input `{value}`")
    return LoadedOperator(plan, kernels)
