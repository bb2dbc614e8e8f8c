"""Turns `kverify ref` fp64 inputs into a call of one of gdn.tile's operators (<member>_bwd, or
<member>_bwd_varlen when the file holds cu_seqlens).

    python3 scripts/gdn_case.py RAW.safetensors IN.safetensors ROUNDED.safetensors

Reads the generated fp64 inputs (fla names), rounds each to the dtype the operator takes
(q, k, v, beta, do: bf16; g, s0, dht: f32; scale: f32 = f32(K^-0.5); kverify's `dst` is
fla's `dht`), writes the operator's
inputs to IN, and the rounded values back as fp64 to ROUNDED — the file `kverify ref --inputs`
judges, so that input rounding is never charged. cu_seqlens (kverify's int64) is passed to the
operator as int32 and kept as int64 in ROUNDED. Prints the f32 scale (pass it as --scale).
"""

import sys

import numpy as np

import tilec_io

raw_path, in_path, rounded_path = sys.argv[1:4]
raw = tilec_io.read(raw_path)
dtypes = {"q": tilec_io.bfloat16, "k": tilec_io.bfloat16, "v": tilec_io.bfloat16, "beta": tilec_io.bfloat16, "do": tilec_io.bfloat16,
          "g": np.float32, "s0": np.float32, "dht": np.float32}
kverify_name = {"dht": "dst"}  # kverify calls fla's `dht` (the final state's seed) `dst`
inputs, rounded = {}, {}
for name, dt in dtypes.items():
    src = kverify_name.get(name, name)
    if src not in raw:
        continue  # a member without this input (LA: no g; LA, SSD: no beta)
    x = raw[src].astype(dt)  # round to nearest even
    inputs[name] = x
    rounded[src] = x.astype(np.float64)
if "cu_seqlens" in raw:
    inputs["cu_seqlens"] = raw["cu_seqlens"].astype(np.int32)
    rounded["cu_seqlens"] = raw["cu_seqlens"]
scale = np.float32(raw["q"].shape[-1] ** -0.5)
inputs["scale"] = scale
tilec_io.write(in_path, inputs)
tilec_io.write(rounded_path, rounded)
print(repr(float(scale)))
