"""``Operator``: a tilec operator plan called on torch tensors.

    op = Operator("out/gdn", "gdn_bwd")                 # gdn_bwd.<target>.plan.json + kernels
    grads = op(q=q, k=k, v=v, g=g, beta=beta, s0=s0, do=do, dht=dht, scale=0.088)   # dict of outputs

Every tensor is checked — dtype, shape (sizes bound consistently across tensors), device (one CUDA
device; an offset table may also be a CPU tensor, which is then checked and copied), contiguity,
16-byte alignment — before anything is allocated or launched; a ``TensorError`` names the tensor.
Outputs and intermediate buffers are allocated zero-filled by torch's caching allocator on the
tensors' device, and the kernels run on torch's current stream, in plan order, without host
synchronisation.
"""

from __future__ import annotations

import os
from typing import Optional

from . import driver
from .bind import TensorSpec
from .launch import OperatorError, Prepared, pack_launch, prepare
from .meta import load_operator

TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i32": "int32"}


class TensorError(OperatorError):
    """A tensor argument refused before any launch (the message and ``param`` name it)."""


#: How many call signatures an Operator keeps prepared launches for.
PREPARED_CACHE = 64


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("tilec_torch.Operator needs torch (`pip install torch`)") from None
    return torch


def dtype_name(t) -> str:
    """The tilec dtype of a torch tensor, or torch's name for one tilec has none of."""
    torch = _torch()
    for k, v in TORCH_DTYPES.items():
        if t.dtype == getattr(torch, v):
            return k
    return str(t.dtype).replace("torch.", "")


def _parse_target(target: str):
    rest = target[3:] if target.startswith("sm_") else None
    if not rest:
        return None
    specific = rest[-1] in "af"
    digits = rest[:-1] if specific else rest
    if len(digits) < 2 or not digits.isdigit():
        return None
    return int(digits[:-1]), int(digits[-1]), specific


class Operator:
    """A loaded operator plan (see the module docs). ``target`` may be left out when ``plan_dir``
    holds one target's plan of ``name``."""

    def __init__(self, plan_dir: str, name: str, target: Optional[str] = None, code: str = "auto"):
        if code not in ("auto", "ptx", "cubin"):
            raise ValueError("code must be auto, ptx or cubin")
        self.loaded = load_operator(os.fspath(plan_dir), name, target)
        self.plan = self.loaded.plan
        self.name = name
        self.code = code
        self._modules: dict = {}  # (device index, kernel) -> driver.Module
        # Call signature -> Prepared: binding every launch in Python costs milliseconds a call, the
        # same for every step of a training loop (dtypes, shapes, scalars and host offsets
        # decide it all). Oldest first out past PREPARED_CACHE entries; refusals are not kept.
        self._prepared: dict = {}
        self._exact_on: dict = {}   # device index → whether the artifact's target is its exact capability (checked)

    # ----- checks (no GPU needed) -----
    def check(self, _allow_cpu: bool = False, **kwargs) -> tuple:
        """Checks a call's arguments as ``__call__`` does, without launching; returns
        ``(prepared, tensors, device)``. Raises ``TensorError`` naming the tensor."""
        torch = _torch()
        plan = self.plan
        offsets = {p for p, _ in plan.offsets}
        specs, scalars, tensors, host_offsets = {}, {}, {}, {}
        device = None
        for name, v in kwargs.items():
            p = plan.param(name)
            if p is None:
                known = ", ".join(q.name for q in plan.params)
                raise TensorError(f"operator `{self.name}` has no parameter `{name}` (its parameters: {known})", name)
            if not isinstance(v, torch.Tensor):
                if p.is_scalar:
                    scalars[name] = v
                    continue
                raise TensorError(f"operator `{self.name}`: `{name}` must be a torch.Tensor ({p.describe()}), found {type(v).__name__}", name)
            if p.is_scalar:
                raise TensorError(f"operator `{self.name}`: `{name}` is a {p.dtype} scalar: pass a Python number, not a tensor", name)
            if p.role != "input" and v.requires_grad:
                raise TensorError(f"operator `{self.name}`: output `{name}` requires grad; the operator writes it in place", name)
            if name in offsets and v.device.type == "cpu":
                host_offsets[name] = v
            elif v.device.type != "cuda" and not _allow_cpu:
                raise TensorError(f"operator `{self.name}`: `{name}` is on {v.device}; every tensor must be on a CUDA device", name)
            elif device is None:
                device = v.device
            elif v.device != device:
                raise TensorError(f"operator `{self.name}`: `{name}` is on {v.device}, but earlier tensors are on {device}", name)
            if not v.is_contiguous():
                raise TensorError(f"operator `{self.name}`: `{name}` is not contiguous (strides {tuple(v.stride())} for shape {tuple(v.shape)}); the kernels read dense row-major tensors: pass `{name}.contiguous()`", name)
            if v.device.type == "cuda" and v.data_ptr() % 16:
                raise TensorError(f"operator `{self.name}`: `{name}`'s data pointer is not 16-byte aligned (a view at an odd offset); pass `{name}.clone()`", name)
            specs[name] = TensorSpec(dtype_name(v), tuple(int(d) for d in v.shape))
            tensors[name] = v
        offsets_values = {n: [int(x) for x in t.reshape(-1).tolist()] for n, t in host_offsets.items() if t.dtype == torch.int32}
        key = (tuple(sorted((n, sp.dtype, sp.shape) for n, sp in specs.items())),
               tuple(sorted((n, type(v).__name__, repr(v)) for n, v in scalars.items())),
               tuple(sorted((n, tuple(v)) for n, v in offsets_values.items())))
        prepared = self._prepared.get(key)
        if prepared is None:
            try:
                prepared = prepare(self.loaded, specs, scalars, offsets_values)
            except OperatorError as e:
                raise TensorError(str(e), e.param) from None
            if len(self._prepared) >= PREPARED_CACHE:
                self._prepared.pop(next(iter(self._prepared)))
            self._prepared[key] = prepared
        return prepared, tensors, device

    # ----- launch -----
    def __call__(self, **kwargs) -> dict:
        """Runs the operator; returns its outputs by name (tensors given for outputs are written in
        place and returned)."""
        torch = _torch()
        prepared, tensors, device = self.check(**kwargs)
        # The driver and the GPU's compute capability are checked once per device: repeating
        # them (a torch import, cuda.is_available, the capability query) cost every call.
        if device is None or device.index not in self._exact_on:
            why = driver.available()
            if why:
                raise RuntimeError(f"operator `{self.name}` cannot run here: {why}")
            if device is None:
                raise TensorError(f"operator `{self.name}`: no tensor argument on a CUDA device")
            self._check_target(device)
            self._exact_on[device.index] = self._exact
        self._exact = self._exact_on[device.index]
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device)
            for n, t in list(tensors.items()):
                if t.device.type == "cpu":  # a host offset table, checked above
                    tensors[n] = t.to(device, non_blocking=False)
            out = {}
            for b in prepared.outputs:
                out[b.name] = tensors[b.name] = torch.zeros(b.shape, dtype=getattr(torch, TORCH_DTYPES[b.dtype]), device=device)
            for n, dt, shape in [(b.name, b.dtype, b.shape) for b in prepared.zero_inputs] + list(prepared.buffers):
                tensors[n] = torch.zeros(shape, dtype=getattr(torch, TORCH_DTYPES[dt]), device=device)
            for p in self.plan.params:
                if p.role != "input" and p.name in kwargs:
                    out[p.name] = tensors[p.name]
            self.launch_prepared(prepared, tensors, device, stream.cuda_stream)
        return out

    def launch_prepared(self, prepared: Prepared, tensors: dict, device, stream_handle: int):
        """Launches every step of ``prepared`` with ``tensors`` (every operator value by name, on
        ``device``) on ``stream_handle``. The tensors must stay alive until the work is done (torch's
        allocator keeps stream order for tensors used on their allocation stream)."""
        index = device.index if device.index is not None else _torch().cuda.current_device()
        driver.ensure_context(index)
        ptrs = {n: t.data_ptr() for n, t in tensors.items()}
        for step in prepared.steps:
            fn = self._function(index, step.kernel)
            driver.launch(fn, pack_launch(step, ptrs), stream_handle)

    def _check_target(self, device):
        torch = _torch()
        major, minor = torch.cuda.get_device_capability(device)
        t = _parse_target(self.plan.target)
        if t is None or (t[2] and (t[0], t[1]) != (major, minor)) or (not t[2] and (t[0], t[1]) > (major, minor)):
            raise RuntimeError(f"artifact target {self.plan.target} cannot run on this GPU (compute capability {major}.{minor})")
        self._exact = t is not None and (t[0], t[1]) == (major, minor)

    def _function(self, index: int, kernel: str):
        key = (index, kernel)
        mod = self._modules.get(key)
        if mod is None:
            meta = self.loaded.kernels[kernel]
            use_cubin = self.code == "cubin" or (self.code == "auto" and meta.cubin_path is not None and getattr(self, "_exact", False))
            path = meta.cubin_path if use_cubin else meta.ptx_path
            if path is None:
                raise RuntimeError(f"kernel `{kernel}` has no cubin (metadata lists none)")
            with open(path, "rb") as f:
                image = f.read()
            mod = self._modules[key] = driver.Module(meta, image, is_ptx=not use_cubin)
        return mod.function
