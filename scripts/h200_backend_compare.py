# Compares the H200 outputs with the fp64 references and the CPU interpreter.
import json, struct, numpy as np
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]; raw = data[s:e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": np.float32, "I32": np.int32}[v["dtype"]])
        out[k] = a.reshape(v["shape"]).astype(np.float64)
    return out
def rep(name, x, ref):
    err = np.abs(x - ref); scale = np.abs(ref).max()
    return f"{name}: max|err| {err.max():.3e}, max|ref| {scale:.3e}, rel {err.max()/scale:.3e}"
gref = np.load("gemm_ref.npy"); gi = load("gemm_interp.safetensors")["c"]
for code in ["cubin", "ptx"]:
    g = load(f"gemm_gpu_{code}.safetensors")["c"]
    print(f"gemm [{code}]", rep("vs fp64", g, gref), "| bitwise == interp:", np.array_equal(g, gi))
kref = np.load("k1_ref.npz"); ki = load("k1_interp.safetensors")
for code in ["cubin", "ptx"]:
    k = load(f"k1_gpu_{code}.safetensors")
    for t in ["dh", "dh0", "dv2"]:
        print(f"k1 [{code}] {t}", rep("vs fp64", k[t], kref[t]), "|", rep("vs interp", k[t], ki[t]), "| bitwise == interp:", np.array_equal(k[t], ki[t]))
print("interp vs fp64:", " ; ".join(rep(t, ki[t], kref[t]) for t in ["dh", "dh0", "dv2"]))
