"""Nsight Compute profile of a tilec plan's kernels on the H200: what each kernel waits on.

Makes dense GDN inputs (B=8 T=2048 H=16 K=V=128 by default, fla's layout, the speed bench's
sampler `h200_common.gdn_inputs`), runs `tilec-run PLAN` once under `ncu --set full
--clock-control none` (device README: leave the clocks alone), profiling the first N launches
whose kernel matches --kernels, N the number of names in --kernels (each of the default kernels
launches once per gdn_bwd plan: one launch each), and writes into --out:
  <plan>.ncu-rep           the report (open it with Nsight Compute)
  <plan>.details.txt       every section of every profiled kernel as text
  <plan>.<kernel>.sass.csv per-SASS-instruction stall samples (`--page source --print-source sass`)
  <plan>.summary.txt       per kernel: duration, SM and memory throughput, achieved occupancy,
                           registers, shared memory, and the warp-state stall reasons (cycles per
                           issued instruction), largest first

A kda_* or gla_* plan gets a per-channel gate g [B, T, H, K] instead (name its kernels with
--kernels: the defaults are the scalar-gate stages', e.g. 'kkt_channel|dqkwg_channel').

gemm (issue 9's Nsight bullet): `--plan ART/gemm.sm_90a.meta.json --kernels gemm [--mnk 4096]`
profiles the one kernel on bf16 a [M, K], b [K, N] (N(0, 1)), M = N = K = --mnk.

Usage: python3 bench/h200_ncu.py --tilec-run RUN --plan ART/gdn_bwd.sm_90a.plan.json --out DIR
       [--kernels 'dqkwg_bf16|k2_wy_vjp|solve_tril'] [--T 2048]
"""
import argparse
import csv
import io
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from h200_common import gdn_inputs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--tilec-run", required=True)
ap.add_argument("--plan", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--kernels", default="dqkwg_bf16|k2_wy_vjp|solve_tril|state_fwd|k1_scan_scalar_bf16|combine")  # gdn_bwd launches the bf16-dU instances
ap.add_argument("--B", type=int, default=8)
ap.add_argument("--T", type=int, default=2048)
ap.add_argument("--H", type=int, default=16)
ap.add_argument("--ncu", default="ncu")
ap.add_argument("--mnk", type=int, default=4096, help="gemm: M = N = K")
args = ap.parse_args()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

os.makedirs(args.out, exist_ok=True)
g = torch.Generator(device="cuda").manual_seed(3)
if os.path.basename(args.plan).startswith("gemm."):
    n = args.mnk
    x = {"a": torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16), "b": torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)}
else:
    x = gdn_inputs(lambda *s: torch.randn(*s, device="cuda", generator=g), args.B, args.T, args.H, 128, 128, args.B)
if os.path.basename(args.plan).startswith(("kda", "gla")):
    # The per-channel members take a gate per key channel, g [B, T, H, K].
    x["g"] = torch.nn.functional.logsigmoid(torch.randn(args.B, args.T, args.H, 128, device="cuda", generator=g)).float()
fin = "/tmp/ncu_in.safetensors"
save_file({**{k: v.cpu().contiguous() for k, v in x.items()}, **({} if "a" in x else {"scale": torch.tensor(128 ** -0.5)})}, fin)
name = os.path.basename(args.plan).split(".")[0]
rep = os.path.join(args.out, f"{name}.ncu-rep")
cmd = [args.ncu, "--set", "full", "--clock-control", "none", "--import-source", "no", "-f", "-o", rep[:-len(".ncu-rep")],
       "--kernel-name", f"regex:^({args.kernels})$", "--launch-count", str(len(args.kernels.split("|"))),
       args.tilec_run, args.plan, "--inputs", fin, "--out", "/tmp/ncu_out.safetensors", "--code", "cubin"]
print(" ".join(cmd), flush=True)
p = subprocess.run(cmd, capture_output=True, text=True)
print(p.stdout[-3000:], p.stderr[-3000:], flush=True)
if p.returncode != 0 or not os.path.exists(rep):
    raise SystemExit(f"ncu failed ({p.returncode})")


def ncu_import(*extra):
    """`ncu --import REPORT EXTRA...`: its stdout; exits with ncu's stderr when ncu fails."""
    q = subprocess.run([args.ncu, "--import", rep, *extra], capture_output=True, text=True)
    if q.returncode != 0:
        raise SystemExit(f"ncu --import {' '.join(extra)} failed ({q.returncode}): {q.stderr[-2000:]}")
    return q.stdout


details = ncu_import("--page", "details", "--print-details", "all")
open(os.path.join(args.out, f"{name}.details.txt"), "w").write(details)
raw = ncu_import("--page", "raw", "--csv")
rows = list(csv.reader(io.StringIO(raw)))
head, units, data = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}


def val(r, *metrics):
    """The first of `metrics` the report has (names moved between Nsight Compute versions)."""
    for m in metrics:
        if col.get(m) is not None:
            return r[col[m]]
    return "?"


def with_unit(r, metric):
    """`value unit` as the report prints them (shared memory is in Kbyte, not bytes)."""
    i = col.get(metric)
    return f"{r[i]} {units[i]}" if i is not None else "?"


STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
lines = []
for r in data:
    k = val(r, "Kernel Name")
    lines.append(f"== {k}: {with_unit(r, 'gpu__time_duration.sum')}, "
                 f"SM {val(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed')} %, "
                 f"memory {val(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed')} %, "
                 f"DRAM {val(r, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed', 'dram__throughput.avg.pct_of_peak_sustained_elapsed')} %, "
                 f"tensor pipe {val(r, 'sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active', 'sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active')} %, "
                 f"fp64 pipe {val(r, 'sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active', 'sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active')} %, "
                 f"occupancy {val(r, 'sm__warps_active.avg.pct_of_peak_sustained_active')} %, "
                 f"registers {val(r, 'launch__registers_per_thread')}, smem {with_unit(r, 'launch__shared_mem_per_block_static')} static + {with_unit(r, 'launch__shared_mem_per_block_dynamic')} dynamic, "
                 f"CTAs/SM {val(r, 'launch__occupancy_limit_registers')} (regs) {val(r, 'launch__occupancy_limit_shared_mem')} (smem), "
                 f"issue active {val(r, 'sm__issue_active.avg.pct_of_peak_sustained_active', 'sm__inst_issued.avg.pct_of_peak_sustained_active')} %")
    stalls = []
    for h, i in col.items():
        m = STALL.match(h)
        if m and not m.group(1).endswith("_not_issued"):
            try:
                stalls.append((float(r[i]), m.group(1)))
            except ValueError:
                pass
    lines.append("   stalls (cycles per issued instruction): " + ", ".join(f"{n} {v:.2f}" for v, n in sorted(stalls, reverse=True)[:10]))
summary = "\n".join(lines)
open(os.path.join(args.out, f"{name}.summary.txt"), "w").write(summary + "\n")
print(summary)
for k in args.kernels.split("|"):
    sass = ncu_import("--page", "source", "--print-source", "sass", "--csv", "--kernel-name", k)
    open(os.path.join(args.out, f"{name}.{k}.sass.csv"), "w").write(sass)
