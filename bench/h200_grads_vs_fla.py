# H200: tilec's and fla's gradients beside the exact (fp64 token-serial) ones, per member, on the
# inputs bench/h200_train.py's mixer makes (q, k l2-normalised bf16, v bf16, gates
# logsigmoid(N(0, 1) + 4) ≈ −0.02: slow decay, beta = sigmoid(N(0, 1))), through the fla-named
# functions of both (tilec_torch with --art). Says which backend's backward the training-curve
# differences come from: max|x − exact| / max|exact| for o and every gradient.
# Usage: python3 bench/h200_grads_vs_fla.py --art .device/art [--members ssd,la,gdn] [--out $OUT/grads.json]
import argparse, json, os, sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "tests"))
sys.path.insert(0, HERE)
from naive_recurrence import recurrence  # noqa: E402
from h200_common import rel  # noqa: E402
from h200_train import GATE, recur_fn  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--art", required=True)
ap.add_argument("--members", default="ssd,la,gla,gdn,kda")
ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "grads.json"))
args = ap.parse_args()
B, T, H, K = 4, 128, 2, 128
open(args.out, "w").close()   # one file per run (rows are appended as members finish)
for member in args.members.split(","):
    gen = torch.Generator().manual_seed(0)
    rn = lambda *s: torch.randn(*s, generator=gen)
    x = {"q": F.normalize(rn(B, T, H, K), dim=-1).bfloat16(), "k": F.normalize(rn(B, T, H, K), dim=-1).bfloat16(), "v": rn(B, T, H, K).bfloat16()}
    if GATE[member]:
        x["g"] = F.logsigmoid(rn(*((B, T, H, K) if GATE[member] == "channel" else (B, T, H))) + 4.0).float()
    if member in ("gdn", "kda"):
        x["beta"] = torch.sigmoid(rn(B, T, H)).bfloat16()
    do = rn(B, T, H, K)
    ref_o, _, ref_d = recurrence(member, dict(x, s0=torch.zeros(B, H, K, K)), K ** -0.5, None, seeds=(do, torch.zeros(B, H, K, K)))
    row = {"member": member, "shape": [B, T, H, K]}
    for backend in ("tilec", "fla"):
        try:
            xg = {n: t.cuda().requires_grad_(True) for n, t in x.items()}
            kw = {"normalize": False} if member == "la" else {}
            o, _ = recur_fn(member, backend, args.art)(**xg, scale=K ** -0.5, **kw)
            d = torch.autograd.grad((o.float() * do.cuda()).sum(), list(xg.values()))
            row[backend] = {"o": rel(o.cpu(), ref_o), **{f"d{n}": rel(g.cpu(), ref_d[n]) for n, g in zip(xg, d)}}
        except Exception as e:
            row[backend] = f"{type(e).__name__}: {e}"[:500]
    print(json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
