"""tilec's gated-recurrence operators as ``torch.library`` custom ops with autograd (docs/torch.md).

Importing this module needs torch (>= 2.4, ``torch.library.custom_op``); it registers, for each
member of the family (shared/docs/gdn-math.md §1 and dsl-examples/gdn.tile):

- ``gdn``: fla's chunk_gated_delta_rule; g f32 [B, T, HV]; beta; plans gdn_fwd[_varlen],
  gdn_bwd_saved[_varlen] (autograd), gdn_bwd[_varlen]
- ``kda``: chunk_kda; g f32 [B, T, HV, K]; beta; kda_fwd[_varlen], kda_bwd_saved[_varlen], kda_bwd[_varlen]
- ``gla``: chunk_gla; g f32 [B, T, HV, K]; no beta; gla_fwd[_varlen], gla_bwd_saved[_varlen], gla_bwd[_varlen]
- ``ssd``: chunk_simple_gla; g f32 [B, T, HV]; no beta; ssd_fwd[_varlen], ssd_bwd[_varlen]
- ``la``: chunk_linear_attn (and chunk_simple_gla without a gate); no g, no beta; la_fwd[_varlen], la_bwd[_varlen]

these ops (HV = H·G value heads, GVA; N = B, or the number of sequences with ``cu_seqlens``):

- ``tilec::<m>_fwd(q, k, v, [g], [beta], s0, cu_seqlens?, scale, artifacts) -> (o, ht[, ai][, pt])``:
  o ``[B, T, HV, V]`` in v's dtype (bf16 for the plans), ht ``[N, HV, K, V]`` in s0's dtype (f32);
  the delta-rule members (gdn, kda) also ai bf16 ``[B, T, HV, 64]``: Ai = (I + L)^-1 of every
  chunk of 64 (fla's ``A``; row t holds row t − (its chunk's first token) of its chunk's
  inverse, chunks restarting at each sequence; gdn-math.md §3.2–3.3); the per-channel members
  (kda, gla) also pt bf16 ``[B, T, HV, 64]``: the chunks' intra-chunk scores Pᵀ (fla's ``Aqk``,
  key-major: row t is key row j = t − its chunk's first token, column i holds P_ij for i ≥ j;
  gdn-math.md §3.6).
- ``tilec::<m>_bwd(q, k, v, [g], [beta], s0, do, dht, cu_seqlens?, scale, artifacts)
  -> (dq, dk, dv, [dg], [dbeta], ds0)``: every gradient in s0's dtype (the plans' f32), shaped as
  its input; runs ``<m>_bwd[_varlen]``, which recomputes everything from the inputs.
- gdn, kda and gla: ``tilec::<m>_bwd_saved(q, k, v, g, [beta], [ai], [pt], s0, do, dht,
  cu_seqlens?, scale, artifacts) -> (dq, dk, dv, dg, [dbeta], ds0)``: the same gradients from
  ``<m>_bwd_saved[_varlen]``, which takes what the forward saved instead of recomputing it (ai:
  kkt, solve_tril; pt: scores_channel).

The forward's autograd formula (``torch.library.register_autograd``) saves the *inputs* and the
forward's saved outputs (ai for gdn, ai and pt for kda, pt for gla — as fla's chunk_kda saves
``Aqk`` and ``Akk`` and chunk_gla its ``A``; marked non-differentiable) — nothing else: the
backward plan recomputes the other forward stages (W, U, the chunk states) itself — and runs
``<m>_bwd_saved`` (gdn, kda, gla) or ``<m>_bwd`` (ssd, la) with ``do`` and ``dht`` (zeros when the
final state's gradient is None). It returns
fla's dtypes: dq, dk, dv, dg, dbeta cast to their inputs' dtypes (fla: ``dq.to(q)``, ...,
``dg.to(g)``, ``db.to(beta)``), ds0 in s0's dtype (f32), and no gradient for inputs that need
none. ``artifacts`` is the ``tilec build`` folder ('' = ``$TILEC_TORCH_ARTIFACTS``).

The real implementation runs the plan through :func:`run_plan` (an :class:`Operator`), on CUDA
only: CPU tensors raise a ``TensorError`` saying a CUDA device is needed. Fake (meta)
implementations compute every output's shape and dtype from the inputs, so FakeTensorMode,
``make_fx`` and ``torch.compile(fullgraph=True)`` trace the ops without running them. The
``torch.autograd.Function`` classes (fla's names) wrap the same ops and formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .fla import operator
from .operator import TensorError

NAMESPACE = "tilec"

#: The chunk length C of the plans: ai and pt are [B, T, HV, C].
CHUNK = 64


@dataclass(frozen=True)
class Member:
    """One member of the family: ``gate`` is 'scalar' (g [B,T,HV]), 'channel' (g [B,T,HV,K]) or
    None (no gate); ``beta``: the delta rule's write/erase strength beta [B,T,HV] is an input."""

    name: str
    gate: Optional[str]
    beta: bool
    #: What the forward plan also writes and the autograd formula saves for ``<m>_bwd_saved``
    #: (each bf16 [B, T, HV, CHUNK]): ai = (I + L)^-1 per chunk (the delta rule), pt = the
    #: chunks' scores Pᵀ (the per-channel gates).
    saves: tuple = ()

    @property
    def inputs(self) -> tuple:
        """The forward's tensor inputs in plan order (cu_seqlens, scale, artifacts follow)."""
        return ("q", "k", "v") + (("g",) if self.gate else ()) + (("beta",) if self.beta else ()) + ("s0",)

    @property
    def outputs(self) -> tuple:
        """The forward plan's outputs, in order."""
        return ("o", "ht") + self.saves

    @property
    def saved_inputs(self) -> tuple:
        """The ``<m>_bwd_saved`` plan's tensor inputs before do, dht: the saved tensors after g
        and beta, before s0."""
        return self.inputs[:-1] + self.saves + ("s0",)

    @property
    def grads(self) -> tuple:
        """The backward plan's outputs, in the order of :attr:`inputs`."""
        return tuple("d" + n for n in self.inputs)


MEMBERS = {m.name: m for m in (
    Member("gdn", "scalar", True, ("ai",)), Member("kda", "channel", True, ("ai", "pt")), Member("gla", "channel", False, ("pt",)),
    Member("ssd", "scalar", False), Member("la", None, False),
)}


def _schema(member: Member, backward: bool, saved: bool = False) -> str:
    ins = [f"Tensor {n}" for n in (member.saved_inputs if saved else member.inputs)]
    if backward:
        ins += ["Tensor do", "Tensor dht"]
    ins += ["Tensor? cu_seqlens", "float scale", "str artifacts"]
    outs = ", ".join(["Tensor"] * (len(member.grads) if backward else len(member.outputs)))
    return f"({', '.join(ins)}) -> ({outs})"


# ----- the plan runner (the one place that launches; tests replace it with a CPU stand-in) -----

def run_plan(name: str, artifacts: str, args: dict) -> dict:
    """Runs operator plan ``name`` (e.g. ``gdn_fwd_varlen``) on ``args`` (parameter name -> tensor
    or number) and returns its outputs by name. CUDA only: a tensor elsewhere (but a host
    ``cu_seqlens``) raises ``TensorError`` naming it before any plan is loaded."""
    for n, t in args.items():
        if isinstance(t, torch.Tensor) and t.device.type != "cuda" and n != "cu_seqlens":
            raise TensorError(f"tilec::{name}: `{n}` is on {t.device}; tilec's operators run on a CUDA device only (the CPU has no implementation)", n)
    return operator(artifacts, name)(**args)


# ----- real and fake implementations -----

def _named(member: Member, args: tuple, backward: bool, saved: bool = False) -> dict:
    names = (member.saved_inputs if saved else member.inputs) + (("do", "dht") if backward else ()) + ("cu_seqlens", "scale", "artifacts")
    return dict(zip(names, args))


def _plan_args(a: dict) -> tuple:
    varlen = a["cu_seqlens"] is not None
    kw = {n: v for n, v in a.items() if n not in ("artifacts", "cu_seqlens")}
    kw["scale"] = float(a["scale"])
    if varlen:
        kw["cu_seqlens"] = a["cu_seqlens"]
    return ("_varlen" if varlen else ""), kw


def _fwd_impl(member: Member):
    def impl(*args):
        a = _named(member, args, False)
        suffix, kw = _plan_args(a)
        out = run_plan(f"{member.name}_fwd{suffix}", a["artifacts"], kw)
        return tuple(out[n] for n in member.outputs)
    return impl


def _bwd_impl(member: Member, saved: bool = False):
    plan = f"{member.name}_bwd_saved" if saved else f"{member.name}_bwd"

    def impl(*args):
        a = _named(member, args, True, saved)
        suffix, kw = _plan_args(a)
        out = run_plan(f"{plan}{suffix}", a["artifacts"], kw)
        return tuple(out[n] for n in member.grads)
    return impl


def _fwd_fake(member: Member):
    def fake(*args):
        a = _named(member, args, False)
        q, v, s0 = a["q"], a["v"], a["s0"]
        B, T, HV = q.shape[0], q.shape[1], v.shape[2]
        out = (v.new_empty((B, T, HV, v.shape[3])), s0.new_empty(s0.shape))
        return out + tuple(q.new_empty((B, T, HV, CHUNK), dtype=torch.bfloat16) for _ in member.saves)
    return fake


def _bwd_fake(member: Member, saved: bool = False):
    def fake(*args):
        a = _named(member, args, True, saved)
        dt = a["s0"].dtype
        return tuple(a[n].new_empty(a[n].shape, dtype=dt) for n in member.inputs)
    return fake


# ----- autograd -----

def _setup_context(member: Member, returns_saved: bool = True):
    """Saves the inputs, then the forward's saved outputs (``member.saves``: gdn ai, kda ai and
    pt, gla pt — as fla saves ``A``, ``Aqk``, ``Akk``), then cu_seqlens. ``returns_saved``: they
    are outputs of the autograd node (the op), so they are marked non-differentiable (the
    Function classes return (o, ht) only)."""
    def setup_context(ctx, inputs, output):
        a = _named(member, inputs, False)
        kept = tuple(output[2:2 + len(member.saves)])
        if kept and returns_saved:
            ctx.mark_non_differentiable(*kept)
        ctx.save_for_backward(*(a[n] for n in member.inputs), *kept, a["cu_seqlens"])
        ctx.scale, ctx.artifacts = a["scale"], a["artifacts"]
    return setup_context


def _backward(member: Member):
    bwd_op = None
    saved_names = member.inputs + member.saves

    def backward(ctx, do, dht, *_):  # the gradients of ai, pt (non-differentiable) are never used
        nonlocal bwd_op
        if bwd_op is None:
            bwd_op = getattr(getattr(torch.ops, NAMESPACE), f"{member.name}_bwd_saved" if member.saves else f"{member.name}_bwd")
        saved = ctx.saved_tensors
        x = dict(zip(saved_names, saved[:-1]))
        cu = saved[-1]
        q, v, s0 = x["q"], x["v"], x["s0"]
        if do is None:
            do = torch.zeros((q.shape[0], q.shape[1], v.shape[2], v.shape[3]), dtype=v.dtype, device=v.device)
        if dht is None:
            dht = torch.zeros_like(s0)
        # Incoming gradients may be expanded or strided views (e.g. of a .sum()); the plans read dense tensors.
        do = do.to(v.dtype).contiguous()
        dht = dht.to(s0.dtype).contiguous()
        grads = bwd_op(*(x[n] for n in (member.saved_inputs if member.saves else member.inputs)), do, dht, cu, ctx.scale, ctx.artifacts)
        need = ctx.needs_input_grad
        out = [g.to(x[n].dtype) if need[i] else None for i, (n, g) in enumerate(zip(member.inputs, grads))]
        return tuple(out) + (None, None, None)  # cu_seqlens, scale, artifacts
    return backward


def _register(member: Member):
    lib = NAMESPACE
    fwd = torch.library.custom_op(f"{lib}::{member.name}_fwd", _fwd_impl(member), mutates_args=(), schema=_schema(member, False))
    fwd.register_fake(_fwd_fake(member))
    bwd = torch.library.custom_op(f"{lib}::{member.name}_bwd", _bwd_impl(member), mutates_args=(), schema=_schema(member, True))
    bwd.register_fake(_bwd_fake(member))
    if member.saves:
        saved = torch.library.custom_op(f"{lib}::{member.name}_bwd_saved", _bwd_impl(member, True), mutates_args=(), schema=_schema(member, True, True))
        saved.register_fake(_bwd_fake(member, True))
    fwd.register_autograd(_backward(member), setup_context=_setup_context(member))
    return fwd, bwd


OPS = {name: _register(m) for name, m in MEMBERS.items()}


def fwd_op(member: str):
    """The ``torch.ops.tilec.<member>_fwd`` overload packet (for ``torch.library.opcheck``, graphs)."""
    return getattr(getattr(torch.ops, NAMESPACE), f"{member}_fwd")


def bwd_op(member: str):
    """The ``torch.ops.tilec.<member>_bwd`` overload packet (recomputes every forward stage)."""
    return getattr(getattr(torch.ops, NAMESPACE), f"{member}_bwd")


def bwd_saved_op(member: str):
    """The ``torch.ops.tilec.<member>_bwd_saved`` overload packet (gdn, kda, gla: takes what the
    forward saved); the one the autograd formula runs."""
    return getattr(getattr(torch.ops, NAMESPACE), f"{member}_bwd_saved")


def _function(cls_name: str, member: Member):
    """A ``torch.autograd.Function`` over ``tilec::<member>_fwd`` with the ops' autograd formula:
    ``apply(*member.inputs, cu_seqlens, scale, artifacts) -> (o, ht)`` (as fla's Functions; ai and
    pt are saved, not returned)."""
    op = fwd_op(member.name)
    setup_context = _setup_context(member, returns_saved=False)

    def forward(ctx, *args):
        out = op(*args)
        setup_context(ctx, args, out)
        return out[0], out[1]

    bwd = _backward(member)
    plan = f"{member.name}_bwd_saved" if member.saves else f"{member.name}_bwd"
    return type(cls_name, (torch.autograd.Function,), {
        "__doc__": f"fla's {cls_name} over tilec's `{member.name}_fwd` / `{plan}` plans: "
                   f"apply({', '.join(member.inputs)}, cu_seqlens, scale, artifacts) -> (o, ht). "
                   + (f"Saves the inputs and the forward's {', '.join(member.saves)}; the backward plan recomputes the other forward stages."
                      if member.saves else "Saves the inputs; the backward plan recomputes the forward stages."),
        "forward": staticmethod(forward),
        "backward": staticmethod(torch.autograd.function.once_differentiable(bwd)),
    })


ChunkGatedDeltaRuleFunction = _function("ChunkGatedDeltaRuleFunction", MEMBERS["gdn"])
ChunkKDAFunction = _function("ChunkKDAFunction", MEMBERS["kda"])
ChunkGLAFunction = _function("ChunkGLAFunction", MEMBERS["gla"])
ChunkSimpleGLAFunction = _function("ChunkSimpleGLAFunction", MEMBERS["ssd"])
ChunkLinearAttnFunction = _function("ChunkLinearAttnFunction", MEMBERS["la"])

FUNCTIONS = {"gdn": ChunkGatedDeltaRuleFunction, "kda": ChunkKDAFunction, "gla": ChunkGLAFunction,
             "ssd": ChunkSimpleGLAFunction, "la": ChunkLinearAttnFunction}
