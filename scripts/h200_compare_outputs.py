# Compares two safetensors files tensor by tensor (bf16/f16/f32/i32, read by hand: numpy has no
# bf16): the number of bitwise-equal elements and the largest |difference| relative to the
# largest |value|. Usage: h200_compare_outputs.py NAME GPU.safetensors INTERP.safetensors [--exact]
# With --exact (cases whose arithmetic order the GPU shares with the interpreter) any element
# that is not bitwise equal prints FAIL and the exit status is 1.
import json, struct, sys
import numpy as np

def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]; raw = data[s:e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F16":
            a = np.frombuffer(raw, np.float16).astype(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": np.float32, "I32": np.int32}[v["dtype"]])
        out[k] = a.reshape(v["shape"])
    return out

name, gpu, ref = sys.argv[1], load(sys.argv[2]), load(sys.argv[3])
exact = "--exact" in sys.argv[4:]
failed = False
for t in sorted(ref):
    g, r = gpu[t].astype(np.float64), ref[t].astype(np.float64)
    u = {2: np.uint16, 4: np.uint32}[gpu[t].dtype.itemsize]
    eq = np.ascontiguousarray(gpu[t]).view(u) == np.ascontiguousarray(ref[t]).view(u)
    same = int(eq.sum())
    # The difference over the elements that differ (an inf or NaN both sides agree on is equal,
    # not a NaN difference); the scale over the finite reference values.
    fin = np.isfinite(r)
    scale = max(np.abs(r[fin]).max(), 1e-30) if fin.any() else 1.0
    err = np.abs(g[~eq] - r[~eq]).max() if (~eq).any() else 0.0
    print(f"{name} {t}{list(r.shape)}: bitwise equal {same}/{r.size}, max|gpu-interp| {err:.3e} (rel {err/scale:.3e}), non-finite gpu {int((~np.isfinite(g)).sum())} interp {int((~fin).sum())}")
    if exact and same != r.size:
        print(f"FAIL {name} {t}: {r.size - same} elements differ where the GPU must equal the interpreter bitwise")
        failed = True
sys.exit(1 if failed else 0)
