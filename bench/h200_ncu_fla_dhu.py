"""Nsight Compute profile of fla 0.6.0's K#1 (chunk_gated_delta_rule_bwd_dhu), beside tilec's.

The anchor of issue 9's K#1 criterion, profiled the way bench/h200_ncu.py profiles tilec's
kernels, so that the two kernels' registers, shared memory, CTAs per SM, memory traffic and stall
reasons can be read side by side. The inputs are the speed bench's (bench/h200_tilec_vs_anchors.py,
K#1 part: B=8 H=16 K=V=128 C=64, scalar gate). fla's first call JIT-compiles and autotunes
outside the profiled range; only the call after `cudaProfilerStart` is profiled (ncu
`--profile-from-start off`). Prints the autotuner's chosen configuration.

Usage (the device, fla's wheels on PYTHONPATH):
  ncu --set full --clock-control none --profile-from-start off -f -o OUT/fla_dhu \
      python3 bench/h200_ncu_fla_dhu.py [--T 2048] [--kind scalar|channel]
"""
import argparse
import os

ap = argparse.ArgumentParser()
ap.add_argument("--T", type=int, default=2048)
ap.add_argument("--kind", default="scalar", choices=["scalar", "channel"])
args = ap.parse_args()

import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from h200_common import k1_inputs  # noqa: E402

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
import fla.ops.common.chunk_o as _co  # noqa: E402

_co.TRITON_ABOVE_3_7_1 = True  # the #640 Hopper guard, as in the speed bench
import fla.ops.common.chunk_delta_h as cdh  # noqa: E402

dev = "cuda"
B, T, H, Kd, V, C = 8, args.T, 16, 128, 128, 64
q, k, w, do, dv, dht, g = k1_inputs(args.kind, B, T, H, Kd, V, C, dev)
h0 = torch.zeros(B, H, Kd, V, device=dev)
gates = {"g": g} if args.kind == "scalar" else {"gk": g}
call = lambda: cdh.chunk_gated_delta_rule_bwd_dhu(q=q, k=k, w=w, do=do, dv=dv, **gates, h0=h0, dht=dht,
                                                  scale=Kd ** -0.5, chunk_size=C)
for _ in range(3):  # JIT, autotune, then warm
    call()
torch.cuda.synchronize()
for name in dir(cdh):
    obj, seen = getattr(cdh, name), 0
    while obj is not None and seen < 4:
        cfg = getattr(obj, "best_config", None)
        if cfg is not None:
            print(f"fla {name}: best_config {cfg}", flush=True)
            break
        obj, seen = getattr(obj, "fn", None), seen + 1
torch.cuda.cudart().cudaProfilerStart()
call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
