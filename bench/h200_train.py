# H200: training through tilec's operators beside fla's (issue 14, docs/training.md).
#
# A 2-layer model (d_model 256; per layer RMSNorm → token mixer → RMSNorm → MLP; the mixer: H = 2
# heads of K = V = 128 after a short causal convolution, q and k l2-normalised, the member's
# gates from linear maps, a per-head RMSNorm on o) learns
# multi-query associative recall (MQAR, generated here: 8 key–value pairs, then the 8 keys
# again in random order among filler tokens; the label at each query is its key's value).
# For each member (gdn, kda, gla, ssd, la) the same seed and data:
#   tilec  — tilec_torch.chunk_* (forward and backward plans from $ART), run twice: the losses
#            must be bitwise identical at every step;
#   tilec_graph — the same, the whole step (forward, backward, clipping, AdamW) captured in one
#            CUDA graph and replayed (train_graph): no per-launch Python cost;
#   fla    — fla 0.6.0's chunk_* (Triton);
#   fla_p, fla_p2, fla_p3, ... — fla again on the same batches with their rows permuted (a
#            different permutation per run, seeded 123, 124, ...): the same mathematics, only
#            the order of floating-point reductions differs (the batch mean, every weight
#            gradient's sum over tokens). Their spread around `fla` (and the envelope of all fla
#            runs) is what the tilec curve is held to.
# Per run: the loss at every step, recall accuracy on 8 held-out batches, tokens per second of
# the training step (steps 2..N, CUDA-synchronised wall time), peak memory, the first step's
# time (tilec: modules loaded from the ahead-of-time artifacts; fla: Triton's cache as found —
# cold on a fresh machine; scripts/h200-run.sh fills it first with five short runs in parallel,
# which record the cold first steps, and passes --warm-fla to the main run).
#
# Usage: python3 bench/h200_train.py --art .device/art [--members gdn,kda,gla,ssd,la]
#        [--steps 300] [--backends tilec,tilec,fla,fla_p,fla_p2,fla_p3] [--out $OUT/train.json]
# Appends one JSON object per run (a cut run keeps what finished); bench/plot_training.py makes
# the table and the plot of docs/training.md from them.
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
from h200_common import MEMBER_BETA, MEMBERS  # noqa: E402
from h200_common import MEMBER_GATE as GATE  # noqa: E402

BETA = tuple(m for m in MEMBERS if MEMBER_BETA[m])
FLA = {"gdn": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"), "kda": ("fla.ops.kda", "chunk_kda"),
       "gla": ("fla.ops.gla", "chunk_gla"), "ssd": ("fla.ops.simple_gla", "chunk_simple_gla"),
       "la": ("fla.ops.linear_attn", "chunk_linear_attn")}
TILEC = {"gdn": "chunk_gated_delta_rule", "kda": "chunk_kda", "gla": "chunk_gla", "ssd": "chunk_simple_gla", "la": "chunk_linear_attn"}

VOCAB, N_KV = 128, 8           # keys 1..63, values 64..127, filler 0
D, H, K = 256, 2, 128
CONV = 4                       # short causal depthwise convolution on q, k, v (fla's ShortConvolution)


def mqar(gen, B, T):
    """tokens [B, T] int64 and labels [B, T] (−100 except at the N_KV query positions)."""
    half = VOCAB // 2
    keys = torch.stack([torch.randperm(half - 1, generator=gen)[:N_KV] + 1 for _ in range(B)])    # distinct keys
    vals = torch.randint(half, VOCAB, (B, N_KV), generator=gen)
    x = torch.zeros(B, T, dtype=torch.long)
    y = torch.full((B, T), -100, dtype=torch.long)
    x[:, 0:2 * N_KV:2], x[:, 1:2 * N_KV:2] = keys, vals
    for b in range(B):
        pos = torch.randperm(T - 2 * N_KV, generator=gen)[:N_KV].sort().values + 2 * N_KV
        order = torch.randperm(N_KV, generator=gen)
        x[b, pos] = keys[b, order]
        y[b, pos] = vals[b, order]
    return x, y


class Mixer(nn.Module):
    def __init__(self, member, recur):
        super().__init__()
        self.member, self.recur = member, recur
        self.q, self.k, self.v = (nn.Linear(D, H * K, bias=False) for _ in range(3))
        # The convolutions let a token see its predecessor (the key before a value) in one layer.
        self.conv = nn.ModuleList(nn.Conv1d(H * K, H * K, CONV, groups=H * K, padding=CONV - 1, bias=False) for _ in range(3)) if CONV else None
        self.onorm = nn.RMSNorm(K)     # per head, as fla's layers (the state's scale varies by member)
        self.o = nn.Linear(H * K, D, bias=False)
        self.a = nn.Linear(D, H * K if GATE[member] == "channel" else H) if GATE[member] else None
        self.b = nn.Linear(D, H) if member in BETA else None

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.conv is not None:
            q, k, v = (F.silu(c(y.transpose(1, 2))[..., :T].transpose(1, 2)) for c, y in zip(self.conv, (q, k, v)))
        q = F.normalize(q.view(B, T, H, K), dim=-1).bfloat16()
        k = F.normalize(k.view(B, T, H, K), dim=-1).bfloat16()
        v = v.view(B, T, H, K).bfloat16()
        kw = {}
        if self.a is not None:   # log decays: logsigmoid(a + 4) ≈ −0.018 at init (slow decay)
            g = F.logsigmoid(self.a(x) + 4.0).float()
            kw["g"] = g.view(B, T, H, K) if GATE[self.member] == "channel" else g.view(B, T, H)
        if self.b is not None:
            kw["beta"] = torch.sigmoid(self.b(x)).bfloat16()
        if self.member == "la":
            kw["normalize"] = False
        o, _ = self.recur(q, k, v, scale=K ** -0.5, **kw)
        return self.o(self.onorm(o.float()).reshape(B, T, H * K))


class Model(nn.Module):
    def __init__(self, member, recur, layers=2):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(nn.ModuleList([nn.RMSNorm(D), Mixer(member, recur), nn.RMSNorm(D),
                                                   nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))])
                                    for _ in range(layers))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, x):
        h = self.emb(x)
        for n1, mix, n2, mlp in self.layers:
            h = h + mix(n1(h))
            h = h + mlp(n2(h))
        return self.head(self.norm(h))


def recur_fn(member, backend, art):
    if backend.startswith("tilec"):
        import tilec_torch
        f = getattr(tilec_torch, TILEC[member])
        return lambda *a, **kw: f(*a, artifacts=art, **kw)
    from h200_common import fla_op
    return fla_op(*FLA[member])


def lr_at(args, step, n):
    """The schedule: linear warm-up over 30 steps, cosine decay to 0 over the n steps."""
    return args.lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * step / n))


def recall(model, held):
    with torch.no_grad():
        hit = tot = 0
        for x, y in held:
            pred = model(x).argmax(-1)
            m = y != -100
            hit += (pred[m] == y[m]).sum().item()
            tot += m.sum().item()
    return hit / tot


def train(member, backend, args, data, held):
    if backend.endswith("_graph"):
        return train_graph(member, backend, args, data, held)
    torch.manual_seed(args.seed)
    model = Model(member, recur_fn(member, backend, args.art)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    # fla_p: permutation seed 123; fla_pN: 122 + N (fla_p2: 124, fla_p3: 125).
    perm = torch.Generator().manual_seed(123 + (int(backend[5:]) - 1 if backend[5:] else 0)) if backend.startswith("fla_p") else None
    losses, times = [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for step, (x, y) in enumerate(data):
        if perm is not None:
            p = torch.randperm(x.shape[0], generator=perm).cuda()
            x, y = x[p], y[p]
        for grp in opt.param_groups:
            grp["lr"] = lr_at(args, step, len(data))
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())   # synchronises
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated()
    B, T = data[0][0].shape
    return {"member": member, "backend": backend, "losses": losses, "recall": recall(model, held),
            "first_step_s": times[0], "tokens_per_s": B * T * (len(times) - 1) / sum(times[1:]),
            "peak_mem_mib": peak / 2 ** 20, "steps": len(losses), "batch": B, "seq": T}


def train_graph(member, backend, args, data, held):
    """The whole training step — forward, loss, backward, gradient clipping, AdamW — captured once
    in a CUDA graph and replayed per step on the batch copied into the captured input buffers,
    the learning rate into a device scalar (AdamW capturable=True). No step touches the host
    (the losses stay on the GPU until the end), so this is the step's speed without Python's
    per-launch cost. The capture needs the optimizer's state to exist, so three warm-up steps
    run first (off the capture stream) and are then undone: parameters restored, AdamW's moments
    and step counts zeroed in place — replay 0 is step 0 of the same run as `tilec`'s, up to
    AdamW's capturable arithmetic (the step count and bias corrections as device tensors)."""
    torch.manual_seed(args.seed)
    model = Model(member, recur_fn(member, backend[:-len("_graph")], args.art)).cuda()
    lr = torch.tensor(0.0, device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, capturable=True)
    x_s, y_s = (t.clone() for t in data[0])
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]

    def step():
        loss = F.cross_entropy(model(x_s).flatten(0, 1), y_s.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        for p, p0 in zip(params, start):
            p.copy_(p0)
        for state in opt.state.values():
            for v in state.values():
                v.zero_()
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss_s = step()
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - t0
    losses = torch.empty(len(data), device="cuda")
    for i, (x, y) in enumerate(data):
        if i == 1:
            torch.cuda.synchronize()
            t1 = time.perf_counter()
        x_s.copy_(x)
        y_s.copy_(y)
        lr.fill_(lr_at(args, i, len(data)))
        graph.replay()
        losses[i].copy_(loss_s)
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    peak = torch.cuda.max_memory_allocated()
    B, T = data[0][0].shape
    return {"member": member, "backend": backend, "losses": losses.tolist(), "recall": recall(model, held),
            "first_step_s": capture_s, "first_step_is": "three warm-up steps and the capture",
            "tokens_per_s": B * T * (len(data) - 1) / (t_end - t1),
            "peak_mem_mib": peak / 2 ** 20, "steps": len(data), "batch": B, "seq": T}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--art", required=True)
    ap.add_argument("--members", default=",".join(MEMBERS))
    ap.add_argument("--backends", default="tilec,tilec,fla,fla_p,fla_p2,fla_p3")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm-fla", action="store_true", help="fla's Triton cache was filled before this run (its first step is then not a cold JIT)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "train.json"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    gen = torch.Generator().manual_seed(args.seed)
    data = [tuple(t.cuda() for t in mqar(gen, args.batch, args.seq)) for _ in range(args.steps)]
    held = [tuple(t.cuda() for t in mqar(torch.Generator().manual_seed(10_000 + i), args.batch, args.seq)) for i in range(8)]
    for member in args.members.split(","):
        for backend in args.backends.split(","):
            try:
                r = train(member, backend, args, data, held)
            except Exception as e:  # recorded, then the next run
                r = {"member": member, "backend": backend, "error": f"{type(e).__name__}: {e}"[:2000]}
            if backend.startswith("fla"):
                r["fla_cache"] = "warm" if args.warm_fla else "as found (cold on a fresh machine for the member's first fla run)"
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(json.dumps({k: v for k, v in r.items() if k != "losses"}), flush=True)


if __name__ == "__main__":
    main()
