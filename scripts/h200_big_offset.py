#!/usr/bin/env python3
"""Inputs and exact checks of the H200 runs past 2^31 elements (issue 9, item 8).

Two cases, each with one input of more than 2^31 elements (4 GiB of bf16), generated on the
device (too large to carry) from an integer pattern, so that the expected outputs are exact:

* ``offset``: ``tests/gpu/big_offset.tile`` on x [65,537, 32,769] (2,147,581,953 elements) with
  x[i, j] = (131 i + 7 j) mod 256; y must be x's last 32 rows and last 16 columns, bit for bit
  (the element path: scalar loads with a 64-bit ``row * C`` offset).
* ``gemm``: ``dsl-examples/gemm.tile`` with a [65,600, 32,768] (2,149,580,800 elements),
  a[i, k] = (7 i + 3 k) mod 3 - 1, b[k, n] = (5 k + n) mod 3 - 1, N = 16: c = a @ b is a sum of
  32,768 products in {-1, 0, 1}, exact in f32 on both sides (every partial sum is an integer
  below 2^24), so c must equal numpy's product bit for bit (the TMA path: a tensor map over a).

Usage: ``h200_big_offset.py make offset|gemm IN.safetensors`` writes the inputs;
``h200_big_offset.py check offset|gemm OUT.safetensors`` compares the output with the expected
values and exits 1 on any difference; with ``BIG_OFFSET_SMALL=1`` both run at small sizes (R, C =
100, 70; M, K = 300, 200), to check the pipeline on the interpreter. numpy only (bf16 written and read as its bit pattern).
"""
import json
import struct
import sys

import numpy as np

import os

R, C = 65_537, 32_769            # offset case: x [R, C]
M, K, N = 65_600, 32_768, 16     # gemm case: a [M, K], b [K, N]
if os.environ.get("BIG_OFFSET_SMALL"):  # the same pipeline at small sizes, for a check here
    R, C, M, K = 100, 70, 300, 200
ROWS = 1024                      # rows generated and written at a time


def bf16_bits(values):
    """Bit patterns of small integers (exact in bf16: the top half of their f32 bits)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def offset_rows(i0, i1):
    i = np.arange(i0, i1, dtype=np.int64)[:, None]
    j = np.arange(C, dtype=np.int64)[None, :]
    return (131 * i + 7 * j) % 256


def a_rows(i0, i1):
    i = np.arange(i0, i1, dtype=np.int64)[:, None]
    k = np.arange(K, dtype=np.int64)[None, :]
    return (7 * i + 3 * k) % 3 - 1


def b_matrix():
    k = np.arange(K, dtype=np.int64)[:, None]
    n = np.arange(N, dtype=np.int64)[None, :]
    return (5 * k + n) % 3 - 1


def write(path, tensors):
    """tensors: [(name, dtype, shape, producer)], producer yields byte chunks in order."""
    header, offset = {}, 0
    for name, dtype, shape, _ in tensors:
        size = int(np.prod(shape)) * {"BF16": 2, "F32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, produce in tensors:
            for chunk in produce():
                f.write(chunk.tobytes())


def read(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    v = h[name]
    s, e = v["data_offsets"]
    raw = data[s:e]
    if v["dtype"] == "BF16":
        a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(raw, np.float32)
    return a.reshape(v["shape"])


def make(case, path):
    if case == "offset":
        rows = lambda: (bf16_bits(offset_rows(i, min(i + ROWS, R))) for i in range(0, R, ROWS))
        write(path, [("x", "BF16", (R, C), rows)])
    else:
        rows = lambda: (bf16_bits(a_rows(i, min(i + ROWS, M))) for i in range(0, M, ROWS))
        write(path, [("a", "BF16", (M, K), rows), ("b", "BF16", (K, N), lambda: [bf16_bits(b_matrix())])])


def expected(case):
    if case == "offset":
        return offset_rows(R - 32, R)[:, C - 16:].astype(np.float32)
    b = b_matrix().astype(np.float32)
    return np.concatenate([a_rows(i, min(i + ROWS, M)).astype(np.float32) @ b for i in range(0, M, ROWS)])


def check(case, path):
    got = read(path, "y" if case == "offset" else "c")
    want = expected(case)
    if got.shape != want.shape:
        print(f"FAIL big_{case}: shape {got.shape}, expected {want.shape}")
        return 1
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    if len(bad):
        i = tuple(bad[0])
        print(f"FAIL big_{case}: {len(bad)} of {got.size} elements differ; first at {i}: {got[i]} != {want[i]}")
        return 1
    print(f"big_{case}: all {got.size} elements bitwise equal to the exact values")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("make", "check") or sys.argv[2] not in ("offset", "gemm"):
        sys.exit(__doc__)
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3]))
