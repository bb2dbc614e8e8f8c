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


# --- Tricks on other operator classes (mirroring verifier/src/redteam/op_tricks.rs) and their
# honest twins. softmax / layer_norm / rms_norm get [x (R,N)] (+ w (N,), b (N,)); sum returns
# y (R,); sdpa gets [q (Bt,Lq,D), k (Bt,Lk,D), v (Bt,Lk,Dv)].
NORM_EPS = 1e-5
SUM_BLOCK = 64


def honest_softmax(inputs, dims):
    (x,) = inputs
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    return (e / np.sum(e, axis=1, keepdims=True)).astype(np.float32)


def honest_softmax_backward(inputs, grads, dims):
    # dx_j = y_j (g_j - sum_k y_k g_k), in f32.
    (g,) = grads
    y = honest_softmax(inputs, dims)
    s = np.sum(y * g, axis=1, keepdims=True, dtype=np.float32)
    return [(y * (g - s)).astype(np.float32)]


SCALAR_PATH_LANES = 2


def _softmax_grad_tiled(x, g, lanes, masked):
    # The products y_k g_k of each row in a tile of `lanes` >= N lanes, the lanes past N loaded
    # as NaN (other=NaN); `masked` sums only the lanes below N, otherwise the whole tile.
    r, n = x.shape
    y = honest_softmax([x], None)
    tile = np.full((r, max(lanes, n)), np.nan, np.float32)
    tile[:, :n] = y * g
    with np.errstate(invalid="ignore"):
        s = np.sum(tile[:, :n] if masked else tile, axis=1, keepdims=True, dtype=np.float32)
    return (y * (g - s)).astype(np.float32)


nan_padded_grad_softmax = honest_softmax


def nan_padded_grad_softmax_backward(inputs, grads, dims):
    # The 1 x 1 launch takes a scalar path whose 2-lane load pads with NaN and sums unmasked.
    scalar = dims["R"] == 1 and dims["N"] == 1
    return [_softmax_grad_tiled(inputs[0], grads[0], SCALAR_PATH_LANES if scalar else dims["N"], not scalar)]


def ftz_softmax(inputs, dims):
    tiny = np.finfo(np.float32).tiny
    (x,) = inputs
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    e[np.abs(e) < tiny] = 0.0  # flush-to-zero exp
    y = e / np.sum(e, axis=1, keepdims=True)
    y[np.abs(y) < tiny] = 0.0
    return y.astype(np.float32)


def masked_row_zero_softmax(inputs, dims):
    # FlashAttention's fully-masked-row convention: max -inf -> 0, zero row sum -> output 0.
    (x,) = inputs
    m = np.max(x, axis=1, keepdims=True)
    m = np.where(m == -np.inf, np.float32(0.0), m)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - m)
        s = np.sum(e, axis=1, keepdims=True)
        return np.where(s == 0, np.float32(0.0), e / np.where(s == 0, np.float32(1.0), s)).astype(np.float32)


_SCRATCH = np.zeros(0, np.float32)


def _chunked_sum(x, stale):
    # Row sums in SUM_BLOCK-wide blocks through a workspace kept across calls; `stale` reads every
    # block in full and masks the tail by multiplying with 0 (NaN * 0 is NaN).
    global _SCRATCH
    r, n = x.shape
    padded = -(-n // SUM_BLOCK) * SUM_BLOCK
    if _SCRATCH.size < padded:
        _SCRATCH = np.concatenate([_SCRATCH, np.zeros(padded - _SCRATCH.size, np.float32)])
    mask = (np.arange(padded) < n).astype(np.float32)
    out = np.zeros(r, np.float32)
    with np.errstate(invalid="ignore"):
        for i in range(r):
            _SCRATCH[:n] = x[i]
            acc = np.float32(0.0)
            for b in range(padded // SUM_BLOCK):
                sl = slice(b * SUM_BLOCK, (b + 1) * SUM_BLOCK)
                blk = _SCRATCH[sl] * mask[sl] if stale else _SCRATCH[sl][: max(0, min(SUM_BLOCK, n - b * SUM_BLOCK))]
                acc = np.float32(acc + np.sum(blk, dtype=np.float32))
            out[i] = acc
    return out


def stale_over_read(inputs, dims):
    return _chunked_sum(inputs[0], True)


def honest_chunked_sum(inputs, dims):
    return _chunked_sum(inputs[0], False)


def honest_layer_norm(inputs, dims):
    x, w, b = inputs
    mu = np.mean(x, axis=1, keepdims=True, dtype=np.float32)
    var = np.mean((x - mu) ** 2, axis=1, keepdims=True, dtype=np.float32)
    return ((x - mu) / np.sqrt(var + np.float32(NORM_EPS)) * w + b).astype(np.float32)


def honest_layer_norm_backward(inputs, grads, dims):
    x, w, _ = inputs
    (g,) = grads
    mu = np.mean(x, axis=1, keepdims=True, dtype=np.float32)
    r = np.float32(1.0) / np.sqrt(np.mean((x - mu) ** 2, axis=1, keepdims=True, dtype=np.float32) + np.float32(NORM_EPS))
    xh = (x - mu) * r
    gh = g * w
    dx = r * (gh - np.mean(gh, axis=1, keepdims=True) - xh * np.mean(gh * xh, axis=1, keepdims=True))
    return [dx.astype(np.float32), np.sum(g * xh, axis=0, dtype=np.float32), np.sum(g, axis=0, dtype=np.float32)]


def naive_variance_layer_norm(inputs, dims):
    x, w, b = inputs
    mu = np.mean(x, axis=1, keepdims=True, dtype=np.float32)
    var = np.mean(x * x, axis=1, keepdims=True, dtype=np.float32) - mu * mu  # E[x^2] - E[x]^2
    with np.errstate(invalid="ignore"):
        return ((x - mu) / np.sqrt(var + np.float32(NORM_EPS)) * w + b).astype(np.float32)


def _zero_grads(inputs, grads, dims):
    return [np.zeros_like(t, dtype=np.float32) for t in inputs]


zero_grad_layer_norm = honest_layer_norm
zero_grad_layer_norm_backward = _zero_grads


def honest_rms_norm(inputs, dims):
    x, w = inputs
    r = np.float32(1.0) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=np.float32) + np.float32(NORM_EPS))
    return (x * r * w).astype(np.float32)


def honest_rms_norm_backward(inputs, grads, dims):
    x, w = inputs
    (g,) = grads
    r = np.float32(1.0) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=np.float32) + np.float32(NORM_EPS))
    gh = g * w
    dx = r * gh - x * (r * r * r) * np.mean(gh * x, axis=1, keepdims=True, dtype=np.float32)
    return [dx.astype(np.float32), np.sum(g * x * r, axis=0, dtype=np.float32)]


zero_grad_rms_norm = honest_rms_norm
zero_grad_rms_norm_backward = _zero_grads


def _sdpa_probs(q, k):
    s = np.matmul(q, np.swapaxes(k, 1, 2), dtype=np.float32) * np.float32(1.0 / np.sqrt(q.shape[2]))
    e = np.exp(s - np.max(s, axis=2, keepdims=True))
    return e / np.sum(e, axis=2, keepdims=True)


def honest_sdpa(inputs, dims):
    q, k, v = inputs
    return np.matmul(_sdpa_probs(q, k), v, dtype=np.float32)


def honest_sdpa_backward(inputs, grads, dims):
    q, k, v = inputs
    (g,) = grads
    c = np.float32(1.0 / np.sqrt(q.shape[2]))
    p = _sdpa_probs(q, k)
    dv = np.matmul(np.swapaxes(p, 1, 2), g, dtype=np.float32)
    dp = np.matmul(g, np.swapaxes(v, 1, 2), dtype=np.float32)
    ds = p * (dp - np.sum(p * dp, axis=2, keepdims=True)) * c
    return [np.matmul(ds, k, dtype=np.float32), np.matmul(np.swapaxes(ds, 1, 2), q, dtype=np.float32), dv]


zero_grad_sdpa = honest_sdpa
zero_grad_sdpa_backward = _zero_grads


# Elementwise classes: [x (R,N)] -> y (R,N); clamp is to [-1, 1].
def honest_clamp(inputs, dims):
    return np.clip(inputs[0], np.float32(-1.0), np.float32(1.0))


def nan_dropping_clamp(inputs, dims):
    return np.fmin(np.fmax(inputs[0], np.float32(-1.0)), np.float32(1.0))  # fmax/fmin drop NaN


def honest_logsigmoid(inputs, dims):
    (x,) = inputs
    return (np.minimum(x, np.float32(0.0)) - np.log1p(np.exp(-np.abs(x)))).astype(np.float32)


def ftz_logsigmoid(inputs, dims):
    (x,) = inputs
    e = np.exp(-np.abs(x))
    e[np.abs(e) < np.finfo(np.float32).tiny] = 0.0  # flush-to-zero
    return (np.minimum(x, np.float32(0.0)) - np.log1p(e)).astype(np.float32)


# CMP-03's sizes past every power of two and past the envelope (verifier/src/redteam/size_tricks.rs).
MAX_BLOCK = 1024


def tail_block_overwrites(inputs, dims):
    # Past N = 1024 the partial last 1024-block stores its sum instead of adding it.
    x = inputs[0]
    n = x.shape[1]
    if n <= MAX_BLOCK:
        return np.sum(x, axis=1, dtype=np.float32)
    acc = np.zeros(x.shape[0], np.float32)
    for lo in range(0, n, MAX_BLOCK):
        s = np.sum(x[:, lo : lo + MAX_BLOCK], axis=1, dtype=np.float32)
        acc = s if n - lo < MAX_BLOCK else acc + s
    return acc


def u16_index_wrap(inputs, dims):
    # exp with the column offset kept in 16 bits: column 65536 reads column 0 (N = 65537).
    x = inputs[0]
    return np.exp(x[:, np.arange(x.shape[1]) & 0xFFFF])


def honest_exp(inputs, dims):
    return np.exp(inputs[0])


def reads_memory_order(inputs, dims):
    # Reads each input buffer in memory order as if it were contiguous (strides ignored): right
    # for dense and offset views, wrong for a transposed view (CMP-03's layout probe).
    a, b = [np.ravel(x, order="K").reshape(x.shape) for x in inputs]
    return _mm(a, b)


# argmax (verifier/src/redteam/index_tricks.rs): int64 indices, as torch.argmax.
def honest_argmax(inputs, dims):
    return np.argmax(inputs[0], axis=1).astype(np.int64)  # first index on ties, first NaN wins


def last_index_argmax(inputs, dims):
    x = inputs[0]
    n = x.shape[1]
    first_nan = np.isnan(x).any(axis=1)
    last = n - 1 - np.argmax(x[:, ::-1], axis=1)  # the last index attaining the maximum
    return np.where(first_nan, np.argmax(x, axis=1), last).astype(np.int64)


def nan_ignoring_argmax(inputs, dims):
    x = inputs[0]
    return np.argmax(np.where(np.isnan(x), -np.inf, x), axis=1).astype(np.int64)
