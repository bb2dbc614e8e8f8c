"""tilec_torch: tilec's ahead-of-time compiled operators called from PyTorch (docs/torch.md).

Loads a ``tilec build`` output folder (operator plans, kernel metadata, cubin/PTX), checks torch
tensors against the metadata before any launch, and launches through NVIDIA's cuda-python driver
bindings on torch's current stream. No compiled extension.

With torch importable (>= 2.4), importing the package also registers the ``tilec::<member>_fwd`` /
``tilec::<member>_bwd`` custom ops (and ``tilec::gdn_bwd_saved`` / ``kda_bwd_saved`` / ``gla_bwd_saved``,
which the autograd formula runs with what the forward saved: Ai, the scores Pᵀ) behind the
fla-named forward functions.
"""

from .bind import BindError, TensorSpec
from .driver import DriverError, available
from .expr import ExprError, SizeExpr
from .fla import (chunk_gated_delta_rule, chunk_gated_delta_rule_bwd, chunk_gla, chunk_kda, chunk_linear_attn,
                  chunk_simple_gla)
from .launch import OperatorError, PackedLaunch, Prepared, TiledEncoding, encoding, pack_launch, prepare
from .meta import KernelMeta, LoadedOperator, MetaError, OperatorPlan, load_kernel_meta, load_operator, load_plan
from .operator import Operator, TensorError

__version__ = "0.1.0"

try:  # the custom ops need torch; loading and checking plans does not
    import torch as _torch  # noqa: F401
except ImportError:
    ops = None
else:
    from . import ops


def gpu_status() -> str:
    """'ok', or a sentence saying why nothing can be launched here (no GPU, no cuda-python, no torch)."""
    return available() or "ok"


__all__ = [
    "BindError", "DriverError", "ExprError", "KernelMeta", "LoadedOperator", "MetaError", "Operator", "OperatorError",
    "OperatorPlan", "PackedLaunch", "Prepared", "SizeExpr", "TensorError", "TensorSpec", "TiledEncoding",
    "chunk_gated_delta_rule", "chunk_gated_delta_rule_bwd", "chunk_gla", "chunk_kda", "chunk_linear_attn",
    "chunk_simple_gla", "encoding", "gpu_status", "load_kernel_meta",
    "load_operator", "load_plan", "pack_launch", "prepare",
]
