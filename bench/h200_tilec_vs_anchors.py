# H200 speed of tilec's sm_90a kernels beside their anchors, measured in the same run:
#   * gemm (dsl-examples/gemm.tile) at M = N = K = 4096, 8192 and a ragged 4000, bf16 in, f32 out,
#     vs torch.matmul (bf16);
#   * k1_scan_scalar and k1_scan_channel (dsl-examples/k1_reverse_scan.tile) at B=8,
#     T in {512, 2048, 8192}, H=16, K=V=128 (C=64) vs fla 0.6.0's
#     chunk_gated_delta_rule_bwd_dhu (Triton) on the same inputs (g, or gk per channel: both
#     per-channel forms take q and k already gated; tilec's with the scale folded into q).
# tilec kernels are launched by `tilec-run --bench` (CUDA events, median of N launches of the kernel
# alone); the anchors are timed with triton.testing.do_bench (median, after warm-up and autotune).
# Also prints how far tilec's outputs are from the anchors' (max |diff| / max |anchor|), so the
# timed kernels are known to compute the same thing.
#
# Usage (on the device machine; ART holds the sm_90a artifacts, RUN the tilec-run binary):
#   python3 bench/h200_tilec_vs_anchors.py --tilec-run RUN --art ART [--work /tmp/perf] [--repeat 20]
# Prints one JSON line per measurement and writes them all to $OUT/perf.json (or ./perf.json).
import argparse, json, os, re, subprocess, sys, time
import torch
from safetensors.torch import save_file, load_file
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(__file__))
from h200_common import k1_inputs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--tilec-run", required=True)
ap.add_argument("--art", required=True)
ap.add_argument("--work", default="/tmp/perf")
ap.add_argument("--repeat", type=int, default=20)
ap.add_argument("--skip", default="", help="comma list of parts to skip: gemm,k1")
ap.add_argument("--k1-t", default="512,2048,8192", help="comma list of sequence lengths T for K#1")
ap.add_argument("--k1-kernels", default="scalar,channel", help="K#1 gate settings: scalar (GDN, SSD), channel (KDA, GLA)")
args = ap.parse_args()
os.makedirs(args.work, exist_ok=True)
dev = "cuda"
rows = []
OUTF = os.path.join(os.environ.get("OUT", "."), "perf.json")


def emit(r):
    rows.append(r)
    print(json.dumps(r), flush=True)
    json.dump(rows, open(OUTF, "w"), indent=1)  # written as it goes: a cut-off run keeps its rows


def tilec_bench(meta, inputs, out, extra=()):
    """Runs tilec-run --bench; returns (median ms, min ms, full stdout)."""
    cmd = [args.tilec_run, meta, "--inputs", inputs, "--out", out, "--bench", "--repeat", str(args.repeat), "--code", "cubin", *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tilec-run failed ({p.returncode}): {p.stdout[-800:]} {p.stderr[-800:]}")
    m = re.search(r"median ([0-9.]+) ms \(min ([0-9.]+)", p.stdout)
    if not m:
        raise RuntimeError(f"no timing in tilec-run output: {p.stdout[-800:]}")
    return float(m.group(1)), float(m.group(2)), p.stdout.strip(), time.time() - t0


def relerr(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


emit({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": __import__("triton").__version__})

# ---- GEMM: 4096^3, 8192^3 and a ragged 4000^3 (partial tiles at every edge) -----------------------
if "gemm" not in args.skip:
    for (M, N, K) in [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4000, 4000)]:
        case = f"gemm {M}x{N}x{K} bf16"
        g_ = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(M, K, device=dev, generator=g_).to(torch.bfloat16)
        b = torch.randn(K, N, device=dev, generator=g_).to(torch.bfloat16)
        fin = os.path.join(args.work, "gemm_in.safetensors")
        save_file({"a": a.cpu().contiguous(), "b": b.cpu().contiguous()}, fin)
        try:
            med, mn, txt, wall = tilec_bench(os.path.join(args.art, "gemm.sm_90a.meta.json"), fin, os.path.join(args.work, "gemm_out.safetensors"))
            t_torch = do_bench(lambda: torch.matmul(a, b), warmup=25, rep=200)
            c = load_file(os.path.join(args.work, "gemm_out.safetensors"))["c"].to(dev)
            ref = a.float() @ b.float()
            flop = 2 * M * N * K
            emit({"case": case, "tilec_ms": med, "tilec_min_ms": mn, "torch_matmul_ms": t_torch,
                  "ratio_tilec_over_torch": med / t_torch, "tilec_pct_of_torch_tflops": 100 * t_torch / med,
                  "tilec_tflops": flop / med / 1e9, "torch_tflops": flop / t_torch / 1e9,
                  "tilec_relerr_vs_fp32_matmul": relerr(c, ref), "tilec_run": txt.splitlines()[-1], "tilec_run_wall_s": wall})
        except Exception as e:
            emit({"case": case, "error": repr(e)[:1000]})
        del a, b
        torch.cuda.empty_cache()

# ---- K#1 reverse state scan vs fla chunk_gated_delta_rule_bwd_dhu --------------------------------
for kind in [] if "k1" in args.skip else args.k1_kernels.split(","):
    for T in [int(t) for t in args.k1_t.split(",")]:
        B, H, Kd, V, C = 8, 16, 128, 128, 64
        NT = (T + C - 1) // C
        # Chunk-local cumulative log2 gates (fla's convention for its exp2 kernels), per token
        # (k1_scan_scalar) or per key channel (k1_scan_channel): h200_common.k1_inputs.
        q, k, w, do, dv, dht, g = k1_inputs(kind, B, T, H, Kd, V, C, dev)
        scale = Kd ** -0.5
        fin = os.path.join(args.work, f"k1_{kind}_in.safetensors")
        # One sequence per batch row: cu = [0, T] (cu_seqlens), co = [0, NT] (its first chunk).
        cu = torch.tensor([0, T], dtype=torch.int32)
        co = torch.tensor([0, NT], dtype=torch.int32)
        if kind == "scalar":
            qk = {"q": q.cpu(), "k": k.cpu(), "scale": torch.tensor(scale, dtype=torch.float32)}
        else:
            # k1_scan_channel takes q and k gated (fla's per-channel dhu contract) and the scale
            # folded into q: here q and k stand for the gated ones, as they do for fla.
            qk = {"qg": (q.float() * scale).to(torch.bfloat16).cpu(), "kg": k.cpu()}
        save_file({"cu": cu, "co": co, **qk, "w": w.cpu(), "g": g.cpu(), "dout": do.cpu(), "dv": dv.cpu(), "dht": dht.cpu()}, fin)
        fout = os.path.join(args.work, f"k1_{kind}_out.safetensors")
        res = {"case": f"k1_scan_{kind} B={B} T={T} H={H} K={Kd} V={V} C={C}"}
        try:
            med, mn, txt, wall = tilec_bench(os.path.join(args.art, f"k1_scan_{kind}.sm_90a.meta.json"), fin, fout, [])
            res.update({"tilec_ms": med, "tilec_min_ms": mn, "tilec_run": txt.splitlines()[-1], "tilec_run_wall_s": wall})
        except Exception as e:
            res["tilec_error"] = repr(e)[:1000]
        bf16 = os.path.join(args.art, f"k1_scan_{kind}_bf16.sm_90a.meta.json")
        if os.path.exists(bf16):
            # Like for like: the instance that stores dv2 in bf16, as fla's kernel does (gdn_bwd's K#1).
            try:
                res["tilec_bf16_dv2_ms"] = tilec_bench(bf16, fin, os.path.join(args.work, f"k1_{kind}_bf16_out.safetensors"), [])[0]
            except Exception as e:
                res["tilec_bf16_dv2_error"] = repr(e)[:1000]
        try:
            os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
            import fla.ops.common.chunk_o as _co
            _co.TRITON_ABOVE_3_7_1 = True  # the #640 Hopper guard (gdn_anchors.py); timing only
            from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_dhu as dhu
            h0 = torch.zeros(B, H, Kd, V, device=dev)
            gates = {"g": g} if kind == "scalar" else {"gk": g}
            call = lambda: dhu(q=q, k=k, w=w, do=do, dv=dv, **gates, h0=h0, dht=dht, scale=scale, chunk_size=C)
            t0 = time.time()
            dh_f, dh0_f, dv2_f = call()  # first call: JIT + autotune
            torch.cuda.synchronize()
            res["fla_first_call_s"] = time.time() - t0
            res["fla_ms"] = do_bench(call, warmup=25, rep=200)
            if "tilec_ms" in res:
                res["ratio_tilec_over_fla"] = res["tilec_ms"] / res["fla_ms"]
            if "tilec_bf16_dv2_ms" in res:
                res["ratio_tilec_bf16_dv2_over_fla"] = res["tilec_bf16_dv2_ms"] / res["fla_ms"]
            if "tilec_ms" in res:
                o = load_file(fout)
                res["relerr_vs_fla"] = {"dh": relerr(o["dh"].to(dev), dh_f), "dh0": relerr(o["dh0"].to(dev), dh0_f), "dv2": relerr(o["dv2"].to(dev), dv2_f)}
        except Exception as e:
            res["fla_error"] = repr(e)[:1000]
        emit(res)
