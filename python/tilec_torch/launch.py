"""Everything a plan's launches need, computed without a GPU (the thin driver layer in
``driver.py`` only allocates, encodes tensor maps and calls ``cuLaunchKernel``):

* ``prepare(op, tensors, scalars)`` — the operator-level binding (``tilec_abi::plan::execute``'s
  checks before any launch): dtypes, ranks, extents, sizes, size parameters (K/V the build was not
  made for), offset tables given on the host; the shapes of the outputs and intermediate buffers;
  and per launch the kernel's own binding (grid, block, dynamic shared memory, arguments).
* ``pack_launch(step, ptrs)`` — the kernel parameters in PTX order as bytes (a u64 device pointer
  per tensor, 32-bit f32/i32, 16-bit f16/bf16 patterns), then one ``TiledEncoding`` per tensor map
  (``cuTensorMapEncodeTiled``'s arguments, innermost dimension first) or None when the tensor does
  not meet TMA's conditions (the launcher passes 128 zero bytes, as ``runtime/src/tensor_map.rs``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

from .bind import DTYPE_BYTES, BindError, BoundScalar, BoundTensor, TensorSpec, bind, bind_kernel
from .expr import parse
from .meta import LoadedOperator

TENSOR_MAP_ALIGN = 16
TENSOR_MAP_MAX_EXTENT = 1 << 32
TENSOR_MAP_STRIDE_LIMIT = 1 << 40
TENSOR_MAP_BYTES = 128
#: Above this much dynamic shared memory a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
DEFAULT_DYNAMIC_SMEM_LIMIT = 48 * 1024

# CUDA driver enum values (cuda.h), so the pure layer needs no cuda-python.
CU_TENSOR_MAP_DATA_TYPE = {"i32": 3, "f16": 6, "f32": 7, "bf16": 9}
CU_TENSOR_MAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
CU_TENSOR_MAP_INTERLEAVE_NONE = 0
CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0


class OperatorError(ValueError):
    """Inputs an operator refuses before any launch; ``param`` names the tensor."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class TiledEncoding:
    """``cuTensorMapEncodeTiled``'s arguments (``runtime::tensor_map::TiledEncoding``)."""

    dtype: str
    global_address: int
    global_dim: tuple  # innermost first
    global_strides: tuple  # bytes, dimensions 1.., innermost first
    box_dim: tuple
    element_strides: tuple
    swizzle_bytes: int

    def driver_args(self) -> dict:
        """The call's arguments as enum values, in the driver's order."""
        return dict(
            tensorDataType=CU_TENSOR_MAP_DATA_TYPE[self.dtype],
            tensorRank=len(self.global_dim),
            globalAddress=self.global_address,
            globalDim=list(self.global_dim),
            globalStrides=list(self.global_strides),
            boxDim=list(self.box_dim),
            elementStrides=list(self.element_strides),
            interleave=CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle=CU_TENSOR_MAP_SWIZZLE[self.swizzle_bytes],
            l2Promotion=CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            oobFill=CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )


def encoding(tmap, dtype: str, shape, base: int) -> Optional[TiledEncoding]:
    """The encoding of tensor map ``tmap`` for a dense row-major tensor at device address ``base``,
    or None when it cannot be encoded (``runtime/src/tensor_map.rs::encoding``)."""
    rank = len(shape)
    if rank == 0 or rank != len(tmap.box) or base % TENSOR_MAP_ALIGN:
        return None
    if any(d == 0 or d > TENSOR_MAP_MAX_EXTENT for d in shape):
        return None
    strides, stride = [], DTYPE_BYTES[dtype]
    for d in range(rank - 1, 0, -1):
        stride *= shape[d]
        if stride % TENSOR_MAP_ALIGN or stride >= TENSOR_MAP_STRIDE_LIMIT:
            return None
        strides.append(stride)
    return TiledEncoding(dtype, base, tuple(reversed(shape)), tuple(strides), tuple(reversed(tmap.box)), tuple(reversed(tmap.element_strides)), tmap.swizzle_bytes)


@dataclass(frozen=True)
class Step:
    """One launch, bound: the kernel, its launch configuration, and per kernel parameter (PTX
    order) the operator value it receives (tensor) or the scalar."""

    index: int
    kernel: str
    grid: tuple
    block: tuple
    dynamic_smem_bytes: int
    args: tuple  # (kernel param, BoundTensor with the operator value's name in .name) | BoundScalar
    tensor_maps: tuple  # (TensorMapMeta, operator value name, dtype, shape)


@dataclass(frozen=True)
class Prepared:
    """An operator call, checked: sizes, every tensor to allocate, every launch."""

    operator: str
    sizes: dict
    inputs: tuple  # BoundTensor of the operator's tensor params the caller supplied
    outputs: tuple  # BoundTensor of operator outputs the caller did not supply (allocate zeros)
    buffers: tuple  # (name, dtype, shape): intermediates, allocated zero-filled
    steps: tuple
    zero_inputs: tuple = ()  # BoundTensor of optional inputs left out (allocate zeros, not returned)


def _size_help(sp, found: int) -> str:
    if found in sp.supported:
        return f"{sp.name} = {found} needs `--const {sp.name}={found}` (a build with it, in its own folder)"
    lst = ", ".join(str(s) for s in sp.supported)
    return f"{sp.name} = {found} is not supported (the source supports {sp.name} ∈ {{{lst}}})"


def prepare(op: LoadedOperator, tensors: dict, scalars: dict, offsets_values: Optional[dict] = None) -> Prepared:
    """Checks a call of ``op`` (``tensors``: name -> TensorSpec, ``scalars``: name -> number) and
    plans every launch. ``offsets_values``: the host contents of offset tables (name -> list of
    ints), checked as the executor checks them; a table not given here is on the device and not
    checked (reading it would synchronise).

    Raises ``OperatorError`` naming the tensor; nothing here touches a GPU."""
    plan = op.plan
    name = plan.operator
    try:
        b = bind(name, plan.sizes, plan.params, ("1", "1", "1"), 32, 0, [], tensors, scalars, optional=plan.optional)
    except BindError as e:
        found = getattr(e, "found", None)
        if found is not None:
            dim = f"{e.param}[{e.dim}]"
            sp = next((s for s in plan.size_params if dim in s.dims), None)
            if sp is not None:
                raise OperatorError(f"operator `{name}`: {e}: it is compiled with {sp.name} = {sp.value}; {_size_help(sp, found)}", e.param) from None
        raise OperatorError(f"operator `{name}`: {e}", e.param) from None
    for param, total in plan.offsets:
        vals = (offsets_values or {}).get(param)
        if vals is None:
            continue
        tv = b.sizes.get(total, 0)

        def bad(msg):
            return OperatorError(f"operator `{name}`: `{param}` is not an offset table into {total} = {tv}: {msg}", param)

        if len(vals) == 0:
            raise bad("the table is empty (it needs at least the entry 0)")
        for i, x in enumerate(vals):
            if i == 0 and x != 0:
                raise bad(f"entry 0 is {x}, not 0")
            if i > 0 and x < vals[i - 1]:
                raise bad(f"entry {i} ({x}) is less than entry {i - 1} ({vals[i - 1]}): sequences cannot have negative length")
            if x > tv:
                raise bad(f"entry {i} ({x}) is past {total} = {tv}")
            if i + 1 == len(vals) and x != tv:
                raise bad(f"the last entry (index {i}) is {x}, not {tv}")

    env = b.sizes
    values = {}  # operator value name -> (dtype, shape)
    inputs, outputs, zero_inputs = [], [], []
    scalar_values = {}
    for a in b.args:
        if isinstance(a, BoundScalar):
            scalar_values[a.name] = a
            continue
        values[a.name] = (a.dtype, a.shape)
        (inputs if a.supplied else zero_inputs if a.name in plan.optional else outputs).append(a)
    buffers = []
    for buf in plan.buffers:
        shape = []
        for d in buf.shape:
            v = parse(d).eval(env)
            if v < 0:
                raise OperatorError(f"operator `{name}`: buffer `{buf.name}`: extent `{d}` = {v} is negative", buf.name)
            shape.append(v)
        buffers.append((buf.name, buf.dtype, tuple(shape)))
        values[buf.name] = (buf.dtype, tuple(shape))

    steps = []
    for i, l in enumerate(plan.launches):
        m = op.kernels[l.kernel]
        routed = {kp: v for kp, v in l.args}
        kshapes = {kp: values[v][1] for kp, v in routed.items() if v in values}
        ksizes = kernel_sizes(m.params, kshapes)
        # Every tensor as an output (no data): extents follow from the sizes the routed tensors give.
        kparams = [p if p.is_scalar else type(p)(p.name, p.dtype, p.shape, "output") for p in m.params]
        kscalars = {kp: scalar_values[v].value for kp, v in routed.items() if v in scalar_values}
        try:
            kb = bind(m.kernel, m.sizes, kparams, m.grid, m.block_threads, m.dynamic_smem_bytes, m.envelope, {}, kscalars, ksizes)
        except BindError as e:
            raise OperatorError(f"operator `{name}`, launch {i} (`{l.kernel}`): {e}", e.param) from None
        args = []
        for a, p in zip(kb.args, m.params):
            if isinstance(a, BoundScalar):
                args.append((p.name, BoundScalar(a.name, p.dtype, a.value)))
                continue
            v = routed[p.name]
            dtype, shape = values[v]
            if tuple(shape) != tuple(a.shape) or dtype != a.dtype:
                raise OperatorError(f"operator `{name}`, launch {i}: kernel `{l.kernel}` parameter `{p.name}`: routed a {dtype} {list(shape)} tensor (`{v}`), its signature gives {a.dtype} {list(a.shape)}", v)
            args.append((p.name, BoundTensor(v, dtype, p.role, tuple(shape), True)))
        maps = tuple((tm, routed[tm.tensor], values[routed[tm.tensor]][0], values[routed[tm.tensor]][1]) for tm in m.tensor_maps)
        steps.append(Step(i, l.kernel, kb.grid, kb.block, kb.dynamic_smem_bytes, tuple(args), maps))
    return Prepared(name, dict(env), tuple(inputs), tuple(outputs), tuple(buffers), tuple(steps), tuple(zero_inputs))


def kernel_sizes(params, shapes: dict) -> dict:
    """``tilec_abi::plan::kernel_sizes``: a kernel's bare-name sizes from the extents routed to it,
    then the unknown factors of product dimensions."""
    out = {}
    for p in params:
        shape = shapes.get(p.name)
        if shape is None:
            continue
        for text, extent in zip(p.shape, shape):
            s = parse(text).as_symbol()
            if s is not None:
                out.setdefault(s, int(extent))
    while True:
        found = {}
        for p in params:
            shape = shapes.get(p.name)
            if shape is None or p.is_scalar:
                continue
            for text, extent in zip(p.shape, shape):
                try:
                    r = parse(text).solve_factor(int(extent), out)
                except Exception:  # a non-multiple was refused when the operator was bound
                    r = None
                if r is not None:
                    found.setdefault(r[0], r[1])
        if not found:
            return out
        out.update(found)


@dataclass(frozen=True)
class PackedLaunch:
    """One ``cuLaunchKernel`` call, minus the function and stream."""

    kernel: str
    grid: tuple
    block: tuple
    dynamic_smem_bytes: int
    params: tuple  # bytes per kernel parameter in PTX order; tensor maps are None (encode them)
    tensor_maps: tuple  # (param index, TiledEncoding | None), None -> 128 zero bytes


def pack_launch(step: Step, ptrs: dict) -> PackedLaunch:
    """The parameter list of ``step`` with device pointers ``ptrs`` (operator value name -> int)."""
    params = []
    for _, a in step.args:
        if isinstance(a, BoundScalar):
            params.append(a.bytes)
        else:
            params.append(struct.pack("<Q", int(ptrs[a.name])))
    maps = []
    for tm, value, dtype, shape in step.tensor_maps:
        maps.append((len(params), encoding(tm, dtype, shape, int(ptrs[value]))))
        params.append(None)
    return PackedLaunch(step.kernel, step.grid, step.block, step.dynamic_smem_bytes, tuple(params), tuple(maps))
