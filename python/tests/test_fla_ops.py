"""The fla-named forward functions and the ``tilec::`` custom ops, on CPU (docs/torch.md).

No GPU: the plan launches are replaced by ``naive_recurrence.StandIn`` (the fp64 token-serial
recurrence of gdn-math.md §2 and its autograd gradients), so these tests cover the Python side
only — argument checks, fake implementations, tracing, the autograd formula (what is saved,
gradient order and dtypes, dht = 0, the forward's Ai reaching the saved backward of gdn and kda)
— never the plans' numbers. Skipped without torch (CI);
run with ``PYTHONPATH=.tools/torch python3 -m unittest discover -s python/tests``.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

import tilec_torch  # noqa: E402
from tilec_torch import TensorError  # noqa: E402

if torch is not None:
    from naive_recurrence import StandIn, chunk_inverses, chunk_scores, inputs_of, recurrence  # noqa: E402
    from tilec_torch import ops  # noqa: E402
    from tilec_torch.fla import normalize_output  # noqa: E402

GATE = {"gdn": "scalar", "kda": "channel", "gla": "channel", "ssd": "scalar", "la": None}
# What each member's forward also returns and its <m>_bwd_saved takes back: ai for the delta rule
# (gdn, kda), pt for the per-channel gates (kda, gla).
SAVES = {"gdn": ("ai",), "kda": ("ai", "pt"), "gla": ("pt",)}
WRAPPER = {"gdn": "chunk_gated_delta_rule", "kda": "chunk_kda", "gla": "chunk_gla", "ssd": "chunk_simple_gla", "la": "chunk_linear_attn"}


def make(member, B=2, T=5, H=1, G=2, K=3, V=4, N=None, dtype=None, seed=0):
    """Plan-named inputs of ``member`` (q, k, v, [g], [beta], s0): bf16/f32 as the plans, or all
    ``dtype``. Gates are log decays ≤ 0, beta in (0, 1), k normalised (the regime of the models)."""
    gen = torch.Generator().manual_seed(seed)
    HV = H * G
    lo = dtype or torch.bfloat16
    st = dtype or torch.float32
    x = dict(q=torch.randn(B, T, H, K, generator=gen).to(lo),
             k=torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).to(lo),
             v=torch.randn(B, T, HV, V, generator=gen).to(lo))
    if GATE[member] == "scalar":
        x["g"] = (-0.5 * torch.rand(B, T, HV, generator=gen)).to(st)
    elif GATE[member] == "channel":
        x["g"] = (-0.5 * torch.rand(B, T, HV, K, generator=gen)).to(st)
    if member in ("gdn", "kda"):
        x["beta"] = torch.rand(B, T, HV, generator=gen).to(lo)
    x["s0"] = torch.randn(N if N is not None else B, HV, K, V, generator=gen).to(st)
    return x


def call(member, x, **kw):
    """The fla wrapper of ``member`` on plan-named inputs (s0 -> initial_state)."""
    a = {n: t for n, t in x.items() if n != "s0"}
    if member == "la":
        kw.setdefault("normalize", False)
    return getattr(tilec_torch, WRAPPER[member])(**a, initial_state=x.get("s0"), **kw)


class _Patched(unittest.TestCase):
    """Installs a runner (the stand-in by default) in place of the plan launches."""

    runner = None

    def setUp(self):
        self.saved = ops.run_plan
        self.standin = StandIn()
        ops.run_plan = self.runner if self.runner is not None else self.standin

    def tearDown(self):
        ops.run_plan = self.saved


def _never(name, artifacts, args):
    raise AssertionError(f"the real implementation ran ({name}) where only the fake one should")


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class FakeShapes(_Patched):
    """FakeTensorMode: only the fake implementations run; shapes and dtypes from the inputs."""

    runner = staticmethod(_never)

    def test_forward_and_backward_shapes_every_member(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        for member in GATE:
            for varlen in (False, True):
                with self.subTest(member=member, varlen=varlen), FakeTensorMode():
                    B, T, H, G, K, V = (1, 9, 2, 3, 64, 32) if varlen else (2, 9, 2, 3, 64, 32)
                    cu = torch.tensor([0, 4, 9], dtype=torch.int64) if varlen else None
                    N = 2
                    x = make(member, B=B, T=T, H=H, G=G, K=K, V=V, N=N)
                    for n in x:
                        x[n].requires_grad_(True)
                    o, ht = call(member, x, cu_seqlens=cu, output_final_state=True)
                    self.assertEqual((tuple(o.shape), o.dtype), ((B, T, H * G, V), torch.bfloat16))
                    self.assertEqual((tuple(ht.shape), ht.dtype), ((N, H * G, K, V), torch.float32))
                    (o.float().sum() + ht.sum()).backward()
                    for n, t in x.items():  # fla's dtypes: bf16 for q, k, v, beta; f32 for g, h0
                        self.assertEqual((tuple(t.grad.shape), t.grad.dtype), (tuple(t.shape), t.dtype), n)

    def test_forward_op_outputs_and_saved_backward_every_member(self):
        """The ops' outputs under FakeTensorMode: gdn returns (o, ht, ai), kda (o, ht, ai, pt), gla
        (o, ht, pt), each saved tensor bf16 [B, T, HV, 64] (also for f64 inputs: the plans write
        bf16); the others (o, ht); the saved backward's gradients are shaped as the inputs (not
        ai, pt), in s0's dtype."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        for member in GATE:
            for dtype in (None, torch.float64):
                with self.subTest(member=member, dtype=dtype), FakeTensorMode():
                    x = make(member, B=2, T=9, H=2, G=3, K=64, V=32, dtype=dtype)
                    out = ops.fwd_op(member)(*x.values(), None, 0.5, "")
                    self.assertEqual(len(out), 2 + len(SAVES.get(member, ())))
                    if member not in SAVES:
                        self.assertFalse(hasattr(torch.ops.tilec, f"{member}_bwd_saved"))
                        continue
                    for t in out[2:]:
                        self.assertEqual((tuple(t.shape), t.dtype), ((2, 9, 6, 64), torch.bfloat16))
                    a = list(x.values())
                    a[-1:-1] = out[2:]   # q, k, v, g, [beta], ai and/or pt, s0
                    grads = ops.bwd_saved_op(member)(*a, torch.empty_like(out[0]), torch.empty_like(x["s0"]), None, 0.5, "")
                    self.assertEqual([(tuple(g.shape), g.dtype) for g in grads], [(tuple(t.shape), x["s0"].dtype) for t in x.values()])

    def test_backward_op_gives_state_precision(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            x = make("kda", H=2, G=2, K=8, V=16)
            do = torch.empty(2, 5, 4, 16, dtype=torch.bfloat16)
            grads = ops.bwd_op("kda")(*x.values(), do, torch.empty_like(x["s0"]), None, 0.5, "")
        self.assertEqual([tuple(g.shape) for g in grads], [tuple(t.shape) for t in x.values()])
        self.assertEqual({g.dtype for g in grads}, {torch.float32})


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class Tracing(_Patched):
    def test_make_fx_graph_holds_both_ops(self):
        from torch.fx.experimental.proxy_tensor import make_fx

        ops.run_plan = _never

        def step(q, k, v, g, beta, s0):
            o, ht = tilec_torch.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True)
            return torch.autograd.grad(o.float().square().sum() + ht.sum(), (q, g, s0))

        x = make("gdn", H=2, G=2, K=8, V=16)
        for t in x.values():
            t.requires_grad_(True)
        gm = make_fx(step, tracing_mode="fake")(*x.values())
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIn("tilec.gdn_fwd.default", targets)
        self.assertIn("tilec.gdn_bwd_saved.default", targets)
        self.assertNotIn("tilec.gdn_bwd.default", targets)

    def test_compile_fullgraph_forward_and_backward(self):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        graphs = {}

        def keep(kind):
            def compiler(gm, example_inputs):
                graphs[kind] = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
                return make_boxed_func(gm.forward)
            return compiler

        class Layer(torch.nn.Module):
            def __init__(self, d=16, H=2, G=2, K=8, V=8):
                super().__init__()
                self.H, self.HV, self.K, self.V = H, H * G, K, V
                self.qk = torch.nn.Linear(d, 2 * H * K, dtype=torch.bfloat16)
                self.vb = torch.nn.Linear(d, H * G * (V + 2), dtype=torch.bfloat16)

            def forward(self, x, cu_seqlens=None):
                B, T, _ = x.shape
                q, k = self.qk(x).view(B, T, 2, self.H, self.K).unbind(2)
                vb = self.vb(x).view(B, T, self.HV, self.V + 2)
                v, g, beta = vb[..., :self.V], torch.nn.functional.logsigmoid(vb[..., self.V].float()), vb[..., self.V + 1].sigmoid()
                k = torch.nn.functional.normalize(k.float(), dim=-1).to(torch.bfloat16)
                o, _ = tilec_torch.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu_seqlens)   # q, g: strided views
                return o.float().square().mean()

        torch.manual_seed(0)
        layer = Layer()
        for cu in (None, torch.tensor([0, 3, 7])):
            with self.subTest(varlen=cu is not None):
                graphs.clear()
                torch._dynamo.reset()
                x = torch.randn(1 if cu is not None else 2, 7, 16, dtype=torch.bfloat16)
                compiled = torch.compile(layer, fullgraph=True, backend=aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")))
                loss = compiled(x, cu)
                loss.backward()
                got = [p.grad.clone() for p in layer.parameters()]
                layer.zero_grad()
                eager = layer(x, cu)
                eager.backward()
                self.assertIn("tilec.gdn_fwd.default", graphs["fw"])
                self.assertIn("tilec.gdn_bwd_saved.default", graphs["bw"])
                self.assertEqual(loss.item(), eager.item())
                for a, p in zip(got, layer.parameters()):
                    self.assertTrue(torch.equal(a, p.grad))
                layer.zero_grad()
                self.assertEqual({c[0] for c in self.standin.calls}, {"gdn_fwd_varlen", "gdn_bwd_saved_varlen"} if cu is not None else {"gdn_fwd", "gdn_bwd_saved"})
                self.standin.calls.clear()


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class AutogradWiring(_Patched):
    """gradcheck through the ops' autograd formula and the autograd.Function classes, with the fp64
    stand-in as the plans: catches a swapped or missing gradient, a wrong saved tensor (the
    stand-in's saved backward refuses an ai other than the forward's), scale or cu_seqlens not
    reaching the backward."""

    def gradcheck(self, member, fn, cu=None, B=2):
        x = make(member, B=B, T=6, H=1, G=2, K=3, V=2, dtype=torch.float64, N=None if cu is None else len(cu) - 1, seed=3)
        args = [t.requires_grad_(True) for t in x.values()]
        scale = 0.7

        def f(*a):
            return fn(member)(*a, cu, scale, "art")[:2]   # gdn, kda, gla: ai, pt are not differentiable

        self.assertTrue(torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-6))

    def test_registered_autograd_every_member_dense_and_varlen(self):
        for member in GATE:
            with self.subTest(member=member):
                self.gradcheck(member, ops.fwd_op)
                self.gradcheck(member, ops.fwd_op, cu=torch.tensor([0, 2, 2, 6], dtype=torch.int32), B=1)

    def test_autograd_function_classes(self):
        for member, cls in ops.FUNCTIONS.items():
            with self.subTest(member=member):
                self.gradcheck(member, lambda m: cls.apply, cu=torch.tensor([0, 4, 6], dtype=torch.int32), B=1)

    def test_saves_inputs_and_ai_and_runs_the_saved_backward_plan(self):
        x = make("gdn", H=2, G=2, K=4, V=4)
        for t in x.values():
            t.requires_grad_(True)
        o, ht, ai = ops.fwd_op("gdn")(*x.values(), None, 0.5, "art")
        self.assertEqual(self.standin.calls[-1][0], "gdn_fwd")
        self.assertFalse(ai.requires_grad)   # non-differentiable: no gradient flows into it
        saved = o.grad_fn.saved_tensors
        self.assertEqual(len(saved), 8)  # q, k, v, g, beta, s0, ai, cu_seqlens (None): no W, U, states
        self.assertIsNone(saved[7])
        for s, t in zip(saved, list(x.values()) + [ai]):
            self.assertTrue(s is t or s.data_ptr() == t.data_ptr())
        o.float().sum().backward()        # do: an expanded (stride-0) gradient; dht: None
        name, art, args = self.standin.calls[-1]
        self.assertEqual((name, art, args["scale"]), ("gdn_bwd_saved", "art", 0.5))
        self.assertEqual(args["ai"].data_ptr(), ai.data_ptr())   # the forward's ai itself, not a recomputation
        self.assertEqual([c[0] for c in self.standin.calls], ["gdn_fwd", "gdn_bwd_saved"])
        self.assertTrue(bool((args["dht"] == 0).all()))
        self.assertEqual(args["do"].dtype, torch.bfloat16)
        # fla's dtypes: dq, dk, dv, dbeta in the inputs' bf16, dg and dh0 f32.
        self.assertEqual([t.grad.dtype for t in x.values()], [torch.bfloat16] * 3 + [torch.float32, torch.bfloat16, torch.float32])

    def test_saved_backward_every_member_and_function(self):
        """gdn, kda and gla run <m>_bwd_saved[_varlen] (fed ai, pt), the others <m>_bwd[_varlen], through
        the registered formula and the Function classes; the wrappers still return (o, ht)."""
        for member in GATE:
            for varlen in (False, True):
                for via in ("op", "function", "wrapper"):
                    with self.subTest(member=member, varlen=varlen, via=via):
                        self.standin.calls.clear()
                        cu = torch.tensor([0, 2, 5], dtype=torch.int32) if varlen else None
                        x = make(member, B=1 if varlen else 2, N=2)
                        for t in x.values():
                            t.requires_grad_(True)
                        if via == "op":
                            o = ops.fwd_op(member)(*x.values(), cu, 0.5, "")[0]
                        elif via == "function":
                            out = ops.FUNCTIONS[member].apply(*x.values(), cu, 0.5, "")
                            self.assertEqual(len(out), 2)
                            o = out[0]
                        else:
                            out = call(member, x, cu_seqlens=cu, output_final_state=True)
                            self.assertEqual(len(out), 2)
                            o = out[0]
                        o.float().sum().backward()
                        suffix = "_varlen" if varlen else ""
                        bwd = f"{member}_bwd_saved{suffix}" if member in SAVES else f"{member}_bwd{suffix}"
                        self.assertEqual([c[0] for c in self.standin.calls], [f"{member}_fwd{suffix}", bwd])
                        self.assertTrue(all(t.grad is not None for t in x.values()))

    def test_saved_backward_refuses_another_ai(self):
        """The stand-in's saved backward takes only the forward's ai and pt (so a formula feeding it
        anything else fails every test above); the op itself passes them through untouched."""
        x = make("kda", B=1, T=70, H=1, G=2, K=3, V=2, N=2)
        cu = torch.tensor([0, 66, 70], dtype=torch.int32)
        o, ht, ai, pt = ops.fwd_op("kda")(*x.values(), cu, 0.5, "")
        a = list(x.values())
        do, dht = torch.randn_like(o), torch.randn_like(ht)
        good = ops.bwd_saved_op("kda")(*a[:5], ai, pt, a[5], do, dht, cu, 0.5, "")
        ref = ops.bwd_op("kda")(*a, do, dht, cu, 0.5, "")
        for g, r in zip(good, ref):
            self.assertTrue(torch.equal(g, r))
        for i, t in enumerate((ai, pt)):
            bad = t.clone()
            bad[0, 65, 1, 1] = bad[0, 65, 1, 1] + 0.125   # one entry of the second chunk's
            for wrong, why in [(bad, "not the one the forward returned"), (torch.zeros_like(t), "not the one"),
                               (t.float(), r"the plan takes bf16"), (t[:, :, :, :32].contiguous(), r"the plan takes bf16 \(1, 70, 2, 64\)")]:
                saved = [ai, pt]
                saved[i] = wrong
                with self.assertRaisesRegex(AssertionError, why):
                    ops.bwd_saved_op("kda")(*a[:5], *saved, a[5], do, dht, cu, 0.5, "")

    def test_no_state_gradient_without_initial_state(self):
        x = make("ssd")
        s0 = x.pop("s0")
        for t in x.values():
            t.requires_grad_(True)
        o, ht = tilec_torch.chunk_simple_gla(**x, output_final_state=True)
        (o.float().sum() + ht.sum()).backward()
        fwd, bwd = self.standin.calls
        self.assertEqual(tuple(fwd[2]["s0"].shape), tuple(s0.shape))
        self.assertTrue(bool((fwd[2]["s0"] == 0).all()))
        self.assertTrue(torch.equal(bwd[2]["dht"], torch.ones_like(s0)))
        self.assertTrue(all(t.grad is not None for t in x.values()))

    def test_final_state_gradient_reaches_the_plan(self):
        x = make("gla", dtype=torch.float64)
        for t in x.values():
            t.requires_grad_(True)
        o, ht, *_ = ops.fwd_op("gla")(*x.values(), None, 0.25, "")   # GLA's op also returns pt
        w = torch.randn_like(ht)
        (ht * w).sum().backward()
        self.assertTrue(torch.equal(self.standin.calls[-1][2]["dht"], w))
        self.assertTrue(bool((self.standin.calls[-1][2]["do"] == 0).all()))

    def test_opcheck_against_the_stand_in(self):
        for member in GATE:
            with self.subTest(member=member):
                x = make(member, H=1, G=2, K=3, V=2, T=4)
                for n in ("q", "k", "v"):
                    x[n].requires_grad_(True)
                torch.library.opcheck(ops.fwd_op(member).default, (*x.values(), None, 0.5, "art"))
                cu = torch.tensor([0, 1, 4], dtype=torch.int32)
                y = make(member, B=1, H=1, G=2, K=3, V=2, T=4, N=2)
                torch.library.opcheck(ops.fwd_op(member).default, (*y.values(), cu, 0.5, "art"))
                if member in SAVES:   # the saved backward, fed the forward's ai and/or pt
                    o, ht, *kept = ops.fwd_op(member)(*y.values(), cu, 0.5, "art")
                    a = [t.detach() for t in y.values()]
                    torch.library.opcheck(ops.bwd_saved_op(member).default, (*a[:-1], *kept, a[-1], torch.randn_like(o), torch.randn_like(ht), cu, 0.5, "art"))


ART = os.environ.get("TILEC_TORCH_TEST_ARTIFACTS") or os.path.join(HERE, "fixtures", "gdn_sm90a")


def _fixture_plans(name, artifacts, args):
    """A runner binding every call against the fixture plan of that name (the real binder, on CPU)
    and returning zero outputs of the plan's shapes and dtypes."""
    from tilec_torch.operator import TORCH_DTYPES

    prepared, _, _ = tilec_torch.Operator(ART, name).check(_allow_cpu=True, **args)
    return {b.name: torch.zeros(b.shape, dtype=getattr(torch, TORCH_DTYPES[b.dtype])) for b in prepared.outputs}


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class FixturePlans(_Patched):
    """The arguments the custom ops and their autograd formula hand to ``run_plan`` bind to the
    real gdn plans (fixtures, K = V = 128): gdn_fwd's ai, as saved, is what gdn_bwd_saved takes."""

    runner = staticmethod(_fixture_plans)

    def test_forward_and_saved_backward_bind(self):
        for varlen in (False, True):
            with self.subTest(varlen=varlen):
                cu = torch.tensor([0, 30, 70], dtype=torch.int32) if varlen else None
                x = make("gdn", B=1 if varlen else 2, T=70, H=2, G=2, K=128, V=128, N=2)
                for t in x.values():
                    t.requires_grad_(True)
                o, ht, ai = ops.fwd_op("gdn")(*x.values(), cu, 0.1, "")
                self.assertEqual((tuple(ai.shape), ai.dtype), ((x["q"].shape[0], 70, 4, ops.CHUNK), torch.bfloat16))
                (o.float().sum() + ht.sum()).backward()
                self.assertTrue(all(t.grad is not None for t in x.values()))
                got = [t.grad.clone() for t in x.values()]
                for t in x.values():
                    t.grad = None
                # The Function class binds the same way.
                o, ht = ops.FUNCTIONS["gdn"].apply(*x.values(), cu, 0.1, "")
                (o.float().sum() + ht.sum()).backward()
                for a, t in zip(got, x.values()):
                    self.assertTrue(torch.equal(a, t.grad))


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class StandInValues(unittest.TestCase):
    """The stand-in is the recurrence: values worked out by hand (gdn-math.md §1-2)."""

    def test_one_token_delta_rule(self):
        # S_1 = e^g S_0 (I − β k kᵀ)... with S_0 = 0: S_1 = β k vᵀ, o_1 = scale·β (q·k) v.
        x = make("gdn", B=1, T=1, H=1, G=1, K=3, V=2, dtype=torch.float64)
        x["s0"].zero_()
        o, ht, _ = recurrence("gdn", x, 0.5, None)
        q, k, v, b = x["q"][0, 0, 0], x["k"][0, 0, 0], x["v"][0, 0, 0], x["beta"][0, 0, 0]
        torch.testing.assert_close(o[0, 0, 0], 0.5 * b * (q @ k) * v)
        torch.testing.assert_close(ht[0, 0], b * torch.outer(k, v))

    def test_decay_only_and_varlen_restart(self):
        # SSD with v = 0: S_t = e^{Σg} S_0; varlen restarts every sequence from its own s0 row.
        x = make("ssd", B=1, T=5, H=1, G=2, K=3, V=2, N=2, dtype=torch.float64)
        x["v"].zero_()
        o, ht, _ = recurrence("ssd", x, 1.0, torch.tensor([0, 2, 5]))
        g = x["g"][0]
        torch.testing.assert_close(ht[0], g[:2].sum(0).exp()[:, None, None] * x["s0"][0])
        torch.testing.assert_close(ht[1], g[2:].sum(0).exp()[:, None, None] * x["s0"][1])
        S = g[2:4].sum(0).exp()[:, None, None] * x["s0"][1]       # the state after token 3
        torch.testing.assert_close(o[0, 3], torch.einsum("hk,hkv->hv", x["q"][0, 3].repeat_interleave(2, 0), S))

    def test_chunk_inverse_three_tokens_kda(self):
        # L_10 = β_1 Σ_c k_1c k_0c e^{g_1c}, L_20 = β_2 Σ_c k_2c k_0c e^{g_1c + g_2c}, L_21 = β_2 Σ_c k_2c k_1c e^{g_2c};
        # (I + L)^-1 = [[1, 0, 0], [−L_10, 1, 0], [−L_20 + L_21 L_10, −L_21, 1]] (gdn-math.md §3.2–3.3).
        x = make("kda", B=1, T=3, H=1, G=2, K=3, V=2, dtype=torch.float64, seed=5)
        ai = chunk_inverses("kda", x)
        self.assertEqual(tuple(ai.shape), (1, 3, 2, 64))
        for hv in range(2):
            k, g, b = x["k"][0, :, 0], x["g"][0, :, hv], x["beta"][0, :, hv]
            L10 = b[1] * (k[1] * k[0] * g[1].exp()).sum()
            L20 = b[2] * (k[2] * k[0] * (g[1] + g[2]).exp()).sum()
            L21 = b[2] * (k[2] * k[1] * g[2].exp()).sum()
            want = torch.tensor([[1, 0, 0], [-L10, 1, 0], [-L20 + L21 * L10, -L21, 1]], dtype=torch.float64)
            torch.testing.assert_close(ai[0, :, hv, :3], want)
            self.assertTrue(bool((ai[0, :, hv, 3:] == 0).all()))

    def test_chunk_scores_three_tokens_gla(self):
        # P_ij = scale Σ_c q_ic k_jc e^{Γ_ic − Γ_jc} for i ≥ j (gdn-math.md §3.6), Γ the cumsum of g;
        # pt is key-major: pt[j, i] = P_ij, 0 for i < j and past the chunk's 3 rows.
        x = make("gla", B=1, T=3, H=1, G=2, K=3, V=2, dtype=torch.float64, seed=6)
        pt = chunk_scores("gla", x, 0.5)
        self.assertEqual(tuple(pt.shape), (1, 3, 2, 64))
        for hv in range(2):
            q, k, g = x["q"][0, :, 0], x["k"][0, :, 0], x["g"][0, :, hv]
            P = lambda i, j: 0.5 * (q[i] * k[j] * (g[j + 1:i + 1].sum(0)).exp()).sum()
            want = torch.tensor([[P(0, 0), P(1, 0), P(2, 0)], [0, P(1, 1), P(2, 1)], [0, 0, P(2, 2)]], dtype=torch.float64)
            torch.testing.assert_close(pt[0, :, hv, :3], want)
            self.assertTrue(bool((pt[0, :, hv, 3:] == 0).all()))

    def test_chunk_inverses_restart_per_chunk_and_sequence(self):
        # GDN, sequences of 70 and 69 tokens: chunks [0, 64), [64, 70), [70, 134), [134, 139); each
        # block inverts I + L built from its own tokens only, L_ij = β_i (k_i·k_j) e^{Γ_i − Γ_j}.
        x = make("gdn", B=1, T=139, H=1, G=1, K=4, V=2, N=2, dtype=torch.float64, seed=2)
        ai = chunk_inverses("gdn", x, torch.tensor([0, 70, 139]))
        for c0, c1 in [(0, 64), (64, 70), (70, 134), (134, 139)]:
            k, g, b = x["k"][0, c0:c1, 0], x["g"][0, c0:c1, 0].cumsum(0), x["beta"][0, c0:c1, 0]
            L = (b[:, None] * (k @ k.T) * (g[:, None] - g[None, :]).exp()).tril(-1)
            c = c1 - c0
            torch.testing.assert_close((torch.eye(c, dtype=torch.float64) + L) @ ai[0, c0:c1, 0, :c], torch.eye(c, dtype=torch.float64))
            self.assertTrue(bool((ai[0, c0:c1, 0, c:] == 0).all()))


@unittest.skipIf(torch is None, "torch is not installed: the custom ops need it")
class ArgumentChecks(_Patched):
    def refuse(self, member, pattern, param, **over):
        x = make(member, H=2, G=2, K=8, V=8)
        kw = {n: over.pop(n) for n in list(over) if n not in x}
        x.update(over)
        with self.assertRaises(TensorError) as c:
            call(member, x, **kw)
        self.assertRegex(str(c.exception), pattern)
        self.assertEqual(c.exception.param, param)
        self.assertEqual(self.standin.calls, [])

    def test_dtypes_shapes_devices(self):
        x = make("gdn", H=2, G=2, K=8, V=8)
        self.refuse("gdn", r"`v` must be bfloat16 .* found float32", "v", v=x["v"].float())
        self.refuse("gdn", r"`g` must be float32 .* found bfloat16", "g", g=x["g"].bfloat16())
        self.refuse("kda", r"`g` must be \[2, 5, 4, 8\] \(\[B, T, HV, K\]\), found \(2, 5, 4\)", "g", g=x["g"])
        self.refuse("gdn", r"`beta` must be a torch.Tensor", "beta", beta=0.5)
        self.refuse("gdn", r"`k` must have q's shape", "k", k=x["k"][:, :4])
        self.refuse("gla", r"`v` has 3 heads, not a multiple of q's H = 2", "v", v=torch.zeros(2, 5, 3, 8, dtype=torch.bfloat16))
        self.refuse("gdn", r"`initial_state` must be \[N, HV, K, V\] = \[2, 4, 8, 8\] \(N = B\)", "initial_state", s0=x["s0"][:1])
        self.refuse("gdn", r"`k` is on meta, but `q` is on cpu", "k", k=x["k"].to("meta"))

    def test_varlen_rules(self):
        self.refuse("gdn", r"batch size is expected to be 1 rather than 2", "q", cu_seqlens=torch.tensor([0, 5]))
        x = make("gdn", B=1, N=3)
        with self.assertRaisesRegex(TensorError, r"= \[2, 2, 3, 4\] \(N = len\(cu_seqlens\) - 1\), found \(3, 2, 3, 4\)"):
            call("gdn", x, cu_seqlens=torch.tensor([0, 2, 5]))
        with self.assertRaisesRegex(TensorError, "1-D int32 or int64"):
            call("gdn", make("gdn", B=1, N=2), cu_seqlens=torch.tensor([0.0, 2.0, 5.0]))
        o, ht = call("gdn", make("gdn", B=1, N=2), cu_seqlens=torch.tensor([0, 2, 5]), output_final_state=True)
        name, _, args = self.standin.calls[-1]
        self.assertEqual((name, args["cu_seqlens"].dtype, tuple(ht.shape)), ("gdn_fwd_varlen", torch.int32, (2, 2, 3, 4)))

    def test_missing_tensors_empty_offsets_and_scale(self):
        # Found by a breaking pass: these used to surface as AttributeError / torch-internal errors.
        for member, name in [("gdn", "g"), ("gdn", "beta"), ("kda", "g"), ("gla", "g"), ("gdn", "q"), ("gdn", "v")]:
            self.refuse(member, rf"`{name}` is required \(a torch.Tensor\), found None", name, **{name: None})
        x = make("gdn", B=1, N=1)
        with self.assertRaisesRegex(TensorError, r"`cu_seqlens` must hold at least two offsets") as c:
            call("gdn", x, cu_seqlens=torch.zeros(0, dtype=torch.int64))
        self.assertEqual(c.exception.param, "cu_seqlens")
        # 2³¹ packed tokens (meta tensors: no memory): int64 offsets would not survive the
        # narrowing to the plans' int32, so the call is refused before any launch.
        T = 2 ** 31
        meta = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, dtype=dtype, device="meta")
        big = dict(q=meta(1, T, 1, 8), k=meta(1, T, 1, 8), v=meta(1, T, 1, 8), g=meta(1, T, 1, dtype=torch.float32), beta=meta(1, T, 1))
        with self.assertRaisesRegex(TensorError, r"T = 2147483648 tokens: offsets past 2\^31 - 1 do not fit") as c:
            call("gdn", big, cu_seqlens=torch.tensor([0, T], dtype=torch.int64))
        self.assertEqual(c.exception.param, "cu_seqlens")
        for bad in ["x", float("nan"), torch.tensor(0.5), True]:
            self.refuse("gdn", r"`scale` must be a finite Python number", "scale", scale=bad)
        self.assertEqual(self.standin.calls, [])

    def test_linear_attn_z_state_shape(self):
        # fla's z_state is [N, 1, H, K]; a wrong one used to be broadcast or fail inside torch.
        x = make("la", H=2, G=2, K=8, V=8)
        for bad in [torch.zeros(2, 3, 2, 8), torch.zeros(1, 2, 8), torch.zeros(2, 1, 2, 4)]:
            with self.assertRaisesRegex(TensorError, r"z_state of `initial_state` must be \[N, 1, H, K\] = \[2, 1, 2, 8\]") as c:
                tilec_torch.chunk_linear_attn(x["q"], x["k"], x["v"], initial_state=(x["s0"], bad))
            self.assertEqual(c.exception.param, "initial_state")
        self.assertEqual(self.standin.calls, [])
        tilec_torch.chunk_linear_attn(x["q"], x["k"], x["v"], initial_state=(x["s0"], torch.zeros(2, 1, 2, 8)))
        self.assertEqual(len(self.standin.calls), 1)

    def test_cpu_needs_cuda(self):
        ops.run_plan = self.saved  # the real runner
        with self.assertRaisesRegex(TensorError, r"`q` is on cpu; tilec's operators run on a CUDA device only") as c:
            call("gdn", make("gdn"), artifacts="/nonexistent")
        self.assertEqual(c.exception.param, "q")

    def test_final_state_scale_and_options(self):
        x = make("gla", K=16)
        o, ht = call("gla", x)
        self.assertIsNone(ht)
        self.assertAlmostEqual(self.standin.calls[-1][2]["scale"], 16 ** -0.5)
        o2, ht = call("gla", x, output_final_state=True, scale=2.0)
        self.assertEqual(tuple(ht.shape), tuple(x["s0"].shape))
        self.assertEqual(self.standin.calls[-1][2]["scale"], 2.0)
        with self.assertRaisesRegex(NotImplementedError, r"use_qk_l2norm_in_kernel=True is not supported"):
            call("gdn", make("gdn"), use_qk_l2norm_in_kernel=True)
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'bogus'"):
            call("gdn", make("gdn"), bogus=1)
        call("gdn", make("gdn"), use_qk_l2norm_in_kernel=False, cu_seqlens_cpu=None)

    def test_simple_gla_forms(self):
        x = make("ssd", H=1, G=2)
        gamma = torch.tensor([-0.1, -0.3])
        a = dict(q=x["q"], k=x["k"], v=x["v"])
        tilec_torch.chunk_simple_gla(**a)
        self.assertEqual(self.standin.calls[-1][0], "la_fwd")
        tilec_torch.chunk_simple_gla(**a, g_gamma=gamma)
        self.assertEqual(self.standin.calls[-1][0], "ssd_fwd")
        self.assertTrue(torch.equal(self.standin.calls[-1][2]["g"], gamma.expand(2, 5, 2)))
        with self.assertRaisesRegex(ValueError, "only one of `g` and `g_gamma`"):
            tilec_torch.chunk_simple_gla(**a, g=x["g"], g_gamma=gamma)

    def test_linear_attn_normalisation(self):
        # o_t / (<scale q_t, z_t> + 1e-10), z_t = z_0 + Σ_{s≤t} k_s per sequence; G = 2 value heads per q/k head.
        torch.manual_seed(1)
        B, T, H, G, K, V = 1, 5, 2, 3, 3, 2
        q, k = torch.rand(B, T, H, K, dtype=torch.float64), torch.rand(B, T, H, K, dtype=torch.float64)
        o = torch.randn(B, T, H * G, V, dtype=torch.float64)
        z0 = torch.rand(2, 1, H, K, dtype=torch.float64)
        cu = torch.tensor([0, 2, 5])
        got, z = normalize_output(o, q, k, 0.5, z0, cu)
        for n, (a, b) in enumerate([(0, 2), (2, 5)]):
            zt = z0[n, 0].clone()
            for t in range(a, b):
                zt = zt + k[0, t]
                den = (0.5 * q[0, t] * zt).sum(-1)   # [H]
                torch.testing.assert_close(got[0, t], o[0, t] / den.repeat_interleave(G)[:, None])
            torch.testing.assert_close(z[n, 0], zt)
        x = make("la", H=1, G=2)
        out, (kv, zf) = call("la", x, normalize=True, output_final_state=True)
        self.assertEqual((tuple(zf.shape), tuple(kv.shape)), ((2, 1, 1, 3), tuple(x["s0"].shape)))


if __name__ == "__main__":
    unittest.main()
