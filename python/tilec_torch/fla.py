"""fla-named entry points over tilec's operator plans (docs/torch.md).

Forward with autograd, fla's signatures and ``[B, T, H, D]`` layout, one per member of the family
(shared/docs/gdn-math.md §1: the general recurrence S_t = (I − k_t (b_t⊙k_t)ᵀ) Diag(e^{g_t})
S_{t−1} + k_t (w_t⊙v_t)ᵀ, o_t = S_tᵀ (scale·q_t)):

- :func:`chunk_gated_delta_rule` (GDN: scalar gate, b = w = β),
- :func:`chunk_kda` (KDA: per-channel gate, b = w = β),
- :func:`chunk_gla` (GLA: per-channel gate, b = 0, w = 1),
- :func:`chunk_simple_gla` (SSD / Mamba-2: scalar gate, b = 0, w = 1; no gate: linear attention),
- :func:`chunk_linear_attn` (LA: no gate; fla's optional output normalisation in PyTorch).

Each returns ``(o, final_state)``: o ``[B, T, HV, V]`` in v's dtype (bf16), final_state
``[N, HV, K, V]`` f32, or None unless ``output_final_state``. They call the ``tilec::<m>_fwd``
custom ops (``tilec_torch.ops``), whose backward runs the ``<m>_bwd_saved`` plans for GDN, KDA
and GLA (fed what the forward plan also writes and autograd saves, as fla does: Ai = (I + L)^-1
per chunk for GDN and KDA, fla's ``A`` / ``Akk``; the scores Pᵀ for KDA and GLA, fla's ``Aqk``)
and the ``<m>_bwd`` plans for the others; gradients come
back in the inputs' dtypes, as fla's (dq, dk, dv, dbeta bf16; dg, dh0 f32; dh0 only when
``initial_state`` requires grad).

Shapes and dtypes (the plans'; nothing is converted silently except ``cu_seqlens``, fla's int64
becoming int32): q, k bf16 ``[B, T, H, K]``; v bf16 ``[B, T, HV, V]`` with HV = H·G (GVA: G value
heads share a q/k head); g f32 ``[B, T, HV]`` (scalar) or ``[B, T, HV, K]`` (per channel), the
natural-log decay per token before any cumsum; beta bf16 ``[B, T, HV]``; initial_state f32
``[N, HV, K, V]`` (N = B; with ``cu_seqlens``, N = len(cu_seqlens) − 1 and B must be 1).
``scale`` defaults to K^-0.5. Non-contiguous inputs are made contiguous (as fla's ``input_guard``).
A bad argument raises ``TensorError`` (a ``ValueError``) naming the
tensor, before any launch. The plans run on CUDA only; ``artifacts`` is the ``tilec build``
folder (default ``$TILEC_TORCH_ARTIFACTS``), one (K, V) build per folder.

This module imports without torch; the entry points need it.
"""

from __future__ import annotations

import os
from typing import Optional

from .operator import Operator, TensorError

ENV_ARTIFACTS = "TILEC_TORCH_ARTIFACTS"

#: fla's gradient order of ``chunk_gated_delta_rule_bwd`` (dq, dk, dv, db, dg, dh0) -> plan outputs.
FLA_GRADS = ("dq", "dk", "dv", "dbeta", "dg", "ds0")

_operators: dict = {}


def artifact_dir(artifacts: Optional[str]) -> str:
    """The build folder: ``artifacts``, else ``$TILEC_TORCH_ARTIFACTS``; ValueError when neither."""
    d = artifacts or os.environ.get(ENV_ARTIFACTS)
    if not d:
        raise ValueError(f"no artifact folder: pass artifacts= or set {ENV_ARTIFACTS} to a `tilec build dsl-examples/gdn.tile --target sm_90a -o DIR` output")
    return d


def operator(artifacts: Optional[str], name: str) -> Operator:
    """The loaded plan ``name`` of the build folder (cached per folder and name)."""
    d = artifact_dir(artifacts)
    key = (os.path.abspath(d), name)
    if key not in _operators:
        _operators[key] = Operator(d, name)
    return _operators[key]


# ----- argument checks (shared by the forward wrappers) -----

def _is_tensor(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor)


def _check(fn: str, x: dict, gate: Optional[str], cu_seqlens, fla_opts: dict, scale=None):
    """Checks fla-named arguments; returns (B, T, H, K, HV, V, N). Raises TensorError naming the
    tensor (a required one missing, dtype, rank, sizes, device, B = 1 with cu_seqlens, an empty
    cu_seqlens, initial-state rows) or ``scale`` (not a finite real number)."""
    import math
    import torch

    for n, t in x.items():
        if t is None and n != "initial_state":
            raise TensorError(f"{fn}: `{n}` is required (a torch.Tensor), found None", n)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)):
        raise TensorError(f"{fn}: `scale` must be a finite Python number (None: K ** -0.5), found {type(scale).__name__} {scale!r:.40}", "scale")

    unsupported = {k: v for k, v in fla_opts.items() if k not in _IGNORED_OPTS}
    for k, v in unsupported.items():
        if k not in _FLA_OPTS:
            raise TypeError(f"{fn}() got an unexpected keyword argument '{k}'")
        if v != _FLA_OPTS[k]:
            raise NotImplementedError(f"{fn}: fla's option {k}={v!r} is not supported by tilec's plans (only {k}={_FLA_OPTS[k]!r})")
    want = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.float32,
            "beta": torch.bfloat16, "initial_state": torch.float32}
    for n, t in x.items():
        if t is None:
            continue
        if not _is_tensor(t):
            raise TensorError(f"{fn}: `{n}` must be a torch.Tensor, found {type(t).__name__}", n)
        if t.dtype != want[n]:
            raise TensorError(f"{fn}: `{n}` must be {str(want[n]).replace('torch.', '')} (tilec's plans take it so; convert it yourself), found {str(t.dtype).replace('torch.', '')}", n)
    q, v = x["q"], x["v"]
    if q.dim() != 4:
        raise TensorError(f"{fn}: `q` must be [B, T, H, K], found shape {tuple(q.shape)}", "q")
    B, T, H, K = q.shape
    if tuple(x["k"].shape) != tuple(q.shape):
        raise TensorError(f"{fn}: `k` must have q's shape {tuple(q.shape)} [B, T, H, K], found {tuple(x['k'].shape)}", "k")
    if v.dim() != 4 or tuple(v.shape[:2]) != (B, T):
        raise TensorError(f"{fn}: `v` must be [B, T, HV, V] = [{B}, {T}, HV, V], found shape {tuple(v.shape)}", "v")
    HV, V = v.shape[2], v.shape[3]
    if HV % H != 0:
        raise TensorError(f"{fn}: `v` has {HV} heads, not a multiple of q's H = {H} (GVA needs HV = H·G)", "v")
    if "g" in x:
        shape = (B, T, HV) if gate == "scalar" else (B, T, HV, K)
        if x["g"] is not None and tuple(x["g"].shape) != shape:
            raise TensorError(f"{fn}: `g` must be {list(shape)} ({'[B, T, HV]' if gate == 'scalar' else '[B, T, HV, K]'}), found {tuple(x['g'].shape)}", "g")
    if "beta" in x and tuple(x["beta"].shape) != (B, T, HV):
        raise TensorError(f"{fn}: `beta` must be [B, T, HV] = {[B, T, HV]}, found {tuple(x['beta'].shape)}", "beta")
    N = B
    if cu_seqlens is not None:
        if not _is_tensor(cu_seqlens) or cu_seqlens.dim() != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise TensorError(f"{fn}: `cu_seqlens` must be a 1-D int32 or int64 tensor [N + 1]", "cu_seqlens")
        if B != 1:
            raise TensorError(f"{fn}: the batch size is expected to be 1 rather than {B} when using `cu_seqlens` (fla's rule): flatten the sequences into one row", "q")
        N = cu_seqlens.shape[0] - 1
        if N < 1:
            raise TensorError(f"{fn}: `cu_seqlens` must hold at least two offsets (0 and T), found {cu_seqlens.shape[0]}", "cu_seqlens")
        # The plans take int32 offsets: an int64 table is narrowed without reading it (no host
        # synchronisation, so CUDA graphs work), which is exact while every offset is ≤ T < 2³¹.
        if T >= 2 ** 31:
            raise TensorError(f"{fn}: T = {T} tokens: offsets past 2^31 - 1 do not fit the plans' int32 `cu_seqlens`; split the packed batch", "cu_seqlens")
    s0 = x.get("initial_state")
    if s0 is not None and tuple(s0.shape) != (N, HV, K, V):
        raise TensorError(f"{fn}: `initial_state` must be [N, HV, K, V] = {[N, HV, K, V]} (N = {'len(cu_seqlens) - 1' if cu_seqlens is not None else 'B'}), found {tuple(s0.shape)}", "initial_state")
    for n, t in x.items():
        if t is not None and t.device != q.device:
            raise TensorError(f"{fn}: `{n}` is on {t.device}, but `q` is on {q.device}; every tensor must be on one CUDA device", n)
    return B, T, H, K, HV, V, N


#: fla keyword options and the only value tilec's plans implement.
_FLA_OPTS = {"use_qk_l2norm_in_kernel": False, "use_beta_sigmoid_in_kernel": False, "allow_neg_eigval": False,
             "state_v_first": False, "use_gate_in_kernel": False, "safe_gate": False, "lower_bound": None,
             "disable_recompute": False, "return_intermediate_states": False, "head_first": False,
             "chunk_indices": None, "cp_context": None}
#: fla keywords accepted and not needed (a host copy of cu_seqlens: tilec builds its chunk table on the device).
_IGNORED_OPTS = ("cu_seqlens_cpu",)


def _run(fn: str, member: str, x: dict, scale, initial_state, output_final_state, cu_seqlens, artifacts, gate=None, fla_opts=None):
    import torch
    from . import ops

    B, T, H, K, HV, V, N = _check(fn, dict(x, initial_state=initial_state), gate, cu_seqlens, fla_opts or {}, scale)
    if scale is None:
        scale = K ** -0.5
    if initial_state is None:
        initial_state = torch.zeros((N, HV, K, V), dtype=torch.float32, device=x["q"].device)
    if cu_seqlens is not None and cu_seqlens.dtype == torch.int64:
        cu_seqlens = cu_seqlens.to(torch.int32)
    # As fla's input_guard: the plans read dense row-major tensors (a no-op for contiguous ones).
    args = [t.contiguous() for t in (*x.values(), initial_state)]
    out = ops.fwd_op(member)(*args, cu_seqlens, float(scale), artifacts or "")
    o, ht = out[0], out[1]          # gdn, kda, gla: out[2:] are ai and/or pt, saved by the autograd formula only
    return o, (ht if output_final_state else None)


def chunk_gated_delta_rule(q, k, v, g, beta, scale: Optional[float] = None, initial_state=None, output_final_state: bool = False,
                           cu_seqlens=None, artifacts: Optional[str] = None, **fla_opts):
    """GDN (fla's ``chunk_gated_delta_rule``): S_t = (I − β_t k_t k_tᵀ) e^{g_t} S_{t−1} + β_t k_t v_tᵀ,
    o_t = S_tᵀ (scale·q_t) (gdn-math.md §1), through the ``gdn_fwd[_varlen]`` / ``gdn_bwd_saved[_varlen]`` plans.

    q, k bf16 [B, T, H, K]; v bf16 [B, T, HV, V]; g f32 [B, T, HV] (log decay); beta bf16 [B, T, HV];
    initial_state f32 [N, HV, K, V]. Returns (o bf16 [B, T, HV, V], final_state f32 [N, HV, K, V]
    or None). fla options other than their defaults (e.g. ``use_qk_l2norm_in_kernel=True``) raise
    NotImplementedError; bad tensors raise TensorError naming them."""
    return _run("chunk_gated_delta_rule", "gdn", dict(q=q, k=k, v=v, g=g, beta=beta), scale, initial_state,
                output_final_state, cu_seqlens, artifacts, "scalar", fla_opts)


def chunk_kda(q, k, v, g, beta, scale: Optional[float] = None, initial_state=None, output_final_state: bool = False,
              cu_seqlens=None, artifacts: Optional[str] = None, **fla_opts):
    """KDA (fla's ``chunk_kda``): GDN with a per-channel gate, S_t = (I − β_t k_t k_tᵀ) Diag(e^{g_t})
    S_{t−1} + β_t k_t v_tᵀ (gdn-math.md §1, §5), through ``kda_fwd[_varlen]`` / ``kda_bwd_saved[_varlen]``.

    g f32 [B, T, HV, K]; the rest as :func:`chunk_gated_delta_rule`."""
    return _run("chunk_kda", "kda", dict(q=q, k=k, v=v, g=g, beta=beta), scale, initial_state,
                output_final_state, cu_seqlens, artifacts, "channel", fla_opts)


def chunk_gla(q, k, v, g, scale: Optional[float] = None, initial_state=None, output_final_state: bool = False,
              cu_seqlens=None, artifacts: Optional[str] = None, **fla_opts):
    """GLA (fla's ``chunk_gla``): S_t = Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ (scale·q_t),
    through ``gla_fwd[_varlen]`` / ``gla_bwd_saved[_varlen]``. g f32 [B, T, HV, K]; no beta."""
    return _run("chunk_gla", "gla", dict(q=q, k=k, v=v, g=g), scale, initial_state,
                output_final_state, cu_seqlens, artifacts, "channel", fla_opts)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale: Optional[float] = None, initial_state=None,
                     output_final_state: bool = False, cu_seqlens=None, artifacts: Optional[str] = None, **fla_opts):
    """SSD / Mamba-2 (fla's ``chunk_simple_gla``): S_t = e^{g_t} S_{t−1} + k_t v_tᵀ with a scalar
    gate per token and head, through ``ssd_fwd[_varlen]`` / ``ssd_bwd[_varlen]``.

    g f32 [B, T, HV]; or ``g_gamma`` f32 [HV], a constant log decay per head (expanded to g, so a
    g_gamma that requires grad gets the summed dg); neither: linear attention (``la_*`` plans)."""
    import torch

    if g is not None and g_gamma is not None:
        raise ValueError("chunk_simple_gla: give only one of `g` and `g_gamma` (fla's rule)")
    if g_gamma is not None:
        if not _is_tensor(g_gamma) or g_gamma.dtype != torch.float32 or g_gamma.dim() != 1 or not _is_tensor(v) or v.dim() != 4 or g_gamma.shape[0] != v.shape[2]:
            raise TensorError(f"chunk_simple_gla: `g_gamma` must be an f32 tensor [HV] (one log decay per value head), found {getattr(g_gamma, 'shape', type(g_gamma).__name__)}", "g_gamma")
        g = g_gamma.view(1, 1, -1).expand(v.shape[0], v.shape[1], v.shape[2]).contiguous()
    if g is None:
        return _run("chunk_simple_gla", "la", dict(q=q, k=k, v=v), scale, initial_state,
                    output_final_state, cu_seqlens, artifacts, None, fla_opts)
    return _run("chunk_simple_gla", "ssd", dict(q=q, k=k, v=v, g=g), scale, initial_state,
                output_final_state, cu_seqlens, artifacts, "scalar", fla_opts)


def chunk_linear_attn(q, k, v, scale: Optional[float] = None, initial_state=None, output_final_state: bool = False,
                      normalize: bool = True, cu_seqlens=None, artifacts: Optional[str] = None, **fla_opts):
    """Linear attention (fla's ``chunk_linear_attn``): S_t = S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ (scale·q_t),
    through ``la_fwd[_varlen]`` / ``la_bwd[_varlen]``.

    With ``normalize`` (fla's default) o_t is divided by ⟨scale·q_t, z_t⟩ + 1e-10, z_t = z_0 + Σ_{s≤t} k_s
    within the sequence (fla's ``normalize_with_z_state``), in PyTorch ops (f32, autograd by torch);
    with GVA the q/k head's denominator divides each of its G value heads. ``initial_state`` is then
    a tuple ``(kv_state f32 [N, HV, K, V], z_state [N, 1, H, K])`` (either may be None) or a tensor
    (kv only), and the final state ``(kv_state, z_state)`` (z in k's dtype, as fla)."""
    z0 = None
    if normalize and isinstance(initial_state, tuple):
        initial_state, z0 = initial_state
    if z0 is not None and _is_tensor(q) and q.dim() == 4:
        # fla's z_state is [N, 1, H, K] (N = B, or the sequences of cu_seqlens): checked before any
        # launch, as broadcasting would otherwise accept a wrong one silently (a breaking pass).
        n = q.shape[0] if cu_seqlens is None or not _is_tensor(cu_seqlens) else cu_seqlens.shape[0] - 1
        want = (n, 1, q.shape[2], q.shape[3])
        if not _is_tensor(z0) or tuple(z0.shape) != want:
            raise TensorError(f"chunk_linear_attn: the z_state of `initial_state` must be [N, 1, H, K] = {list(want)}, found {tuple(z0.shape) if _is_tensor(z0) else type(z0).__name__}", "initial_state")
    o, ht = _run("chunk_linear_attn", "la", dict(q=q, k=k, v=v), scale, initial_state,
                 True, cu_seqlens, artifacts, None, fla_opts)
    if not normalize:
        return o, (ht if output_final_state else None)
    o, z = normalize_output(o, q, k, q.shape[-1] ** -0.5 if scale is None else scale, z0, cu_seqlens)
    return o, ((ht, z) if output_final_state else None)


def normalize_output(o, q, k, scale: float, z0=None, cu_seqlens=None):
    """fla's linear-attention normalisation: o_t / (⟨scale·q_t, z_t⟩ + 1e-10) with z_t = z0 + Σ_{s≤t} k_s
    per sequence (``fla/ops/linear_attn/utils.py``). o [B, T, HV, V]; q, k [B, T, H, K]; z0 [N, 1, H, K]
    or None. Returns (o in o's dtype, z_T [N, 1, H, K] in k's dtype). Computed in f32 (f64 for f64
    inputs) with torch ops
    (differentiable; no host synchronisation: sequence ids come from ``searchsorted``)."""
    import torch

    B, T, H, K = q.shape
    HV, V = o.shape[2], o.shape[3]
    f = torch.promote_types(q.dtype, torch.float32)
    kc = k.to(f).cumsum(1)
    if cu_seqlens is not None:
        cu = cu_seqlens.to(device=k.device, dtype=torch.int64)
        seq = torch.searchsorted(cu[1:], torch.arange(T, device=k.device), right=True)   # sequence of each token
        kc = kc - torch.cat([kc.new_zeros(B, 1, H, K), kc], 1)[:, cu[:-1][seq]]          # restart at each sequence
        if z0 is not None:
            kc = kc + z0.to(f)[:, 0][seq].unsqueeze(0)
        z = kc[0, cu[1:] - 1].unsqueeze(1)
    else:
        if z0 is not None:
            kc = kc + z0.to(f)
        z = kc[:, -1:]
    den = (q.to(f) * scale * kc).sum(-1) + 1e-10                                      # [B, T, H]
    out = o.to(f).view(B, T, H, HV // H, V) / den[..., None, None]
    return out.view(B, T, HV, V).to(o.dtype), z.to(k.dtype)


# ----- the backward alone (the gdn_bwd plan with fla's names) -----

def gdn_bwd_arguments(q, k, v, g, beta, do, scale=None, initial_state=None, dht=None, cu_seqlens=None):
    """The plan's operator name and keyword arguments for fla-named inputs (no GPU needed):
    zero states where fla's are None, ``scale = K ** -0.5`` by default, cu_seqlens as int32."""
    import torch

    varlen = cu_seqlens is not None
    B, _, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    n = B * (cu_seqlens.numel() - 1) if varlen else B
    dev = q.device
    if initial_state is None:
        initial_state = torch.zeros((n, HV, K, V), dtype=torch.float32, device=dev)
    if dht is None:
        dht = torch.zeros((n, HV, K, V), dtype=torch.float32, device=dev)
    if scale is None:
        scale = K ** -0.5
    kw = dict(q=q, k=k, v=v, g=g, beta=beta, s0=initial_state, do=do, dht=dht, scale=float(scale))
    if varlen:
        if cu_seqlens.dtype == torch.int64:
            cu_seqlens = cu_seqlens.to(torch.int32)
        kw["cu_seqlens"] = cu_seqlens
    return ("gdn_bwd_varlen" if varlen else "gdn_bwd"), kw


def chunk_gated_delta_rule_bwd(q, k, v, g, beta, do, scale=None, initial_state=None, dht=None, cu_seqlens=None, artifacts: Optional[str] = None):
    """The gated delta rule's backward alone through the ``gdn_bwd`` / ``gdn_bwd_varlen`` plan.

    Returns fla's ``(dq, dk, dv, db, dg, dh0)``, every one f32 (the plan's; the autograd path of
    :func:`chunk_gated_delta_rule` casts them to the inputs' dtypes); ``dh0`` is None when
    ``initial_state`` is None (as fla). ``artifacts``: the build folder (default: the
    ``TILEC_TORCH_ARTIFACTS`` environment variable)."""
    name, kw = gdn_bwd_arguments(q, k, v, g, beta, do, scale, initial_state, dht, cu_seqlens)
    out = operator(artifacts, name)(**kw)
    grads = tuple(out[n] for n in FLA_GRADS)
    return grads[:5] + ((grads[5] if initial_state is not None else None),)
