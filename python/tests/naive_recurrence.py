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

The delta-rule members' forward plans (gdn, kda) also write ai = (I + L)^-1 of every chunk of
C = 64 tokens (fla's ``A``, gdn-math.md §3.2–3.3), and their ``<m>_bwd_saved`` plans take it back:
:func:`chunk_inverses` computes it exactly in fp64; the stand-in returns it rounded to bf16 and
refuses a saved backward whose ai is not exactly that (the forward's) tensor's values. The
per-channel members' forward plans (kda, gla) likewise write pt, the chunks' scores Pᵀ (fla's
``Aqk``, §3.6; :func:`chunk_scores`), which their saved backward takes back.
"""

import torch

#: member -> (gate, beta): the tensor inputs of its plans (tilec_torch.ops.MEMBERS mirrors it).
MEMBERS = {"gdn": ("scalar", True), "kda": ("channel", True), "gla": ("channel", False), "ssd": ("scalar", False), "la": (None, False)}

#: The plans' chunk length: ai is [B, T, HV, C].
C = 64


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
    """a = e^{g_t} [..., HV, K or 1, 1] (ones without a gate), k [..., HV, K], β [..., HV, 1]
    (None: b = 0, w = 1); `...` is the batch rows when `b` is a slice (dense inputs)."""
    k = x["k"][b, t].double().repeat_interleave(G, -2)
    if gate == "scalar":
        a = x["g"][b, t].double().exp()[..., None, None]
    elif gate == "channel":
        a = x["g"][b, t].double().exp()[..., None]
    else:
        a = k.new_ones(*k.shape[:-1], 1, 1)
    beta = x["beta"][b, t].double()[..., None] if has_beta else None
    return a, k, beta


def recurrence(member, x, scale, cu=None, seeds=None):
    """o [B, T, HV, V] and ht [N, HV, K, V] in float64 from plan-named inputs ``x`` (q, k, v, [g],
    [beta], s0); states per sequence, each starting from its s0 row. With ``seeds = (do, dht)``
    also the exact gradients of Σ o⊙do + Σ ht⊙dht (gdn-math.md §2, serial.rs: the reverse
    recurrence D ← Diag(a)(I − e kᵀ)(D + q̃ doᵀ)) as a dict d<input> in float64.

    Runs on the inputs' device. Dense inputs (``cu`` None) step all B rows at once; the backward
    keeps one state S_t per token (B·HV·K·V float64 each: 16.8 MB at B=8, HV=16, K=V=128, so
    T = 2048 holds 34 GB — pass fewer rows at a time where that does not fit)."""
    gate, has_beta = MEMBERS[member]
    q, v, s0 = x["q"].double(), x["v"].double(), x["s0"].double()
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    dev = q.device
    o = torch.zeros(B, T, HV, v.shape[3], dtype=torch.float64, device=dev)
    ht = s0.clone()
    d = {n: torch.zeros(x[n].shape, dtype=torch.float64, device=dev) for n in inputs_of(member)}
    rows = [(slice(None), 0, T, slice(None))] if cu is None else sequences(B, T, cu)
    for b, t0, t1, n in rows:
        S, states = s0[n], [s0[n]]                                       # states[i] = S_{t0+i−1}
        for t in range(t0, t1):
            a, k, beta = _token(gate, has_beta, x, b, t, G)
            Sh = a * S                                                   # Ŝ = Diag(a) S
            delta = v[b, t] if beta is None else beta * (v[b, t] - torch.einsum("...k,...kv->...v", k, Sh))
            S = Sh + k[..., None] * delta[..., None, :]
            o[b, t] = scale * torch.einsum("...k,...kv->...v", q[b, t].repeat_interleave(G, -2), S)
            states.append(S)
        ht[n] = S
        if seeds is None:
            continue
        do, D = seeds[0].double(), seeds[1][n].double().clone()          # D = ∂L/∂S_t
        for t in reversed(range(t0, t1)):
            a, k, beta = _token(gate, has_beta, x, b, t, G)
            S = states.pop()
            Sh = a * states[-1]                                          # as the forward computed it
            delta = v[b, t] if beta is None else beta * (v[b, t] - torch.einsum("...k,...kv->...v", k, Sh))
            qt = scale * q[b, t].repeat_interleave(G, -2)
            D = D + qt[..., None] * do[b, t][..., None, :]
            dq = scale * torch.einsum("...kv,...v->...k", S, do[b, t])
            dk = torch.einsum("...kv,...v->...k", D, delta)
            ddelta = torch.einsum("...kv,...k->...v", D, k)
            if beta is None:                                             # b = 0, w = 1
                dv, dbeta, dSh = ddelta, None, D
            else:                                                        # b = w = β
                de = -torch.einsum("...kv,...v->...k", Sh, ddelta)
                dk = dk + de * beta
                dv = ddelta * beta
                dbeta = (de * k).sum(-1) + (ddelta * v[b, t]).sum(-1)
                dSh = D - (beta * k)[..., None] * ddelta[..., None, :]
            dg = (dSh * Sh).sum(-1)                                      # [..., HV, K]
            D = a * dSh
            d["q"][b, t] += dq.unflatten(-2, (H, G)).sum(-2)
            d["k"][b, t] += dk.unflatten(-2, (H, G)).sum(-2)
            d["v"][b, t] = dv
            if gate == "scalar":
                d["g"][b, t] = dg.sum(-1)
            elif gate == "channel":
                d["g"][b, t] = dg
            if dbeta is not None:
                d["beta"][b, t] = dbeta
        d["s0"][n] = D
    return o, ht, d


def _chunks(member, x, cu):
    """Every chunk of C tokens of every sequence (chunks restart at each sequence; the last may be
    partial, c ≤ C rows), as (b, c0, c1, head): head(name) is that input's chunk rows per value
    head, [HV, c, ·] float64 (q and k repeated over each key head's G value heads), and "gam" the
    chunk-local cumulative gate Γ, [HV, c, K] (a scalar gate [HV, c, 1])."""
    gate, _ = MEMBERS[member]
    B, T, H, _ = x["k"].shape
    G = x["v"].shape[2] // H
    for b, t0, t1, _ in sequences(B, T, cu):
        for c0 in range(t0, t1, C):
            c1 = min(c0 + C, t1)

            def head(name, b=b, c0=c0, c1=c1):
                if name == "gam":
                    g = x["g"][b, c0:c1].double().cumsum(0)
                    return (g[:, :, None] if gate == "scalar" else g).transpose(0, 1)
                t = x[name][b, c0:c1].double()
                t = t.repeat_interleave(G, 1) if name in ("q", "k") else t
                return t.transpose(0, 1)
            yield b, c0, c1, head


def _decays(gam, c, strict):
    """e^{Γ_i − Γ_j} [HV, c, c, 1 or K] for i > j (``strict``) or i ≥ j, 0 elsewhere."""
    lower = torch.ones(c, c, dtype=torch.bool).tril(-1 if strict else 0)[None, :, :, None]
    return torch.where(lower, gam[:, :, None, :] - gam[:, None, :, :], -torch.inf).exp()


def chunk_inverses(member, x, cu=None):
    """ai [B, T, HV, C] float64: per sequence and chunk of C tokens (:func:`_chunks`), with Γ the
    chunk-local cumulative gate,
        L_ij = β_i Σ_c k_ic k_jc e^{Γ_ic − Γ_jc}  (i > j; 0 otherwise)       (gdn-math.md §3.2)
    and Ai = (I + L)^-1 (§3.3); row t of ai holds row t − t_chunk of its chunk's Ai in columns
    0..c−1, zeros after."""
    assert MEMBERS[member][1], f"{member} has no Ai (only the delta-rule members gdn, kda)"
    B, T, HV = x["v"].shape[:3]
    ai = torch.zeros(B, T, HV, C, dtype=torch.float64)
    for b, c0, c1, head in _chunks(member, x, cu):
        c, kc = c1 - c0, head("k")                                                  # [HV, c, K]
        dec = _decays(head("gam"), c, strict=True)
        L = torch.einsum("hik,hjk,hijk->hij", kc, kc, dec.expand(HV, c, c, kc.shape[2]))
        L = L * head("beta")[:, :, None]                                            # row i times β_i
        eye = torch.eye(c, dtype=torch.float64).expand(HV, c, c)
        inv = torch.linalg.solve_triangular(eye + L, eye, upper=False, unitriangular=True)
        ai[b, c0:c1, :, :c] = inv.transpose(0, 1)
    return ai


def chunk_scores(member, x, scale, cu=None):
    """pt [B, T, HV, C] float64: per sequence and chunk of C tokens (:func:`_chunks`), with Γ the
    chunk-local cumulative gate, the scores
        P_ij = scale Σ_c q_ic k_jc e^{Γ_ic − Γ_jc}  (i ≥ j; 0 otherwise)        (gdn-math.md §3.6)
    stored key-major: row t of pt holds, for key row j = t − t_chunk, P_ij in column i (0 for
    i < j and past the chunk's c rows)."""
    assert MEMBERS[member][0] == "channel", f"{member} saves no scores (only the per-channel members kda, gla)"
    B, T, HV = x["v"].shape[:3]
    pt = torch.zeros(B, T, HV, C, dtype=torch.float64)
    for b, c0, c1, head in _chunks(member, x, cu):
        c = c1 - c0
        P = scale * torch.einsum("hik,hjk,hijk->hij", head("q"), head("k"), _decays(head("gam"), c, strict=False))
        pt[b, c0:c1, :, :c] = P.transpose(1, 2).transpose(0, 1)                   # [c (j), HV, c (i)]
    return pt


class StandIn:
    """Replaces ``run_plan(name, artifacts, args)``: plan ``<member>_fwd[_varlen]`` returns
    {o, ht} and, for gdn and kda, ai (bf16 [B, T, HV, C], :func:`chunk_inverses` rounded), for
    kda and gla pt (:func:`chunk_scores` rounded); ``<member>_bwd[_varlen]`` and (gdn, kda, gla)
    ``<member>_bwd_saved[_varlen]`` return {dq, dk, dv, [dg], [dbeta], ds0} — gradients of
    Σ o⊙do + Σ ht⊙dht — in s0's dtype, as the plans. The saved backward asserts that its ai and pt
    are the forward's: bf16 [B, T, HV, C], equal bit for bit to those the forward returns for these
    inputs. Records every call in ``calls``."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, artifacts, args):
        self.calls.append((name, artifacts, dict(args)))
        parts = name.split("_")
        member, kind, varlen, saved = parts[0], parts[1], name.endswith("_varlen"), "saved" in parts
        names = inputs_of(member)
        has_ai, has_pt = MEMBERS[member][1], MEMBERS[member][0] == "channel"
        kept = ({"ai"} if has_ai else set()) | ({"pt"} if has_pt else set())
        assert not saved or (kind == "bwd" and kept), f"{name}: no such plan (only gdn, kda and gla have a saved backward)"
        expect = set(names) | {"scale"} | ({"do", "dht"} if kind == "bwd" else set()) | ({"cu_seqlens"} if varlen else set()) | (kept if saved else set())
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
            out = {"o": o.to(args["v"].dtype), "ht": ht.to(st)}
            if has_ai:
                out["ai"] = chunk_inverses(member, args, cu).to(torch.bfloat16)
            if has_pt:
                out["pt"] = chunk_scores(member, args, args["scale"], cu).to(torch.bfloat16)
            return out
        if saved:
            B, T, HV = args["v"].shape[:3]
            forward = {"ai": lambda: chunk_inverses(member, args, cu), "pt": lambda: chunk_scores(member, args, args["scale"], cu)}
            for n in sorted(kept):
                t = args[n]
                assert t.dtype == torch.bfloat16 and tuple(t.shape) == (B, T, HV, C), \
                    f"{name}: `{n}` is {t.dtype} {tuple(t.shape)}, the plan takes bf16 {(B, T, HV, C)} (the forward's)"
                assert torch.equal(t, forward[n]().to(torch.bfloat16)), \
                    f"{name}: `{n}` is not the one the forward returned for these inputs"
        _, _, d = recurrence(member, args, args["scale"], cu, (args["do"], args["dht"]))
        return {"d" + n: d[n].to(st) for n in names}
