#!/usr/bin/env python3
"""kverify external-candidate worker (protocol kverify-candidate/1, docs/candidate-protocol.md).

Runs one NumPy (or PyTorch) candidate function per process:

    python3 kverify_worker.py --module my_kernel.py --function forward [--backward backward]

The candidate is ``forward(inputs, dims) -> array | list[array]`` where ``inputs`` is a list of
writable NumPy arrays (C order, except in CMP-03's layout probes: transposed, offset or stride-0
views of the same values, see ``apply_layout``) and ``dims`` a dict such as ``{"M": 64, "K": 64, "N": 64}``;
``backward(inputs, grads, dims) -> list[array]`` returns one gradient per input. Raise
``NotImplementedError`` to refuse an input (reported as a refusal, not a crash). PyTorch tensors
may be returned; their device is reported and they are copied to the host.

Pure Python + NumPy: the safetensors format is read and written here directly (8-byte
little-endian header length, JSON header, raw little-endian data).
"""
import argparse
import importlib.util
import json
import os
import struct
import sys
import traceback

import numpy as np

PROTOCOL = "kverify-candidate/1"
_DT_IN = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}
_DT_OUT = {
    np.dtype(np.float64): "F64",
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.int32): "I32",  # index outputs (argmax / argmin)
    np.dtype(np.int64): "I64",
}


def read_safetensors(path):
    """Return {name: writable ndarray}. BF16 is widened exactly to float32 (NumPy has no bf16)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = data[base + lo : base + hi]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape).copy()
        elif dt in _DT_IN:
            arr = np.frombuffer(raw, dtype=np.dtype(_DT_IN[dt]).newbyteorder("<")).reshape(shape).astype(_DT_IN[dt], copy=True)
        else:
            raise ValueError(f"unsupported dtype {dt} for tensor {name}")
        out[name] = arr
    return out


def write_safetensors(path, tensors):
    """Write [(name, ndarray)] with dtypes F64 / F32 / F16 / I32 / I64."""
    header = {}
    blobs = []
    offset = 0
    for name, arr in tensors:
        dt = _DT_OUT.get(arr.dtype)
        if dt is None:
            raise ValueError(f"output {name} has unsupported dtype {arr.dtype}")
        b = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_function(module_path, name):
    spec = importlib.util.spec_from_file_location("kverify_candidate", module_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {module_path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def to_host(o):
    """(ndarray, device string) for a NumPy array, an array-like with .device, or a torch tensor."""
    dev = str(getattr(o, "device", "cpu"))
    if hasattr(o, "detach"):  # torch.Tensor
        o = o.detach().cpu().numpy()
    return o, dev


LAYOUT_OFFSET = 3  # NaN elements before an "offset" view (kverify's LAYOUT_OFFSET)


def apply_layout(a, how):
    """The same values as ``a`` in the requested memory layout (protocol field ``layouts``)."""
    if how == "contiguous":
        return a
    if how == "transposed":  # last two axes column-major: a view of a contiguous transpose
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2) if a.ndim >= 2 else a
    if how == "offset":  # a dense view starting LAYOUT_OFFSET elements into a NaN-headed buffer
        buf = np.full(a.size + LAYOUT_OFFSET, np.nan, a.dtype)
        buf[LAYOUT_OFFSET:] = a.ravel()
        return buf[LAYOUT_OFFSET:].reshape(a.shape)
    if how == "expanded":  # stride 0 along the first axis of extent > 1 (values constant there)
        axes = [i for i, n in enumerate(a.shape) if n > 1]
        if not axes:
            return a
        ax = axes[0]
        src = np.take(a, [0], axis=ax).copy()
        strides = list(src.strides)
        strides[ax] = 0
        v = np.lib.stride_tricks.as_strided(src, shape=a.shape, strides=strides)
        if not np.array_equal(v, a, equal_nan=True):
            raise ValueError(f"expanded layout asked for values that vary along axis {ax}")
        return v
    raise ValueError(f"unknown layout {how}")


def handle(req, fwd, bwd):
    tensors = read_safetensors(req["inputs"])
    inputs = [tensors[f"in{i}"] for i in range(req["n_inputs"])]
    layouts = req.get("layouts")
    if layouts is not None:
        inputs = [apply_layout(a, how) for a, how in zip(inputs, layouts)]
    before = [a.tobytes() for a in inputs]
    dims = req["dims"]
    try:
        if req["pass"] == "forward":
            res = fwd(inputs, dims)
        elif req["pass"] == "backward":
            if bwd is None:
                return {"id": req["id"], "ok": False, "refused": "no backward"}
            g = read_safetensors(req["grads"])
            res = bwd(inputs, [g[f"grad{i}"] for i in range(req["n_grads"])], dims)
        else:
            return {"id": req["id"], "ok": False, "error": f"unknown pass {req['pass']}"}
    except NotImplementedError as e:
        return {"id": req["id"], "ok": False, "refused": str(e) or "not implemented"}
    except Exception:  # a candidate exception is the candidate's crash, reported with its traceback
        return {"id": req["id"], "ok": False, "error": traceback.format_exc(limit=3)}
    if not isinstance(res, (list, tuple)):
        res = [res]
    outs, descs, aliases = [], [], []
    for i, o in enumerate(res):
        arr, dev = to_host(o)
        for j, inp in enumerate(inputs):
            if isinstance(arr, np.ndarray) and np.shares_memory(arr, inp):
                aliases.append([i, j])
        outs.append((f"out{i}", np.asarray(arr)))
        descs.append({"name": f"out{i}", "device": dev})
    mutated = [j for j, (a, b) in enumerate(zip(inputs, before)) if a.tobytes() != b]
    write_safetensors(req["output"], outs)
    resp = {"id": req["id"], "ok": True, "outputs": descs, "mutated_inputs": mutated, "aliases": aliases}
    if layouts is not None:
        resp["layouts"] = layouts
    return resp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", required=True, help="Python file defining the candidate")
    ap.add_argument("--function", default="forward", help="forward function name")
    ap.add_argument("--backward", default=None, help="backward function name (optional)")
    a = ap.parse_args()
    fwd = load_function(a.module, a.function)
    bwd = load_function(a.module, a.backward) if a.backward else None
    out = sys.stdout
    out.write(json.dumps({"protocol": PROTOCOL, "pid": os.getpid(), "numpy": np.__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if req.get("pass") == "shutdown":
            break
        try:
            resp = handle(req, fwd, bwd)
        except Exception:  # harness-side failure (bad file): report, keep serving
            resp = {"id": req.get("id", 0), "ok": False, "error": "worker: " + traceback.format_exc(limit=2)}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
