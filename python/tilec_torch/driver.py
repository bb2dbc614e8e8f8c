"""The thin layer over NVIDIA's driver API (cuda-python: ``cuda.bindings.driver``, or the older
``cuda.cuda``): load a module, look up the entry, opt into large dynamic shared memory, encode
tensor maps, launch. Everything it is given was computed and checked by ``launch.py`` on the host.

Not exercised without a GPU; ``available()`` says why it cannot run.
"""

from __future__ import annotations

import ctypes
import struct
import threading

from .launch import DEFAULT_DYNAMIC_SMEM_LIMIT, TENSOR_MAP_BYTES, PackedLaunch

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class DriverError(RuntimeError):
    """A CUDA driver call failed, or the driver bindings are missing."""


def _import_driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
        return driver
    except ImportError:
        pass
    try:
        from cuda import cuda as driver  # older cuda-python
        return driver
    except ImportError:
        raise DriverError("NVIDIA's cuda-python is not installed (`pip install cuda-python`); tilec_torch launches kernels through its driver bindings") from None


def _check(result, op: str):
    """cuda-python returns (CUresult, *values); raise on an error, return the values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        drv = _import_driver()
        try:
            _, name = drv.cuGetErrorName(err)
            _, desc = drv.cuGetErrorString(err)
            msg = f"{name.decode()}: {desc.decode()}"
        except Exception:  # pragma: no cover
            msg = str(err)
        raise DriverError(f"CUDA {op} failed: {msg}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


class Module:
    """A kernel's code loaded into the current context, with its entry function."""

    def __init__(self, meta, image: bytes, is_ptx: bool):
        drv = _import_driver()
        if is_ptx and b"\0" in image:
            raise DriverError(f"{meta.ptx_path}: PTX contains a NUL byte")
        # The image by address (every cuda-python version takes an int); create_string_buffer
        # appends the NUL that PTX text needs. The driver copies the image during the call.
        buf = ctypes.create_string_buffer(image, len(image) + 1)
        self.module = _check(drv.cuModuleLoadData(ctypes.addressof(buf)), f"cuModuleLoadData ({meta.kernel})")
        self.function = _check(drv.cuModuleGetFunction(self.module, meta.kernel.encode()), f"cuModuleGetFunction ({meta.kernel})")
        if meta.dynamic_smem_bytes > DEFAULT_DYNAMIC_SMEM_LIMIT:
            # Above 48 KiB a kernel must opt in to a larger dynamic shared-memory carve-out.
            attr = drv.CUfunction_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
            _check(drv.cuFuncSetAttribute(self.function, attr, meta.dynamic_smem_bytes), f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) ({meta.kernel})")


def encode_tensor_map(enc) -> bytes:
    """``cuTensorMapEncodeTiled`` for a ``TiledEncoding``; the 128-byte map."""
    drv = _import_driver()
    a = enc.driver_args()
    u64 = getattr(drv, "cuuint64_t", int)
    u32 = getattr(drv, "cuuint32_t", int)
    tmap = _check(
        drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType(a["tensorDataType"]),
            a["tensorRank"],
            a["globalAddress"],
            [u64(x) for x in a["globalDim"]],
            [u64(x) for x in a["globalStrides"]],
            [u32(x) for x in a["boxDim"]],
            [u32(x) for x in a["elementStrides"]],
            drv.CUtensorMapInterleave(a["interleave"]),
            drv.CUtensorMapSwizzle(a["swizzle"]),
            drv.CUtensorMapL2promotion(a["l2Promotion"]),
            drv.CUtensorMapFloatOOBfill(a["oobFill"]),
        ),
        f"cuTensorMapEncodeTiled (shape {list(reversed(enc.global_dim))}, box {list(reversed(enc.box_dim))})",
    )
    try:
        data = struct.pack("<16Q", *(int(x) for x in tmap.opaque))
    except Exception:
        data = ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)
    assert len(data) == TENSOR_MAP_BYTES
    return data


class _ParamBlock:
    """The ``void**`` kernelParams array and the argument storage it points at (kept alive until
    the launch call returns; the driver copies parameters at launch)."""

    def __init__(self, params):
        self._bufs = []
        self.array = (ctypes.c_void_p * max(1, len(params)))()
        for i, data in enumerate(params):
            # 64-byte aligned storage (a CUtensorMap parameter needs 64; smaller ones need less).
            raw = ctypes.create_string_buffer(len(data) + 64)
            addr = ctypes.addressof(raw)
            off = (-addr) % 64
            ctypes.memmove(addr + off, data, len(data))
            self._bufs.append(raw)
            self.array[i] = addr + off

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


def launch(function, packed: PackedLaunch, stream_handle: int):
    """Encodes ``packed``'s tensor maps and launches on ``stream_handle`` (a ``cudaStream_t`` as an
    integer, e.g. ``torch.cuda.current_stream().cuda_stream``). Does not wait."""
    drv = _import_driver()
    params = list(packed.params)
    for idx, enc in packed.tensor_maps:
        params[idx] = bytes(TENSOR_MAP_BYTES) if enc is None else encode_tensor_map(enc)
    block = _ParamBlock(params)
    gx, gy, gz = packed.grid
    bx, by, bz = packed.block
    _check(
        drv.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, packed.dynamic_smem_bytes, drv.CUstream(stream_handle), block.address, 0),
        f"cuLaunchKernel ({packed.kernel})",
    )


_init_lock = threading.Lock()
_initialised = False


_contexts: dict = {}


def ensure_context(device_index: int):
    """cuInit once, then make the device's primary context — the one torch's runtime uses — current
    on this thread (retained once per device)."""
    global _initialised
    drv = _import_driver()
    with _init_lock:
        if not _initialised:
            _check(drv.cuInit(0), "cuInit")
            _initialised = True
        ctx = _contexts.get(device_index)
        if ctx is None:
            dev = _check(drv.cuDeviceGet(device_index), "cuDeviceGet")
            ctx = _contexts[device_index] = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def available() -> str:
    """An empty string when kernels can be launched here, else why not (no torch, no GPU, no
    cuda-python — in that order)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is present (torch.cuda.is_available() is False): operators can be loaded and their arguments checked, not launched"
    try:
        _import_driver()
    except DriverError as e:
        return str(e)
    return ""
