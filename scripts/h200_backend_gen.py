# Inputs for the H200 check of gemm and k1_scan_scalar (sm_90a), written as safetensors by hand
# (numpy has no bf16): bf16 values are chosen exactly representable and stored as the high
# halves of their f32 bit patterns.
import json, struct, sys
import numpy as np
rng = np.random.default_rng(7)

def bf16_bits(x):
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    assert np.all((b & 0xFFFF) == 0), "value not exact in bf16"
    return (b >> 16).astype(np.uint16)

def save(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw); off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]

def q8(shape, lo=-2, hi=2):  # multiples of 1/8, exact in bf16
    return (rng.integers(lo * 8, hi * 8 + 1, size=shape) / 8).astype(np.float32)

def rbf16(x):  # round-to-nearest-even to bf16, returned as f32
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)

# GEMM with partial tiles on both edges: M=200, K=96, N=160 (tiles 128 x 128 x 64).
M, K, N = 200, 96, 160
a, b = q8((M, K)), q8((K, N))
save("gemm_in.safetensors", {"a": ("BF16", bf16_bits(a)), "b": ("BF16", bf16_bits(b))})
np.save("gemm_ref.npy", a.astype(np.float64) @ b.astype(np.float64))

# K#1 (scalar gate): B=1, T=100 (partial last chunk), H=2, K=128, V=96 (partial V tile), C=64.
B, T, H, Kd, V, C = 1, 100, 2, 128, 96, 64
NT = (T + C - 1) // C
qa, ka, wa = (rbf16(rng.standard_normal((B, T, H, Kd)) * 0.1) for _ in range(3))
do, dv = (rbf16(rng.standard_normal((B, T, H, V)) * 0.1) for _ in range(2))
dht = rng.standard_normal((B, H, Kd, V)).astype(np.float32) * 0.1
g = np.zeros((B, T, H), np.float32)
for n in range(NT):
    s, e = n * C, min(n * C + C, T)
    g[:, s:e, :] = np.cumsum(-rng.uniform(0.0, 0.05, size=(B, e - s, H)), axis=1)
scale = np.float32(Kd ** -0.5)
save("k1_in.safetensors", {"q": ("BF16", bf16_bits(qa)), "k": ("BF16", bf16_bits(ka)), "w": ("BF16", bf16_bits(wa)),
    "g": ("F32", g), "dout": ("BF16", bf16_bits(do)), "dv": ("BF16", bf16_bits(dv)), "dht": ("F32", dht),
    "scale": ("F32", np.array(scale, np.float32).reshape(()))})
# fp64 reference of the stage (gdn-math.md §4 B3), no intermediate rounding.
f = lambda x: x.astype(np.float64)
dh = np.zeros((B, NT, H, Kd, V)); dv2 = np.zeros((B, T, H, V)); dh0 = np.zeros((B, H, Kd, V))
for bb in range(B):
    for hh in range(H):
        d = f(dht[bb, hh])
        for n in reversed(range(NT)):
            s, e = n * C, min(n * C + C, T)
            dh[bb, n, hh] = d
            gl = f(g[bb, e - 1, hh]); gc = f(g[bb, s:e, hh])
            ks = f(ka[bb, s:e, hh]) * np.exp2(gl - gc)[:, None]
            dvn = ks @ d + f(dv[bb, s:e, hh])
            dv2[bb, s:e, hh] = dvn
            qs = f(qa[bb, s:e, hh]) * (np.exp2(gc) * f(scale))[:, None]
            d = d * np.exp2(gl) + qs.T @ f(do[bb, s:e, hh]) - f(wa[bb, s:e, hh]).T @ dvn
        dh0[bb, hh] = d
np.savez("k1_ref.npz", dh=dh, dv2=dv2, dh0=dh0)
print("ok", M, K, N, "k1 NT", NT)
