"""tilec_torch on a GPU, through the real plans (docs/torch.md): the fla-named functions of all
five members against the fp64 token-serial recurrence (naive_recurrence.py, gdn-math.md §2),
a bitwise-deterministic backward, ``torch.library.opcheck`` on the real ops, ``torch.compile
(fullgraph=True)`` and a CUDA-graph-captured training step (varlen too) equal to eager, bitwise.

Needs a CUDA GPU of the artifacts' target, cuda-python, and ``$TILEC_TORCH_ARTIFACTS`` = one
folder holding ``tilec build dsl-examples/gdn.tile`` and ``dsl-examples/gdn_fwd.tile`` outputs
(K = V = 128; ``scripts/h200-prepare.sh`` makes ``.device/art``). Without them every test here
is *skipped* (reported as such, never passed): CI has no GPU. On the H200:
``TILEC_TORCH_ARTIFACTS=.device/art python3 -m unittest -v python/tests/test_gpu.py``.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The CPU tests' path setup, torch (None when missing), input maker and wrapper dispatch.
from test_fla_ops import GATE, call, make, tilec_torch, torch  # noqa: E402

ART = os.environ.get("TILEC_TORCH_ARTIFACTS")
WHY = ("torch is not installed" if torch is None else
       "no CUDA GPU" if not torch.cuda.is_available() else
       "TILEC_TORCH_ARTIFACTS is not set" if not ART else
       None if tilec_torch.gpu_status() == "ok" else tilec_torch.gpu_status())

if WHY is None:
    from naive_recurrence import recurrence  # noqa: E402
    from tilec_torch import ops  # noqa: E402

#: max|tilec − fp64| / max|fp64| allowed for o, ht and every gradient: 2⁻⁶ = four bf16 unit
#: roundoffs (2⁻⁸), one for each bf16 rounding on the way (the bf16 inputs of the two MMA chains
#: of the chunked form, the bf16 output, the bf16 dU/Ai of the backward, gdn-math.md §3–4). The
#: errors measured on these sizes are 2e-3 … 6e-3 (docs/results.md); a wrong lane or a dropped
#: chunk gives O(1).
BOUND = 2.0 ** -6
K = V = 128


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def cuda_inputs(member, B, T, H, G, N=None, seed=0):
    """Plan-named inputs (test_fla_ops.make) on the GPU, leaves that require grad, and the CPU copies."""
    x = make(member, B=B, T=T, H=H, G=G, K=K, V=V, N=N, seed=seed)
    return x, {n: t.cuda().requires_grad_(True) for n, t in x.items()}


def fwd_bwd(member, xg, cu, do, dht, forward=None):
    """o, ht and the gradients of Σ o⊙do + Σ ht⊙dht by torch.autograd through the fla wrapper
    (or ``forward(*xg.values())``, e.g. its torch.compile'd form)."""
    if forward is None:
        o, ht = call(member, xg, cu_seqlens=cu, output_final_state=True, artifacts=ART)
    else:
        o, ht = forward(*xg.values())
    loss = (o.float() * do).sum() + (ht * dht).sum()
    return o, ht, dict(zip(xg, torch.autograd.grad(loss, list(xg.values()))))


@unittest.skipIf(WHY is not None, f"GPU tests skipped: {WHY}")
class RealPlans(unittest.TestCase):

    def test_every_member_against_fp64(self):
        """Dense (B = 2, T = 150: a partial chunk), varlen (sequences of 1, 70, 79 tokens: one
        starts mid-chunk) and GVA (gdn, 2 value heads per q/k head)."""
        cases = [(m, False, 1) for m in GATE] + [(m, True, 1) for m in GATE] + [("gdn", False, 2)]
        for member, varlen, G in cases:
            with self.subTest(member=member, varlen=varlen, G=G):
                B, T = (1, 150) if varlen else (2, 150)
                cu = torch.tensor([0, 1, 71, 150], dtype=torch.int32) if varlen else None
                N = 3 if varlen else B
                x, xg = cuda_inputs(member, B, T, 2, G, N=N)
                gen = torch.Generator().manual_seed(1)
                do = torch.randn(B, T, 2 * G, V, generator=gen)
                dht = torch.randn(N, 2 * G, K, V, generator=gen)
                o, ht, d = fwd_bwd(member, xg, None if cu is None else cu.cuda(), do.cuda(), dht.cuda())
                ro, rht, rd = recurrence(member, x, K ** -0.5, cu, seeds=(do, dht))
                self.assertLess(rel(o, ro), BOUND, "o")
                self.assertLess(rel(ht, rht), BOUND, "ht")
                for n in x:
                    self.assertEqual(d[n].dtype, x[n].dtype, n)
                    self.assertLess(rel(d[n], rd[n]), BOUND, f"d{n}")

    def test_backward_is_bitwise_deterministic(self):
        for member in ("gdn", "kda"):
            _, xg = cuda_inputs(member, 2, 256, 2, 1)
            do = torch.randn(2, 256, 2, V, device="cuda")
            dht = torch.randn(2, 2, K, V, device="cuda")
            runs = [fwd_bwd(member, xg, None, do, dht) for _ in range(3)]
            for o, ht, d in runs[1:]:
                self.assertTrue(torch.equal(o, runs[0][0]) and torch.equal(ht, runs[0][1]), member)
                for n in d:
                    self.assertTrue(torch.equal(d[n], runs[0][2][n]), f"{member} d{n}")

    def test_opcheck_on_the_real_plans(self):
        for member in GATE:
            with self.subTest(member=member):
                x = make(member, B=1, T=100, H=2, G=1, K=K, V=V)
                args = [t.cuda().requires_grad_(t.is_floating_point()) for t in x.values()]
                torch.library.opcheck(ops.fwd_op(member), (*args, None, K ** -0.5, ART))
                cu = torch.tensor([0, 1, 71, 100], dtype=torch.int32, device="cuda")
                x = make(member, B=1, T=100, H=2, G=1, K=K, V=V, N=3)
                args = [t.cuda().requires_grad_(True) for t in x.values()]
                torch.library.opcheck(ops.fwd_op(member), (*args, cu, K ** -0.5, ART))

    def test_compile_fullgraph_equals_eager(self):
        """The forward compiled with fullgraph=True (one graph, the custom op inside it), its
        backward through the registered autograd formula: bitwise the eager call's."""
        for member in ("gdn", "gla"):
            _, xg = cuda_inputs(member, 2, 192, 2, 1)
            do = torch.randn(2, 192, 2, V, device="cuda")
            dht = torch.randn(2, 2, K, V, device="cuda")
            eager = fwd_bwd(member, xg, None, do, dht)
            names = list(xg)
            forward = torch.compile(lambda *t: call(member, dict(zip(names, t)), output_final_state=True, artifacts=ART), fullgraph=True)
            compiled = fwd_bwd(member, xg, None, do, dht, forward)
            self.assertTrue(torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1]), member)
            for n in eager[2]:
                self.assertTrue(torch.equal(eager[2][n], compiled[2][n]), f"{member} d{n}")

    def test_cuda_graph_training_step(self):
        """Forward and backward captured once, replayed on new input values (copied into the
        captured tensors, cu_seqlens too): bitwise the eager step on those values — so no step
        needs the host (a host read of cu_seqlens would fail the capture)."""
        for member, varlen in (("gdn", False), ("gdn", True), ("kda", True)):
            with self.subTest(member=member, varlen=varlen):
                B, T, N = (1, 256, 3) if varlen else (2, 256, 2)
                _, xg = cuda_inputs(member, B, T, 2, 1, N=N)
                cu = torch.tensor([0, 1, 71, 256], dtype=torch.int32, device="cuda") if varlen else None
                do = torch.randn(B, T, 2, V, device="cuda")
                dht = torch.randn(N, 2, K, V, device="cuda")
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):   # warm-up off the capture (module loads, allocator)
                    for _ in range(2):
                        fwd_bwd(member, xg, cu, do, dht)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    g_out = fwd_bwd(member, xg, cu, do, dht)
                x2, _ = cuda_inputs(member, B, T, 2, 1, N=N, seed=5)
                with torch.no_grad():
                    for n in xg:
                        xg[n].copy_(x2[n])
                    if cu is not None:
                        cu.copy_(torch.tensor([0, 130, 131, 256], dtype=torch.int32))
                graph.replay()
                torch.cuda.synchronize()
                eager = fwd_bwd(member, xg, cu, do, dht)
                self.assertTrue(torch.equal(g_out[0], eager[0]), "o")
                self.assertTrue(torch.equal(g_out[1], eager[1]), "ht")
                for n in eager[2]:
                    self.assertTrue(torch.equal(g_out[2][n], eager[2][n]), f"d{n}")
                self.assertFalse(torch.equal(g_out[0][0, :10], fwd_bwd(member, cuda_inputs(member, B, T, 2, 1, N=N)[1], cu, do, dht)[0][0, :10]),
                                 "the replay used the new values (not the captured ones)")

    def test_readme_example(self):
        """The README's PyTorch example, as printed there (its artifacts folder `out/gdn` read as
        $TILEC_TORCH_ARTIFACTS): it runs, and leaves finite gradients of every input's shape."""
        readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
        block = readme[readme.index("**From PyTorch**"):]
        block = block[block.index("```python") + len("```python"):]
        code = block[:block.index("```")]
        self.assertIn('"out/gdn"', code)
        scope = {}
        exec(compile(code.replace('"out/gdn"', repr(ART)), "README.md", "exec"), scope)
        torch.cuda.synchronize()
        for n in ("q", "k", "v", "g", "beta"):
            x = scope[n]
            self.assertEqual(x.grad.shape, x.shape, n)
            self.assertTrue(bool(x.grad.float().isfinite().all()) and bool(x.grad.float().abs().max() > 0), n)
        for n in ("dq", "dk", "dv", "dg", "dbeta"):
            self.assertTrue(bool(scope["grads"][n].float().isfinite().all()), n)


if __name__ == "__main__":
    unittest.main()
