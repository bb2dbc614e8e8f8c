# H200: the forward operators of dsl-examples/gdn_fwd.tile (<member>_fwd[_varlen]: o and the final
# state ht) run by tilec-run, against kverify's fp64 oracle and the CPU interpreter, and beside
# fla 0.6.0's chunk_gated_delta_rule forward in the same run.
#   1. Accuracy: every case folder of scripts/h200-prepare.sh (gdn, ssd, la, gla, kda, their
#      _varlen forms, gdn_gva; B=1 T=256 H=2 K=V=128): max|err| / max|ref| of o and ht against
#      the oracle (its `o` and `st`), the bf16 floor of o (the oracle's o rounded to bf16), and
#      the GPU against the interpreter (equal elements; bitwise where the arithmetic order is the
#      interpreter's), 5 repeats bitwise identical (tilec-run --repeat 5).
#   2. Speed: gdn_fwd at B=8 T=2048 H=16 K=V=128 (sum of median kernel times, tilec-run --bench)
#      beside fla's forward (triton do_bench, no autograd), with the ratio tilec / fla and o, ht
#      against fla's.
# Usage: python3 bench/h200_gdn_fwd.py --tilec-run RUN --art ART --cases DIR [--fla-speed none]
# Prints one JSON line per measurement and writes them to $OUT/gdn_fwd.json.
import argparse, os, time

import torch
from safetensors.torch import load_file, save_file

from h200_common import ACCURACY_CASES, Recorder, bits, fla_op, gdn_inputs, parse_bench, rel, run_tilec

ap = argparse.ArgumentParser()
ap.add_argument("--tilec-run", required=True)
ap.add_argument("--art", required=True, help="folder with <member>_fwd[_varlen].sm_90a.plan.json (tilec build dsl-examples/gdn_fwd.tile)")
ap.add_argument("--cases", required=True, help="folder with one sub-folder per case from h200-prepare.sh (in, ref, interp_fwd)")
ap.add_argument("--work", default="/tmp/gdn_fwd")
ap.add_argument("--repeat", type=int, default=10)
ap.add_argument("--speed-t", type=int, default=2048)
ap.add_argument("--fla-speed", default="dense", help="'none' times tilec alone (fla's first call JIT-compiles for minutes)")
args = ap.parse_args()
os.makedirs(args.work, exist_ok=True)
dev = "cuda"
OUTF = os.path.join(os.environ.get("OUT", "."), "gdn_fwd.json")
ORACLE = {"o": "o", "ht": "st"}  # the plan's output name -> the oracle's


emit = Recorder(OUTF)


def tilec(plan, inputs, out, *extra):
    return run_tilec(args.tilec_run, plan, inputs, out, *extra)


emit({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": __import__("triton").__version__})

# ---- 1. accuracy against the fp64 oracle and the interpreter -------------------------------------
for member in ACCURACY_CASES:
    case = os.path.join(args.cases, member)
    if not os.path.exists(os.path.join(case, "interp_fwd.safetensors")):
        continue
    m, _, suffix = member.partition("_")
    op = f"{m}_fwd_varlen" if suffix == "varlen" else f"{m}_fwd"
    ref = load_file(os.path.join(case, "ref.safetensors"))
    interp = load_file(os.path.join(case, "interp_fwd.safetensors"))
    fout = os.path.join(args.work, f"acc_{member}.safetensors")
    res = {"case": f"{op} accuracy B=1 T=256 H=2 K=V=128" + (" cu_seqlens 0,1,71,256" if suffix == "varlen" else "") + (" GVA HV=4" if suffix == "gva" else "")}
    res["bf16_floor_o"] = rel(ref["o"].to(torch.bfloat16), ref["o"])
    try:
        # The backward's inputs less do and dht (h200-prepare.sh keeps only in.safetensors: the carry's 64 MiB).
        fin = os.path.join(args.work, f"in_fwd_{member}.safetensors")
        save_file({k: v for k, v in load_file(os.path.join(case, "in.safetensors")).items() if k not in ("do", "dht")}, fin)
        txt = tilec(os.path.join(args.art, f"{op}.sm_90a.plan.json"), fin, fout, "--repeat", "5")
        res["tilec_repeat"] = [l for l in txt.splitlines() if l.startswith("repeat")][0]
        out = load_file(fout)
        res["tilec_relerr_vs_oracle"] = {n: rel(out[n], ref[r]) for n, r in ORACLE.items()}
        # Every output, the saved Ai (GDN, KDA) included.
        res["gpu_vs_interpreter_equal_elements"] = {n: f"{int((bits(out[n]) == bits(interp[n])).sum())}/{out[n].numel()}" for n in interp}
        res["gpu_vs_interpreter_relerr"] = {n: rel(out[n], interp[n]) for n in interp}
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    emit(res)

# ---- 2. speed beside fla's forward ----------------------------------------------------------------
B, T, H, K, V = 8, args.speed_t, 16, 128, 128
g_ = torch.Generator(device=dev).manual_seed(3)
rn = lambda *s: torch.randn(*s, device=dev, generator=g_)
scale = K ** -0.5
x = {k: v for k, v in gdn_inputs(rn, B, T, H, K, V, B).items() if k not in ("do", "dht")}
fin = os.path.join(args.work, "speed_in.safetensors")
save_file({**{k: v.cpu().contiguous() for k, v in x.items()}, "scale": torch.tensor(scale, dtype=torch.float32)}, fin)
fout = os.path.join(args.work, "speed_out.safetensors")
res = {"case": f"gdn_fwd speed B={B} T={T} H={H} K={K} V={V}"}
try:
    txt = tilec(os.path.join(args.art, "gdn_fwd.sm_90a.plan.json"), fin, fout, "--bench", "--repeat", str(args.repeat))
    res["tilec_kernels_ms"], res["tilec_ms"] = parse_bench(txt)
except Exception as e:
    res["tilec_error"] = repr(e)[:2000]
if args.fla_speed != "none":
    try:
        chunk_gated_delta_rule = fla_op("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
        from triton.testing import do_bench
        fwd = lambda: chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=scale, initial_state=x["s0"], output_final_state=True)
        t0 = time.time()
        with torch.no_grad():
            o, ht = fwd()
            torch.cuda.synchronize()
            res["fla_first_call_s"] = time.time() - t0
            res["fla_fwd_ms"] = do_bench(fwd, warmup=10, rep=100)
        if "tilec_ms" in res:
            res["ratio_tilec_over_fla"] = res["tilec_ms"] / res["fla_fwd_ms"]
            out = load_file(fout)
            res["tilec_relerr_vs_fla"] = {"o": rel(out["o"].to(dev), o), "ht": rel(out["ht"].to(dev), ht)}
    except Exception as e:
        res["fla_error"] = repr(e)[:2000]
emit(res)
