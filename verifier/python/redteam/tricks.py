"""The red team as NumPy candidates (protocol kverify-candidate/1).

Each function is ``forward(inputs, dims)``; matmul tricks get inputs [A (M,K), B (K,N)] in
float32 and must return C (M,N); the max tricks get [x (R,N)] and return y (R,).
Each mirrors the in-process trick of the same name in verifier/src/redteam/tricks.rs.
"""
import os
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = {"M": 64, "K": 64, "N": 64}
TILE = 16


def _mm(a, b):
    return np.matmul(a, b, dtype=np.float32)


def honest(inputs, dims):
    a, b = inputs
    return _mm(a, b)


def honest_backward(inputs, grads, dims):
    a, b = inputs
    (g,) = grads
    return [_mm(g, b.T), _mm(a.T, g)]


def honest_max(inputs, dims):
    return np.max(inputs[0], axis=1)


def identity(inputs, dims):
    return inputs[0].copy()


def zeros(inputs, dims):
    return np.zeros((dims["M"], dims["N"]), np.float32)


_CACHE = {}


def cache_first(inputs, dims):
    key = (dims["M"], dims["N"])
    if key not in _CACHE:
        _CACHE[key] = honest(inputs, dims)
    return _CACHE[key].copy()


def hardcoded_seed(inputs, dims):
    # The answer a single-seed test sees, pasted in (written by `kverify redteam --write-hardcoded`).
    if dims != NATIVE:
        raise NotImplementedError("only the benchmark shape")
    import kverify_worker as w  # noqa: E402  (the worker is on sys.path as the running script)

    return w.read_safetensors(os.path.join(HERE, "hardcoded_answer.safetensors"))["answer"]


def fp16_accum(inputs, dims):
    a, b = inputs
    acc = np.zeros((dims["M"], dims["N"]), np.float16)
    for p in range(dims["K"]):
        acc = (acc.astype(np.float32) + np.outer(a[:, p], b[p, :])).astype(np.float16)
    return acc.astype(np.float32)


def _round_bits(x, drop):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    half = (1 << (drop - 1)) - 1
    lsb = (u >> drop) & 1
    r = ((u + half + lsb) >> drop) << drop
    out = r.astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def bf16_compute(inputs, dims):
    a, b = inputs
    return _mm(_round_bits(a, 16), _round_bits(b, 16))


def tf32(inputs, dims):
    a, b = inputs
    return _mm(_round_bits(a, 13), _round_bits(b, 13))


def nondeterministic(inputs, dims):
    a, b = inputs
    k = dims["K"]
    r = int.from_bytes(os.urandom(4), "little") % max(k, 1)
    order = np.roll(np.arange(k), r)
    out = np.zeros((dims["M"], dims["N"]), np.float32)
    for p in order:  # order of the sum depends on "which block finished first"
        out += np.outer(a[:, p], b[p, :])
    return out


def nan_to_zero(inputs, dims):
    c = honest(inputs, dims)
    c[np.isnan(c)] = 0.0
    return c


def inf_clamp(inputs, dims):
    f = np.finfo(np.float32).max
    return np.clip(honest(inputs, dims), -f, f)


def nan_dropping_max(inputs, dims):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.nanmax(inputs[0], axis=1)


def ftz(inputs, dims):
    tiny = np.finfo(np.float32).tiny

    def z(x):
        x = x.copy()
        x[np.abs(x) < tiny] = 0.0
        return x

    a, b = inputs
    return z(_mm(z(a), z(b)))


def native_shape_only(inputs, dims):
    if dims != NATIVE:
        raise NotImplementedError(f"kernel specialised for {NATIVE}")
    return honest(inputs, dims)


def drops_partial_tile(inputs, dims):
    c = honest(inputs, dims)
    covered = (dims["N"] // TILE) * TILE
    c[:, covered:] = 0.0
    return c


def mutates_input(inputs, dims):
    c = honest(inputs, dims)
    inputs[0][...] = 0.0  # uses A as scratch
    return c


def aliases_input(inputs, dims):
    a, _ = inputs
    c = honest(inputs, dims)
    if a.shape == c.shape:
        a[...] = c  # writes C over A and returns A
        return a
    return c


class OnDevice(np.ndarray):
    """An array that says it lives on a GPU (what a torch kernel returning cuda tensors looks like)."""

    @property
    def device(self):
        return "cuda:0"


def wrong_device(inputs, dims):
    return honest(inputs, dims).view(OnDevice)


def wrong_dtype(inputs, dims):
    a, b = inputs
    return a.astype(np.float64) @ b.astype(np.float64)


def hangs(inputs, dims):
    if dims["M"] == 1:
        time.sleep(3600)  # waits for a tile that never arrives
    return honest(inputs, dims)


def crashes(inputs, dims):
    if dims["N"] % 2 == 1:
        os.abort()  # SIGABRT, like a device-side assert
    return honest(inputs, dims)


def near_miss_scale(inputs, dims):
    return (honest(inputs, dims) * np.float32(1.01)).astype(np.float32)


def saturating(inputs, dims):
    a, b = inputs
    prod = np.clip(a[:, :, None] * b[None, :, :], -65504.0, 65504.0)
    out = np.zeros((dims["M"], dims["N"]), np.float32)
    for p in range(dims["K"]):
        out += prod[:, p, :]
    return out


def wrong_grad(inputs, dims):
    return honest(inputs, dims)


def wrong_grad_backward(inputs, grads, dims):
    da, db = honest_backward(inputs, grads, dims)
    return [da, (0.5 * db).astype(np.float32)]


GRAD_BLOCK = 16


def _blocked_grad_a(g, b, order):
    # dA = dC B^T with the N reduction in GRAD_BLOCK-wide blocks, block partial sums added to an
    # f32 accumulator in `order`: a split-K backward adding its blocks in completion order.
    n = g.shape[1]
    acc = np.zeros((g.shape[0], b.shape[0]), np.float32)
    for blk in order:
        sl = slice(blk * GRAD_BLOCK, min((blk + 1) * GRAD_BLOCK, n))
        acc += _mm(g[:, sl], b[:, sl].T)
    return acc


def nondeterministic_grad(inputs, dims):
    return honest(inputs, dims)


def nondeterministic_grad_backward(inputs, grads, dims):
    _, b = inputs
    (g,) = grads
    _, db = honest_backward(inputs, grads, dims)
    nb = max(-(-dims["N"] // GRAD_BLOCK), 1)
    # Completion order of the blocks: a fresh OS-seeded permutation per call (the in-process twin
    # rotates by a call counter; a permutation makes a repeat over 6 runs vanishingly unlikely).
    order = np.random.default_rng().permutation(nb)
    return [_blocked_grad_a(g, b, order), db]
