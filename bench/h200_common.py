"""What the H200 bench scripts share: JSON-lines recording, tilec-run calls, the error metric.

Imported by bench/h200_gdn_bwd.py and bench/h200_gdn_fwd.py (run as `python3 bench/<script>.py`,
so this folder is on sys.path). Needs torch only for `rel` and `bits`.
"""
import importlib
import json
import os
import re
import subprocess

# The five members of the gated-linear-recurrence family, as gdn.tile names their operators
# (`<member>_bwd`, `<member>_fwd`); kverify's recurrence classes use the same names.
MEMBERS = ("gdn", "kda", "gla", "ssd", "la")
# The accuracy cases scripts/h200-prepare.sh writes (dense, varlen, GVA), by folder name.
ACCURACY_CASES = (*MEMBERS, *(f"{m}_varlen" for m in MEMBERS), "gdn_gva")


class Recorder:
    """Prints each measurement (a dict) as one JSON line and rewrites all of them, indented, to
    `path` after each, so a run cut short keeps what it measured."""

    def __init__(self, path):
        self.path, self.rows = path, []

    def __call__(self, r):
        self.rows.append(r)
        print(json.dumps(r), flush=True)
        with open(self.path, "w") as f:
            json.dump(self.rows, f, indent=1)


def run_tilec(tilec_run, plan, inputs, out, *extra):
    """`tilec-run PLAN --inputs INPUTS --out OUT --code cubin EXTRA...`: its stdout.

    Raises RuntimeError with the tails of stdout and stderr when it exits non-zero (4: no GPU)."""
    p = subprocess.run([tilec_run, plan, "--inputs", inputs, "--out", out, "--code", "cubin", *extra], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tilec-run failed ({p.returncode}): {p.stdout[-1500:]} {p.stderr[-1500:]}")
    return p.stdout


def rel(a, b):
    """max|a − b| / max|b| in float64 (the anchors' metric: fla and FlashQLA report it)."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def bits(t):
    """The raw bits of a 16- or 32-bit tensor, for bitwise comparison."""
    import torch
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def fla_op(module, name):
    """fla's `module.name` (e.g. `fla.ops.gated_delta_rule`, `chunk_gated_delta_rule`), with the
    backend dispatch off and the #640 Hopper guard of `fla.ops.common.chunk_o` lifted (as
    bench/h200_tilec_vs_anchors.py does). Raises ImportError when fla is not installed."""
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    chunk_o = importlib.import_module("fla.ops.common.chunk_o")
    chunk_o.TRITON_ABOVE_3_7_1 = True
    return getattr(importlib.import_module(module), name)


def parse_bench(txt):
    """`tilec-run --bench` output: ({kernel: median ms}, the median sum of kernel times in ms)."""
    kernels = {m.group(1): float(m.group(2)) for m in re.finditer(r"bench: (\S+)\s+median ([0-9.]+) ms", txt)}
    total = re.search(r"median sum of kernel times ([0-9.]+) ms", txt)
    if total is None:
        raise RuntimeError(f"no kernel-time sum in tilec-run's output: {txt[-500:]}")
    return kernels, float(total.group(1))


# Each member's gate (a scalar per token, one per key channel, or none) and whether it has β.
MEMBER_GATE = {"gdn": "scalar", "kda": "channel", "gla": "channel", "ssd": "scalar", "la": None}
MEMBER_BETA = {"gdn": True, "kda": True, "gla": False, "ssd": False, "la": False}


def gdn_inputs(rn, b, t, h, k, v, n, member="gdn"):
    """Random inputs of `member`'s operators in fla's layout from the normal sampler `rn(*shape)`
    (on the device), as fla's tests draw them: q, k [b, t, h, k] bf16 (k l2-normalised), v
    [b, t, h, v] bf16, g = logsigmoid f32 [b, t, h] (gdn, ssd) or [b, t, h, k] (kda, gla; la has
    none), beta = sigmoid bf16 [b, t, h] (gdn, kda), s0 f32 [n, h, k, v], do bf16 and dht f32
    (the loss seeds)."""
    import torch
    import torch.nn.functional as F
    x = {"q": rn(b, t, h, k).to(torch.bfloat16), "k": F.normalize(rn(b, t, h, k), dim=-1).to(torch.bfloat16), "v": rn(b, t, h, v).to(torch.bfloat16)}
    if MEMBER_GATE[member]:
        x["g"] = F.logsigmoid(rn(b, t, h, *((k,) if MEMBER_GATE[member] == "channel" else ()))).float()
    if MEMBER_BETA[member]:
        x["beta"] = torch.sigmoid(rn(b, t, h)).to(torch.bfloat16)
    return {**x, "s0": rn(n, h, k, v).float(), "do": rn(b, t, h, v).to(torch.bfloat16), "dht": rn(n, h, k, v).float()}


def k1_inputs(kind, B, T, H, Kd, V, C, dev, seed=1):
    """K#1's inputs as the speed bench draws them (fla's layout, bf16 q, k, w, do, dv; f32 dht):
    q, w, do, dv ~ 0.1 N(0, 1), k l2-normalised, and chunk-local cumulative log2 gates, one per
    token (`kind` "scalar": [B, T, H]) or per key channel ("channel": [B, T, H, K]), each step
    in (−0.05, 0]. Returns (q, k, w, do, dv, dht, g)."""
    import torch
    import torch.nn.functional as F

    NT = (T + C - 1) // C
    g_ = torch.Generator(device=dev).manual_seed(seed)
    q = (torch.randn(B, T, H, Kd, device=dev, generator=g_) * 0.1).to(torch.bfloat16)
    k = F.normalize(torch.randn(B, T, H, Kd, device=dev, generator=g_), dim=-1).to(torch.bfloat16)
    w = (torch.randn(B, T, H, Kd, device=dev, generator=g_) * 0.1).to(torch.bfloat16)
    do = (torch.randn(B, T, H, V, device=dev, generator=g_) * 0.1).to(torch.bfloat16)
    dv = (torch.randn(B, T, H, V, device=dev, generator=g_) * 0.1).to(torch.bfloat16)
    dht = torch.randn(B, H, Kd, V, device=dev, generator=g_) * 0.1
    shape = (B, NT, C, H) if kind == "scalar" else (B, NT, C, H, Kd)
    step = -torch.rand(*shape, device=dev, generator=g_) * 0.05
    g = step.cumsum(2).reshape(B, NT * C, *shape[3:])[:, :T].contiguous()
    return q, k, w, do, dv, dht, g


# fla 0.6.0's backward kernels (Triton names, matched by substring) against the tilec stage that
# computes the same thing (dsl-examples/gdn.tile's gdn_bwd launches), for a per-stage comparison
# in the same run (issue 9: "k2_wy_vjp beside fla's matching stage"). fla recomputes the forward
# stages inside its backward as gdn_bwd does.
FLA_STAGES = [
    ("chunk_gated_delta_rule_bwd_kernel_dhu", "k1_scan_scalar"),   # K#1: reverse state scan, dh
    ("prepare_wy_repr_bwd", "k2_wy_vjp"),                          # K#2: the WY representation's VJP
    ("chunk_bwd_kernel_dv_local", "dv_local"),
    ("chunk_bwd_kernel_dqkwg", "dqkwg"),
    ("recompute_w_u", "recompute_w_u"),
    ("chunk_gated_delta_rule_fwd_kernel_h", "state_fwd"),          # the chunk states, recomputed
    ("solve_tril", "solve_tril"),
    ("merge_16x16", "solve_tril"),
    ("chunk_scaled_dot_kkt", "kkt"),
]


def device_kernel_times(fn, reps=5):
    """Device time per call of every kernel `fn` launches ({name: ms}), from torch.profiler over
    `reps` calls after one warm call (kernels launched several times per call are summed)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in p.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0.0)
        if us > 0 and not e.key.startswith(("Memcpy", "Memset", "cudaDevice")):
            out[e.key] = out.get(e.key, 0.0) + us / reps / 1000.0
    return out


def stage_table(tilec_kernels, anchor_kernels):
    """Per tilec stage: (tilec ms, the anchor's matching kernels' ms, tilec / anchor), for the
    stages both sides have; `FLA_STAGES` names the match. Unmatched anchor kernels are listed
    under "other" so nothing is hidden."""
    rows, matched = {}, set()
    for sub, stage in FLA_STAGES:
        names = [n for n in anchor_kernels if sub in n and n not in matched]
        matched.update(names)
        # The stage under its own name or as its bf16 instance (gdn.tile's k1_scan_scalar_bf16).
        key = next((k for k in (stage, stage + "_bf16") if k in tilec_kernels), None)
        if key and names:
            r = rows.setdefault(key, {"tilec_ms": tilec_kernels[key], "anchor_ms": 0.0, "anchor_kernels": []})
            r["anchor_ms"] += sum(anchor_kernels[n] for n in names)
            r["anchor_kernels"] += names
    for r in rows.values():
        r["ratio_tilec_over_anchor"] = r["tilec_ms"] / r["anchor_ms"] if r["anchor_ms"] > 0 else None
    rows["other"] = {n: ms for n, ms in anchor_kernels.items() if n not in matched}
    return rows
