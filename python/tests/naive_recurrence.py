"""A CPU stand-in for tilec's forward and backward plans: the token-serial fp64 recurrence of
shared/docs/gdn-math.md §2 and its exact backward (kverify's oracle, verifier/src/recurrence/serial.rs)
in PyTorch, written out by hand (no torch.autograd: it runs inside the custom ops, below autograd). Tests install :class:`StandIn` as ``tilec_torch.ops.run_plan``
so the custom ops, their fake implementations and their autograd wiring run without a GPU. It
checks what the real plans would refuse (parameter set, contiguity, dtypes of offsets).

Per sequence and value head hv (q/k head hv // G), t in the sequence:
    Ŝ = Diag(e^{g_t}) S_{t−1};  δ_t = w_t ⊙ v_t − Ŝᵀ (b_t ⊙ k_t);  S_t = Ŝ + k_t δ_tᵀ;  o_t = S_tᵀ (scale·q_t)
with b = w = β (GDN, KDA), b = 0 and w = 1 (SSD, GLA, LA); g a scalar (GDN, SSD), per key channel
(KDA, GLA) or 0 (LA). Gradients: scalar gate dg = Σ_c dg_c; dβ = Σ_c db_c + Σ_v dw_v; GVA sums dq
and dk over the G value heads of a q/k head.
"""

import torch

#: member -> (gate, beta): the tensor inputs of its plans (tilec_torch.ops.MEMBERS mirrors it).
MEMBERS = {"gdn": ("scalar", True), "kda": ("channel", True), "gla": ("channel", False), "ssd": ("scalar", False), "la": (None, False)}


def inputs_of(member):
    gate, beta = MEMBERS[member]
    return ("q", "k", "v") + (("g",) if gate else ()) + (("beta",) if beta else ()) + ("s0",)


def sequences(B, T, cu):
    """(batch row, first token, end, state row) of every sequence."""
    if cu is None:
        return [(b, 0, T, b) for b in range(B)]
    cu = [int(c) for c in cu.tolist()]
    return [(b, cu[i], cu[i + 1], b * (len(cu) - 1) + i) for b in range(B) for i in range(len(cu) - 1)]


def _token(gate, has_beta, x, b, t, G):
    """a = e^{g_t} [HV, K, 1] (ones without a gate), e = b⊙k [HV, K], w [HV, 1] (None: w = 1)."""
    k = x["k"][b, t].double().repeat_interleave(G, 0)
    HV, K = k.shape
    if gate == "scalar":
        a = x["g"][b, t].double().exp()[:, None, None].expand(HV, K, 1)
    elif gate == "channel":
        a = x["g"][b, t].double().exp()[:, :, None]
    else:
        a = k.new_ones(HV, K, 1)
    beta = x["beta"][b, t].double()[:, None] if has_beta else None
    return a, k, beta


def recurrence(member, x, scale, cu=None, seeds=None):
    """o [B, T, HV, V] and ht [N, HV, K, V] in float64 from plan-named inputs ``x`` (q, k, v, [g],
    [beta], s0); states per sequence, each starting from its s0 row. With ``seeds = (do, dht)``
    also the exact gradients of Σ o⊙do + Σ ht⊙dht (gdn-math.md §2, serial.rs: the reverse
    recurrence D ← Diag(a)(I − e kᵀ)(D + q̃ doᵀ)) as a dict d<input> in float64."""
    gate, has_beta = MEMBERS[member]
    q, v, s0 = x["q"].double(), x["v"].double(), x["s0"].double()
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    o = torch.zeros(B, T, HV, v.shape[3], dtype=torch.float64)
    ht = s0.clone()
    d = {n: torch.zeros(x[n].shape, dtype=torch.float64) for n in inputs_of(member)}
    for b, t0, t1, n in sequences(B, T, cu):
        S, steps = s0[n], []
        for t in range(t0, t1):
            a, k, beta = _token(gate, has_beta, x, b, t, G)
            Sh = a * S                                                   # Ŝ = Diag(a) S
            delta = v[b, t] if beta is None else beta * (v[b, t] - torch.einsum("hk,hkv->hv", k, Sh))
            S = Sh + k[:, :, None] * delta[:, None, :]
            o[b, t] = scale * torch.einsum("hk,hkv->hv", q[b, t].repeat_interleave(G, 0), S)
            steps.append((t, a, k, beta, Sh, delta, S))
        ht[n] = S
        if seeds is None:
            continue
        do, D = seeds[0].double(), seeds[1][n].double().clone()          # D = ∂L/∂S_t
        for t, a, k, beta, Sh, delta, S in reversed(steps):
            qt = scale * q[b, t].repeat_interleave(G, 0)
            D = D + qt[:, :, None] * do[b, t][:, None, :]
            dq = scale * torch.einsum("hkv,hv->hk", S, do[b, t])
            dk = torch.einsum("hkv,hv->hk", D, delta)
            ddelta = torch.einsum("hkv,hk->hv", D, k)
            if beta is None:                                             # b = 0, w = 1
                dv, dbeta, dSh = ddelta, None, D
            else:                                                        # b = w = β
                de = -torch.einsum("hkv,hv->hk", Sh, ddelta)
                dk = dk + de * beta
                dv = ddelta * beta
                dbeta = (de * k).sum(1) + (ddelta * v[b, t]).sum(1)
                dSh = D - (beta * k)[:, :, None] * ddelta[:, None, :]
            dg = (dSh * Sh).sum(2)                                       # [HV, K]
            D = a * dSh
            d["q"][b, t] += dq.view(H, G, K).sum(1)
            d["k"][b, t] += dk.view(H, G, K).sum(1)
            d["v"][b, t] = dv
            if gate == "scalar":
                d["g"][b, t] = dg.sum(1)
            elif gate == "channel":
                d["g"][b, t] = dg
            if dbeta is not None:
                d["beta"][b, t] = dbeta
        d["s0"][n] = D
    return o, ht, d


class StandIn:
    """Replaces ``run_plan(name, artifacts, args)``: plan ``<member>_fwd[_varlen]`` returns
    {o, ht}; ``<member>_bwd[_varlen]`` returns {dq, dk, dv, [dg], [dbeta], ds0} — gradients of
    Σ o⊙do + Σ ht⊙dht — in s0's dtype, as the plans. Records every call in ``calls``."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, artifacts, args):
        self.calls.append((name, artifacts, dict(args)))
        parts = name.split("_")
        member, kind, varlen = parts[0], parts[1], name.endswith("_varlen")
        names = inputs_of(member)
        expect = set(names) | {"scale"} | ({"do", "dht"} if kind == "bwd" else set()) | ({"cu_seqlens"} if varlen else set())
        assert set(args) == expect, f"{name}: parameters {sorted(args)}, the plan has {sorted(expect)}"
        for n, t in args.items():
            if isinstance(t, torch.Tensor):
                assert t.is_contiguous(), f"{name}: `{n}` is not contiguous (the plan reads dense tensors)"
        assert isinstance(args["scale"], float)
        cu = args.get("cu_seqlens")
        if cu is not None:
            assert cu.dtype == torch.int32, f"{name}: cu_seqlens is {cu.dtype}, the plan takes int32"
        st = args["s0"].dtype
        if kind == "fwd":
            o, ht, _ = recurrence(member, args, args["scale"], cu)
            return {"o": o.to(args["v"].dtype), "ht": ht.to(st)}
        _, _, d = recurrence(member, args, args["scale"], cu, (args["do"], args["dht"]))
        return {"d" + n: d[n].to(st) for n in names}
