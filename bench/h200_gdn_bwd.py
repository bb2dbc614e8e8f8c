# H200: the gdn_bwd operator of dsl-examples/gdn.tile (the whole GDN backward, 14 launches; and
# gdn_bwd_saved, the training pair's backward from the forward's Ai) run by
# `tilec-run <plan>`, beside fla 0.6.0's chunk_gated_delta_rule backward (Triton), in one run:
#   1. accuracy at B=1 T=256 H=2 K=V=128 on the inputs scripts/h200-prepare.sh made (rounded to
#      the operator's dtypes): every gradient's max|err| / max|ref| against kverify's fp64 oracle
#      (token-serial GDN) for tilec and for fla on the same inputs; tilec's five runs bitwise
#      identical; tilec's GPU outputs against the CPU interpreter's (bitwise);
#   2. speed at B=8 T=2048 H=16 K=V=128 (inputs generated here): tilec's median sum of kernel
#      times (CUDA events per launch) and fla's and FlashQLA's backward (triton.testing.do_bench
#      over torch.autograd.grad of (o, h_T); FlashQLA when `flash_qla` imports), with tilec's
#      gradients against fla's.
#   With each anchor's speed: its per-kernel device times (torch.profiler) and a per-stage table
#   beside tilec's launches (h200_common.FLA_STAGES: K#1 beside fla's dhu kernel, k2_wy_vjp beside
#   prepare_wy_repr_bwd, dv_local, dqkwg, ...); --no-stages skips it.
#   Also the same accuracy check for ssd_bwd, la_bwd, gla_bwd and kda_bwd (the same source), and
#   for every <member>_bwd_varlen on three packed sequences (cu_seqlens 0,1,71,256; fla beside
#   GDN's), and gdn_bwd with GVA (4 value heads over 2 key heads; fla beside it if it takes GVA); and the varlen speed: 8 sequences of mixed lengths packed into T = 8·2048 tokens.
#   And gdn_bwd built at the other head sizes (ART_k64v256 etc., `--const K=..,V=..`): accuracy
#   (GDN at all five, KDA at V = 256) and tilec's speed (no anchors: each shape is a new JIT).
# Usage: python3 bench/h200_gdn_bwd.py --tilec-run RUN --art ART --cases DIR [--work /tmp/gdn]
# Prints one JSON line per measurement and writes them to $OUT/gdn_bwd.json.
import argparse, os, re, sys, time
import torch
from safetensors.torch import save_file, load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "tests"))
from naive_recurrence import recurrence  # noqa: E402
from h200_common import ACCURACY_CASES, Recorder, bits, device_kernel_times, fla_op, gdn_inputs, parse_bench, rel, run_tilec, stage_table

ap = argparse.ArgumentParser()
ap.add_argument("--tilec-run", required=True)
ap.add_argument("--art", required=True)
ap.add_argument("--cases", required=True, help="folder with one sub-folder per member (gdn, ssd, la, gla, kda) from h200-prepare.sh")
ap.add_argument("--work", default="/tmp/gdn")
ap.add_argument("--repeat", type=int, default=10)
ap.add_argument("--speed-t", type=int, default=2048)
ap.add_argument("--fla-for", default="gdn,gdn_varlen,gdn_gva", help="accuracy cases to run fla beside (its first call JIT-compiles for minutes)")
ap.add_argument("--qla-for", default="gdn", help="accuracy cases to run FlashQLA beside (when flash_qla imports; its first call per shape JIT-compiles for ~2 min)")
ap.add_argument("--speed", default="dense,saved,kda,gla,varlen,variants", help="speed sets to run: dense, saved (gdn_bwd_saved: the backward from the forward's Ai, as fla's), kda and gla (the per-channel members, beside fla's chunk_kda / chunk_gla), ssd and la (beside fla's chunk_simple_gla / chunk_linear_attn; not in the default), fwd (gdn_fwd, kda_fwd, gla_fwd beside fla's forwards; not in the default), varlen (beside fla), variants (tilec at the other head sizes)")
ap.add_argument("--qla-speed", default="dense", help="speed sets to run FlashQLA beside")
ap.add_argument("--fla-speed", default="dense,saved,kda,gla,varlen", help="speed sets to run fla beside (its first call at a new shape JIT-compiles for ~2 min); 'none' times tilec alone")
ap.add_argument("--fwd-members", default="gdn,kda,gla", help="the forwards the 'fwd' speed set times (beside fla's forward when FLA speed has 'fwd')")
ap.add_argument("--no-speed", action="store_true", help="accuracy only")
ap.add_argument("--large", default="", help="members whose backward is also judged at B=8 T=2048 H=16 K=V=128 against the fp64 token-serial oracle run on the GPU (e.g. gdn,kda,gla,ssd,la)")
ap.add_argument("--large-fla-for", default="gdn", help="of those, the members fla runs beside (its first call at the shape JIT-compiles for ~2 min)")
ap.add_argument("--no-stages", dest="stages", action="store_false", help="skip the anchors' per-kernel times (torch.profiler) and the per-stage table beside tilec's launches")
args = ap.parse_args()
os.makedirs(args.work, exist_ok=True)
dev = "cuda"
OUTF = os.path.join(os.environ.get("OUT", "."), "gdn_bwd.json")
PLAN = os.path.join(args.art, "gdn_bwd.sm_90a.plan.json")
GRADS = ["dq", "dk", "dv", "dg", "dbeta", "ds0"]


emit = Recorder(OUTF)


def tilec(inputs, out, *extra, plan=PLAN):
    return run_tilec(args.tilec_run, plan, inputs, out, *extra)


def qla_fn():
    """FlashQLA's chunk_gated_delta_rule (TileLang; fla's signature); raises when not installed."""
    from flash_qla import chunk_gated_delta_rule
    return chunk_gated_delta_rule


def fla_fn():
    return fla_op("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")


def fla_kda_fn():
    """fla's chunk_kda (per-channel gate g [B, T, H, K] in log space, and β)."""
    return fla_op("fla.ops.kda", "chunk_kda")


def fla_gla_fn():
    """fla's chunk_gla (per-channel gate, no β)."""
    return fla_op("fla.ops.gla", "chunk_gla")


def fla_ssd_fn():
    """fla's chunk_simple_gla (a scalar gate g [B, T, H] in log space, no β): SSD / Mamba-2's recurrence."""
    return fla_op("fla.ops.simple_gla", "chunk_simple_gla")


def fla_la_fn():
    """fla's chunk_linear_attn with `normalize=False`: the plain linear-attention recurrence
    (no gate, no β) that tilec's la_bwd differentiates; fla normalises by default."""
    f = fla_op("fla.ops.linear_attn", "chunk_linear_attn")
    return lambda *a, **kw: f(*a, normalize=False, **kw)


def fla_grads(x, scale, f=None):
    """fla's (or `f`'s: FlashQLA's, fla's KDA or GLA) forward with autograd, then the gradients of Σ o·do + Σ h_T·dht; returns (grads, bwd)."""
    f = f or fla_fn()
    order = [n for n in ["q", "k", "v", "g", "beta", "s0"] if n in x]
    leaves = {n: x[n].detach().clone().requires_grad_(True) for n in order}
    cu = x["cu_seqlens"].long() if "cu_seqlens" in x else None
    o, ht = f(*[leaves[n] for n in order if n != "s0"], scale=scale, initial_state=leaves["s0"], output_final_state=True, cu_seqlens=cu)
    bwd = lambda: torch.autograd.grad((o, ht), [leaves[n] for n in order], (x["do"], x["dht"]), retain_graph=True)
    g = bwd()
    return dict(zip(["d" + n for n in order], g)), bwd


ANCHORS = {"fla": fla_fn, "flashqla": qla_fn, "fla_kda": fla_kda_fn, "fla_gla": fla_gla_fn, "fla_ssd": fla_ssd_fn, "fla_la": fla_la_fn}  # the anchors' result keys: <key>_worst, <key>_bwd_ms, ...


def anchor_accuracy(res, key, x, ref, grads):
    """Anchor `key`'s gradients on inputs `x` against the oracle `ref`, into `res` (an error is recorded, not raised)."""
    try:
        g, _ = fla_grads(x, float(x["scale"]), f=ANCHORS[key]())
        res[f"{key}_relerr_vs_oracle"] = {n: rel(g[n].cpu(), ref[n]) for n in grads}
        res[f"{key}_worst"] = max(res[f"{key}_relerr_vs_oracle"].values())
    except Exception as e:
        res[f"{key}_error"] = repr(e)[:2000]


def anchor_speed(res, key, x, fout):
    """Anchor `key`'s first call (JIT) and do_bench of its backward on `x`, beside tilec's time in `res`; tilec's outputs in `fout` against its gradients."""
    try:
        from triton.testing import do_bench
        t0 = time.time()
        g, bwd = fla_grads(x, scale, f=ANCHORS[key]())
        torch.cuda.synchronize()
        res[f"{key}_first_call_s"] = time.time() - t0
        res[f"{key}_bwd_ms"] = do_bench(bwd, warmup=10, rep=100)
        if args.stages:
            # Per stage beside tilec's per-launch times (k2_wy_vjp beside fla's WY VJP, ...).
            res[f"{key}_kernels_ms"] = device_kernel_times(bwd)
            if "tilec_kernels_ms" in res:
                res[f"stages_vs_{key}"] = stage_table(res["tilec_kernels_ms"], res[f"{key}_kernels_ms"])
        if "tilec_ms" in res:
            res[f"ratio_tilec_over_{key}"] = res["tilec_ms"] / res[f"{key}_bwd_ms"]
            out = load_file(fout)
            res[f"tilec_relerr_vs_{key}"] = {n: rel(out[n].to(dev), g[n]) for n in GRADS if n in g and n in out}
    except Exception as e:
        res[f"{key}_error"] = repr(e)[:2000]


emit({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": __import__("triton").__version__})

def tilec_accuracy(res, fin, fout, plan, ref, grads):
    """tilec's `plan` on `fin` five times (bitwise-repeat line into `res`), each gradient's
    max|err| / max|ref| against the oracle `ref`, as written (f32) and as if rounded once to
    bf16 (fla's dtype for dq, dk, dv); returns the outputs."""
    txt = tilec(fin, fout, "--repeat", "5", plan=plan)
    res["tilec_repeat"] = [l for l in txt.splitlines() if l.startswith("repeat")][0]
    out = load_file(fout)
    res["tilec_relerr_vs_oracle"] = {n: rel(out[n], ref[n]) for n in grads}
    res["tilec_worst"] = max(res["tilec_relerr_vs_oracle"].values())
    res["tilec_relerr_bf16_outputs"] = {n: rel(out[n].to(torch.bfloat16), ref[n]) for n in grads}
    res["tilec_worst_bf16_outputs"] = max(res["tilec_relerr_bf16_outputs"].values())
    return out


# ---- 1. accuracy against the fp64 oracle --------------------------------------------------------
VARIANTS = ["k64v64", "k64v128", "k64v256", "k128v64", "k128v256"]  # gdn.tile built with --const K=..,V=.. into ART_<variant>
for member in [*ACCURACY_CASES] + [f"gdn_{v}" for v in VARIANTS] + ["kda_k64v256", "kda_k128v256"]:
    case = os.path.join(args.cases, member)
    if not os.path.isdir(case):
        continue
    m, _, suffix = member.partition("_")
    op = f"{m}_bwd_varlen" if suffix == "varlen" else f"{m}_bwd"
    art = f"{args.art}_{suffix}" if suffix in VARIANTS else args.art
    kv = re.match(r"k(\d+)v(\d+)", suffix)
    fin = os.path.join(case, "in.safetensors")
    ref = load_file(os.path.join(case, "ref.safetensors"))
    interp = load_file(os.path.join(case, "interp.safetensors"))
    fout = os.path.join(args.work, f"acc_{member}.safetensors")
    res = {"case": f"{op} accuracy B=1 T=256 H=2 " + (f"K={kv.group(1)} V={kv.group(2)}" if kv else "K=V=128") + (" cu_seqlens 0,1,71,256" if "varlen" in op else "") + (" GVA HV=4" if member.endswith("_gva") else "")}
    grads = [n for n in GRADS if n in interp]
    # The floor of any bf16 output: the oracle's own gradients rounded to bf16 (from the f32 the
    # reference is stored in; a double rounding shifts this by at most 2^-24 relative).
    res["bf16_floor"] = {n: rel(ref[n].to(torch.bfloat16), ref[n]) for n in grads}
    res["bf16_floor_worst"] = max(res["bf16_floor"].values())
    try:
        out = tilec_accuracy(res, fin, fout, os.path.join(art, f"{op}.sm_90a.plan.json"), ref, grads)
        res["gpu_vs_interpreter_equal_elements"] = {n: f"{int((bits(out[n]) == bits(interp[n])).sum())}/{out[n].numel()}" for n in grads}
        res["gpu_vs_interpreter_relerr"] = {n: rel(out[n], interp[n]) for n in grads}
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    anchors = [k for k, wanted in (("fla", args.fla_for), ("flashqla", args.qla_for)) if member in wanted.split(",")]
    if anchors:
        x = {k: v.to(dev) for k, v in load_file(fin).items()}
        for key in anchors:
            anchor_accuracy(res, key, x, ref, grads)
    emit(res)

def speed(name, x, plan, anchors=("fla",), art=None):
    """tilec's plan (median sum of kernel times) and each of `anchors` (keys of ANCHORS) on the same inputs `x`."""
    fin = os.path.join(args.work, f"{name}_in.safetensors")
    save_file({**{k: v.cpu().contiguous() for k, v in x.items()}, "scale": torch.tensor(scale, dtype=torch.float32)}, fin)
    fout = os.path.join(args.work, f"{name}_out.safetensors")
    res = {}
    try:
        txt = tilec(fin, fout, "--bench", "--repeat", str(args.repeat), plan=os.path.join(art or args.art, plan))
        res["tilec_kernels_ms"], res["tilec_ms"] = parse_bench(txt)
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    for key in anchors:
        anchor_speed(res, key, x, fout)
    return res


# ---- 1b. accuracy at the speed shape (issue 10: "and at B=8 T=2048 H=16") -----------------------
# Inputs drawn here as fla's tests draw them (h200_common.gdn_inputs); the oracle is the
# token-serial fp64 recurrence and its exact backward (python/tests/naive_recurrence.py, checked
# against torch.autograd.gradcheck in python/tests/test_fla_ops.py) run on the GPU, four batch
# rows at a time (it keeps one fp64 state per token: 17 GB per half).
def large_accuracy(member, B=8, T=2048, H=16, K=128, V=128):
    gen = torch.Generator(device=dev).manual_seed(11)
    x = gdn_inputs(lambda *s: torch.randn(*s, device=dev, generator=gen), B, T, H, K, V, B, member=member)
    sc = K ** -0.5
    res = {"case": f"{member}_bwd accuracy B={B} T={T} H={H} K={K} V={V} (fla's test inputs)"}
    t0 = time.time()
    parts = []
    for r in (slice(0, B // 2), slice(B // 2, B)):
        xs = {n: t[r] for n, t in x.items()}
        parts.append(recurrence(member, xs, sc, None, seeds=(xs["do"], xs["dht"]))[2])
        torch.cuda.empty_cache()
    ref = {"d" + n: torch.cat([p[n] for p in parts]).cpu() for n in parts[0]}
    del parts
    res["oracle_s"] = time.time() - t0
    grads = [n for n in GRADS if n in ref]
    res["bf16_floor"] = {n: rel(ref[n].to(torch.bfloat16), ref[n]) for n in grads}
    res["bf16_floor_worst"] = max(res["bf16_floor"].values())
    fin = os.path.join(args.work, f"large_{member}_in.safetensors")
    fout = os.path.join(args.work, f"large_{member}_out.safetensors")
    save_file({**{k: v.cpu().contiguous() for k, v in x.items()}, "scale": torch.tensor(sc, dtype=torch.float32)}, fin)
    try:
        tilec_accuracy(res, fin, fout, os.path.join(args.art, f"{member}_bwd.sm_90a.plan.json"), ref, grads)
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    key = {"gdn": "fla", "kda": "fla_kda", "gla": "fla_gla"}.get(member)
    if key and member in args.large_fla_for.split(","):
        anchor_accuracy(res, key, {**x, "scale": torch.tensor(sc)}, ref, grads)
    emit(res)


for member in [m for m in args.large.split(",") if m]:
    large_accuracy(member)

# ---- 2. speed beside fla ------------------------------------------------------------------------
if args.no_speed:
    raise SystemExit(0)
B, T, H, K, V = 8, args.speed_t, 16, 128, 128
g_ = torch.Generator(device=dev).manual_seed(3)
rn = lambda *s: torch.randn(*s, device=dev, generator=g_)
scale = K ** -0.5


def inputs(b, t, n, K=K, V=V, member="gdn"):
    """Random inputs of `member` (default GDN) in fla's layout: [b, t, H, ·], states for n sequences."""
    return gdn_inputs(rn, b, t, H, K, V, n, member=member)


SPEED = args.speed.split(",")
QLA_SPEED = args.qla_speed.split(",")
FLA_SPEED = args.fla_speed.split(",")
if "dense" in SPEED:
    emit({"case": f"gdn_bwd speed B={B} T={T} H={H} K={K} V={V}", **speed("speed", inputs(B, T, B), "gdn_bwd.sm_90a.plan.json", anchors=["fla"] * ("dense" in FLA_SPEED) + ["flashqla"] * ("dense" in QLA_SPEED))})

# ---- 2b. the training pair's backward: gdn_bwd_saved takes the Ai that gdn_fwd returns (fla's
# autograd saves A too, so this is the like-for-like time beside fla's backward) ----------------
if "saved" in SPEED:
    x = inputs(B, T, B)
    ffwd = os.path.join(args.work, "saved_fwd_in.safetensors")
    save_file({**{k: v.cpu().contiguous() for k, v in x.items() if k not in ("do", "dht")}, "scale": torch.tensor(scale, dtype=torch.float32)}, ffwd)
    res = {"case": f"gdn_bwd_saved speed B={B} T={T} H={H} K={K} V={V} (Ai from gdn_fwd)"}
    try:
        fai = os.path.join(args.work, "saved_fwd_out.safetensors")
        tilec(ffwd, fai, plan=os.path.join(args.art, "gdn_fwd.sm_90a.plan.json"))
        x["ai"] = load_file(fai)["ai"].to(dev)
        res.update(speed("speed_saved", x, "gdn_bwd_saved.sm_90a.plan.json", anchors=["fla"] * ("saved" in FLA_SPEED)))
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    emit(res)

# ---- 2c. the per-channel members: kda_bwd and kda_bwd_saved beside fla's chunk_kda, gla_bwd
# beside chunk_gla (same B, T, H, K, V; g per key channel, log space) ---------------------------
for member in [m for m in ("kda", "gla") if m in SPEED]:
    x = inputs(B, T, B, member=member)   # g per key channel; GLA has no β
    anchor = ["fla_" + member] * (member in FLA_SPEED)
    emit({"case": f"{member}_bwd speed B={B} T={T} H={H} K={K} V={V}", **speed(f"speed_{member}", x, f"{member}_bwd.sm_90a.plan.json", anchors=anchor)})
    # The training pair, as fla's autograd runs it: the backward from what the forward saved
    # (kda: Ai and the scores Pᵀ, fla's Akk and Aqk; gla: Pᵀ, fla's A), taken from <member>_fwd.
    kept = {"kda": ("ai", "pt"), "gla": ("pt",)}[member]
    res = {"case": f"{member}_bwd_saved speed B={B} T={T} H={H} K={K} V={V} ({', '.join(kept)} from {member}_fwd)"}
    try:
        ffwd = os.path.join(args.work, f"{member}_fwd_in.safetensors")
        save_file({**{k: v.cpu().contiguous() for k, v in x.items() if k not in ("do", "dht")}, "scale": torch.tensor(scale, dtype=torch.float32)}, ffwd)
        fout = os.path.join(args.work, f"{member}_fwd_out.safetensors")
        tilec(ffwd, fout, plan=os.path.join(args.art, f"{member}_fwd.sm_90a.plan.json"))
        out = load_file(fout)
        for n in kept:
            x[n] = out[n].to(dev)
        res.update(speed(f"speed_{member}_saved", x, f"{member}_bwd_saved.sm_90a.plan.json", anchors=anchor))
    except Exception as e:
        res["tilec_error"] = repr(e)[:2000]
    emit(res)

# ---- 2c'. the forwards (<member>_fwd, o and h_T plus what the backward keeps) beside fla's
# forward of the same op (no autograd: fla's training forward computes the same tensors and
# saves them; its kernels were JIT-compiled by the sets above when those ran) ---------------------
def fwd_speed(member, x):
    """tilec's <member>_fwd plan and fla's forward (do_bench, no grad) on `x` less do and dht."""
    xf = {k: v for k, v in x.items() if k not in ("do", "dht")}
    res = speed(f"speed_{member}_fwd", xf, f"{member}_fwd.sm_90a.plan.json", anchors=())
    key = {"gdn": "fla", "kda": "fla_kda", "gla": "fla_gla"}[member]
    if "fwd" in FLA_SPEED:
        try:
            from triton.testing import do_bench
            f = ANCHORS[key]()
            order = [n for n in ["q", "k", "v", "g", "beta"] if n in xf]
            def run():
                with torch.no_grad():
                    return f(*[xf[n] for n in order], scale=scale, initial_state=xf["s0"], output_final_state=True)
            t0 = time.time(); o, ht = run(); torch.cuda.synchronize()
            res[f"{key}_first_call_s"] = time.time() - t0
            res[f"{key}_fwd_ms"] = do_bench(run, warmup=10, rep=100)
            if "tilec_ms" in res:
                res[f"ratio_tilec_over_{key}"] = res["tilec_ms"] / res[f"{key}_fwd_ms"]
                out = load_file(os.path.join(args.work, f"speed_{member}_fwd_out.safetensors"))
                res[f"tilec_relerr_vs_{key}"] = {"o": rel(out["o"].to(dev), o), "ht": rel(out["ht"].to(dev), ht)}
        except Exception as e:
            res[f"{key}_error"] = repr(e)[:2000]
    return res


for member in [m for m in ("gdn", "kda", "gla") if "fwd" in SPEED and m in args.fwd_members.split(",")]:
    x = inputs(B, T, B, member=member)
    emit({"case": f"{member}_fwd speed B={B} T={T} H={H} K={K} V={V}", **fwd_speed(member, x)})

# ---- 2d. the scalar-gate members without W (the W = 0 instances): ssd_bwd beside fla's
# chunk_simple_gla, la_bwd beside chunk_linear_attn(normalize=False) -------------------------------
for member in [m for m in ("ssd", "la") if m in SPEED]:
    anchor = ["fla_" + member] * (member in FLA_SPEED)
    emit({"case": f"{member}_bwd speed B={B} T={T} H={H} K={K} V={V}", **speed(f"speed_{member}", inputs(B, T, B, member=member), f"{member}_bwd.sm_90a.plan.json", anchors=anchor)})

# ---- 3. varlen speed beside fla: 8 sequences of mixed lengths, T = 8·2048 tokens packed --------
lens = [3000, 1000, 2048, 517, 4096, 1500, 2331, 1892]
assert sum(lens) == 8 * 2048
if "varlen" in SPEED:
    x = inputs(1, sum(lens), len(lens))
    x["cu_seqlens"] = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    emit({"case": f"gdn_bwd_varlen speed N={len(lens)} lens={lens} H={H} K={K} V={V}", **speed("speed_varlen", x, "gdn_bwd_varlen.sm_90a.plan.json", anchors=["fla"] * ("varlen" in FLA_SPEED) + ["flashqla"] * ("varlen" in QLA_SPEED))})

# ---- 4. the other head sizes (tilec only: fla would JIT-compile each shape for minutes) --------
for v in VARIANTS if "variants" in SPEED else []:
    k_, v_ = map(int, re.match(r"k(\d+)v(\d+)", v).groups())
    emit({"case": f"gdn_bwd speed B={B} T={T} H={H} K={k_} V={v_}", **speed(f"speed_{v}", inputs(B, T, B, K=k_, V=v_), "gdn_bwd.sm_90a.plan.json", anchors=(), art=f"{args.art}_{v}")})
