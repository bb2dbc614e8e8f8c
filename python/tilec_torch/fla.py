"""fla-style entry points over tilec's operator plans.

Only the **backward** of the gated delta rule exists as a plan today (``gdn_bwd`` and
``gdn_bwd_varlen`` in ``dsl-examples/gdn.tile``). The forward (``chunk_gated_delta_rule``: output
and final state) is not built by tilec yet, so it raises ``NotImplementedError``; so does the
autograd/custom-op wrapper, which needs it.

Layout is fla's: q, k ``[B, T, H, K]``; v, do ``[B, T, HV, V]``; g (log decay per token, before
any cumsum), beta ``[B, T, HV]``; states ``[N, HV, K, V]`` (N = B, or the number of sequences with
``cu_seqlens``). GVA (HV a multiple of H) is supported. dtypes are the plan's: q, k, v, beta, do
bf16; g, initial_state, dht f32 — nothing is converted silently except ``cu_seqlens`` (fla's
int64 becomes int32). Gradients come back in f32 (docs/operators.md: round once to get a bf16 one).
"""

from __future__ import annotations

import os
from typing import Optional

from .operator import Operator

ENV_ARTIFACTS = "TILEC_TORCH_ARTIFACTS"

#: fla's argument names -> the plan's parameter names (both operators).
FLA_TO_PLAN = {"q": "q", "k": "k", "v": "v", "g": "g", "beta": "beta", "initial_state": "s0", "do": "do", "dht": "dht", "cu_seqlens": "cu_seqlens", "scale": "scale"}
#: fla's gradient order (``chunk_gated_delta_rule_bwd`` returns dq, dk, dv, db, dg, dh0) -> plan outputs.
FLA_GRADS = ("dq", "dk", "dv", "dbeta", "dg", "ds0")

_operators: dict = {}


def _operator(artifacts: Optional[str], name: str) -> Operator:
    d = artifacts or os.environ.get(ENV_ARTIFACTS)
    if not d:
        raise ValueError(f"no artifact folder: pass artifacts= or set {ENV_ARTIFACTS} to a `tilec build dsl-examples/gdn.tile --target sm_90a -o DIR` output")
    key = (os.path.abspath(d), name)
    if key not in _operators:
        _operators[key] = Operator(d, name)
    return _operators[key]


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
    """The gated delta rule's backward through tilec's ``gdn_bwd`` / ``gdn_bwd_varlen`` plan.

    Returns fla's ``(dq, dk, dv, db, dg, dh0)``, every one f32; ``dh0`` is None when
    ``initial_state`` is None (as fla). ``artifacts``: the build folder (default: the
    ``TILEC_TORCH_ARTIFACTS`` environment variable)."""
    name, kw = gdn_bwd_arguments(q, k, v, g, beta, do, scale, initial_state, dht, cu_seqlens)
    out = _operator(artifacts, name)(**kw)
    grads = tuple(out[n] for n in FLA_GRADS)
    return grads[:5] + ((grads[5] if initial_state is not None else None),)


def chunk_gated_delta_rule(*args, **kwargs):
    """fla's forward. Not available: tilec builds no forward operator plan yet (only the backward,
    ``gdn_bwd``); see docs/torch.md."""
    raise NotImplementedError("tilec_torch.chunk_gated_delta_rule: the forward is not built by tilec yet (only the backward plan gdn_bwd exists); use chunk_gated_delta_rule_bwd for gradients")
