"""Read and write the safetensors files tilec, tilec-run and kverify exchange, bf16 included.

NumPy has no bfloat16 and ``safetensors.numpy`` can neither read nor write BF16, so this module
parses the format itself (an 8-byte little-endian header length, a JSON header, the raw bytes)
and represents bf16 with the ``bfloat16`` dtype of the well-kept ``ml_dtypes`` package (the
one JAX and TensorFlow use). No rounding happens on read or write: the bytes are the tensor.

    import tilec_io
    t = tilec_io.read("k1_out.safetensors")          # {name: numpy array}
    t["dh"].dtype                                     # bfloat16
    t["dh"].astype("float32")                         # exact widening
    tilec_io.write("in.safetensors", {"x": x.astype(tilec_io.bfloat16), "n": numpy.int32(7)})

Supported dtypes: BF16, F16, F32, F64, I32, I64, BOOL (rank 0 and up; a Python or NumPy scalar
is written as a rank-0 tensor, which is how tilec passes scalar parameters).
Errors: ``ValueError`` for a malformed file, an unknown dtype or a byte count that does not
match the shape; ``OSError`` from the file system.
"""

import json
import struct

import numpy as np
from ml_dtypes import bfloat16

__all__ = ["read", "write", "bfloat16"]

_DTYPES = {
    "BF16": np.dtype(bfloat16),
    "F16": np.dtype(np.float16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "I32": np.dtype(np.int32),
    "I64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}

# A header larger than this is refused rather than read (safetensors' own limit is 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


def read(path):
    """Returns ``{name: numpy.ndarray}`` (C-contiguous, little-endian) for every tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} does not fit the file ({len(raw)} bytes)")
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor `{name}` has dtype {spec['dtype']}, not one of {sorted(_DTYPES)}")
        shape = tuple(int(d) for d in spec["shape"])
        start, end = (int(o) for o in spec["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= start <= end <= len(data) or end - start != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor `{name}` of shape {list(shape)} and dtype {spec['dtype']} has {end - start} bytes")
        out[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(shape).copy()
    return out


def write(path, tensors, metadata=None):
    """Writes ``{name: array or scalar}`` (names sorted, as the Rust tools do)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name]))
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor `{name}` has dtype {a.dtype}, not one of {sorted(_DTYPES)}")
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
