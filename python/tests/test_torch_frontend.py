"""torch-side tests of tilec_torch on CPU: the checks ``Operator`` makes before any launch and the
fla argument mapping. Skipped when torch is not importable (CI); run locally with
``PYTHONPATH=.tools/torch python3 -m unittest discover -s python/tests``."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

import tilec_torch  # noqa: E402
from tilec_torch import Operator, TensorError  # noqa: E402
from tilec_torch.fla import chunk_gated_delta_rule, chunk_gated_delta_rule_bwd, gdn_bwd_arguments  # noqa: E402

ART = os.environ.get("TILEC_TORCH_TEST_ARTIFACTS") or os.path.join(HERE, "fixtures", "gdn_sm90a")


def fla_inputs(B=1, T=100, H=2, HV=2, K=128, V=128):
    bf = torch.bfloat16
    return dict(
        q=torch.randn(B, T, H, K, dtype=bf), k=torch.randn(B, T, H, K, dtype=bf), v=torch.randn(B, T, HV, V, dtype=bf),
        g=-torch.rand(B, T, HV), beta=torch.rand(B, T, HV).to(bf), do=torch.randn(B, T, HV, V, dtype=bf),
    )


@unittest.skipIf(torch is None, "torch is not installed")
class OperatorChecks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.op = Operator(ART, "gdn_bwd")

    def args(self, **override):
        _, kw = gdn_bwd_arguments(**fla_inputs(HV=4))
        kw.update(override)
        return kw

    def refuse(self, pattern, param, allow_cpu=True, **kw):
        with self.assertRaises(TensorError) as c:
            self.op.check(_allow_cpu=allow_cpu, **kw)
        self.assertRegex(str(c.exception), pattern)
        self.assertEqual(c.exception.param, param)

    def test_a_good_call_checks(self):
        prepared, tensors, device = self.op.check(_allow_cpu=True, **self.args())
        self.assertEqual(prepared.sizes, {"B": 1, "T": 100, "H": 2, "G": 2})
        self.assertEqual(len(prepared.steps), 14)
        self.assertEqual(set(tensors), {"q", "k", "v", "g", "beta", "s0", "do", "dht"})

    def test_cpu_tensors_are_refused_naming_the_first(self):
        self.refuse(r"`q` is on cpu; every tensor must be on a CUDA device", "q", allow_cpu=False, **self.args())
        # __call__ makes the same check before it looks for a GPU.
        with self.assertRaisesRegex(TensorError, "`q` is on cpu"):
            self.op(**self.args())

    def test_dtype_shape_and_layout(self):
        a = self.args()
        self.refuse(r"parameter `v`: expected dtype bf16, found f32", "v", **dict(a, v=a["v"].float()))
        self.refuse(r"parameter `g`: expected dtype f32, found bfloat16|parameter `g`: expected dtype f32, found bf16", "g", **dict(a, g=a["g"].to(torch.bfloat16)))
        self.refuse(r"parameter `g`: expected dtype f32, found float64", "g", **dict(a, g=a["g"].double()))
        self.refuse(r"`k` is not contiguous", "k", **dict(a, k=a["k"].transpose(1, 2).contiguous().transpose(1, 2)))
        self.refuse(r"size `T` is inconsistent: parameter `q` dim 1 gives 100, but parameter `k` dim 1 gives 99", "k", **dict(a, k=a["k"][:, :99].contiguous()))
        self.refuse(r"K = 64 needs `--const K=64`", "q", **dict(a, q=a["q"][..., :64].contiguous(), k=a["k"][..., :64].contiguous()))
        self.refuse(r"`scale` is a f32 scalar: pass a Python number", "scale", **dict(a, scale=torch.tensor(0.1)))
        self.refuse(r"`beta` must be a torch.Tensor", "beta", **dict(a, beta=0.5))
        self.refuse(r"has no parameter `z`", "z", **dict(a, z=a["q"]))
        self.refuse(r"output `dq` requires grad", "dq", **dict(a, dq=torch.zeros(1, 100, 2, 128, requires_grad=True)))

    def test_varlen_offsets_on_the_host_are_checked(self):
        vl = Operator(ART, "gdn_bwd_varlen")
        name, kw = gdn_bwd_arguments(**fla_inputs(), cu_seqlens=torch.tensor([0, 1, 40, 100]))
        self.assertEqual(name, "gdn_bwd_varlen")
        self.assertEqual(kw["cu_seqlens"].dtype, torch.int32)
        self.assertEqual(tuple(kw["s0"].shape), (3, 2, 128, 128))
        vl.check(_allow_cpu=True, **kw)
        kw["cu_seqlens"] = torch.tensor([0, 1, 130, 100], dtype=torch.int32)
        with self.assertRaisesRegex(TensorError, r"entry 2 \(130\) is past T = 100"):
            vl.check(_allow_cpu=True, **kw)


@unittest.skipIf(torch is None, "torch is not installed")
class FlaMapping(unittest.TestCase):
    def test_defaults_and_names(self):
        x = fla_inputs(B=2, H=2, HV=4)
        name, kw = gdn_bwd_arguments(**x)
        self.assertEqual(name, "gdn_bwd")
        self.assertEqual(set(kw), {"q", "k", "v", "g", "beta", "s0", "do", "dht", "scale"})
        self.assertAlmostEqual(kw["scale"], 128 ** -0.5)
        self.assertEqual(tuple(kw["s0"].shape), (2, 4, 128, 128))
        self.assertEqual(kw["dht"].dtype, torch.float32)
        self.assertTrue(bool((kw["s0"] == 0).all()))
        s0 = torch.ones(2, 4, 128, 128)
        _, kw = gdn_bwd_arguments(**x, scale=0.25, initial_state=s0)
        self.assertIs(kw["s0"], s0)
        self.assertEqual(kw["scale"], 0.25)

    def test_entry_points(self):
        x = fla_inputs()
        x.pop("do")
        with self.assertRaisesRegex(TensorError, "`q` is on cpu; tilec's operators run on a CUDA device only"):
            chunk_gated_delta_rule(**x, artifacts=ART)  # the forward (custom op): CUDA only
        with self.assertRaisesRegex(TensorError, "`q` is on cpu"):
            chunk_gated_delta_rule_bwd(**fla_inputs(), artifacts=ART)
        with self.assertRaisesRegex(ValueError, "TILEC_TORCH_ARTIFACTS"):
            os.environ.pop("TILEC_TORCH_ARTIFACTS", None)
            chunk_gated_delta_rule_bwd(**fla_inputs())

    def test_status_says_why_nothing_launches(self):
        if not torch.cuda.is_available():
            self.assertNotEqual(tilec_torch.gpu_status(), "ok")


if __name__ == "__main__":
    unittest.main()


class _FullFakeDriver:
    """Every driver entry ``Operator.launch_prepared`` uses, recording launches."""

    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = CUtensorMapFloatOOBfill = staticmethod(int)
    CUstream = CUfunction_attribute = staticmethod(int)

    class _Map:
        opaque = [7] * 16

    def __init__(self):
        self.calls = []
        self.launches = []

    def __getattr__(self, name):
        def call(*args):
            if name == "cuModuleLoadData":  # the image is passed by address: read it now
                import ctypes
                args = (ctypes.string_at(args[0]),)
            self.calls.append((name, args))
            if name == "cuModuleLoadData":
                return (0, args[0])
            if name == "cuModuleGetFunction":
                return (0, args[1].decode())
            if name == "cuTensorMapEncodeTiled":
                return (0, self._Map())
            if name == "cuLaunchKernel":
                self.launches.append(args[:9])
                return (0,)
            return (0, 1) if name in ("cuDeviceGet", "cuDevicePrimaryCtxRetain") else (0,)
        return call


@unittest.skipIf(torch is None, "torch is not installed")
class FakeGpuCall(unittest.TestCase):
    """The whole launch path of ``Operator`` with a recording driver in place of CUDA: each of the
    plan's launches, in order, with its grid/block/shared memory, on the given stream."""

    def test_prepared_launches_are_kept_per_call_signature(self):
        """The second call with the same dtypes, shapes and scalars reuses the bound launches
        (no Python binding per training step); another shape or scale binds anew; a refused
        call is refused again (nothing kept)."""
        op = Operator(ART, "gdn_bwd")
        _, kw = gdn_bwd_arguments(**fla_inputs(T=64))
        first = op.check(_allow_cpu=True, **kw)[0]
        self.assertIs(op.check(_allow_cpu=True, **kw)[0], first)
        _, kw2 = gdn_bwd_arguments(**fla_inputs(T=128))
        other = op.check(_allow_cpu=True, **kw2)[0]
        self.assertIsNot(other, first)
        self.assertEqual(other.sizes["T"], 128)
        self.assertIsNot(op.check(_allow_cpu=True, **dict(kw, scale=0.5))[0], first)
        bad = dict(kw, v=kw["v"][..., :64].contiguous())
        for _ in range(2):
            with self.assertRaises(TensorError):
                op.check(_allow_cpu=True, **bad)
        self.assertEqual(len(op._prepared), 3)

    def test_every_launch_reaches_the_driver(self):
        import json
        import tempfile
        from tilec_torch import driver
        from tilec_torch.operator import TORCH_DTYPES

        with tempfile.TemporaryDirectory() as d:
            for f in [f for f in os.listdir(ART) if f.endswith(".json")]:
                with open(os.path.join(ART, f)) as src, open(os.path.join(d, f), "w") as dst:
                    dst.write(src.read())
                if f.endswith(".meta.json"):
                    with open(os.path.join(ART, f)) as m, open(os.path.join(d, json.load(m)["files"]["ptx"]), "w") as ptx:
                        ptx.write("// PTX of " + f)
            op = Operator(d, "gdn_bwd", code="ptx")
            _, kw = gdn_bwd_arguments(**fla_inputs(T=64))
            prepared, tensors, _ = op.check(_allow_cpu=True, **kw)
            for b in prepared.outputs:
                tensors[b.name] = torch.zeros(b.shape, dtype=getattr(torch, TORCH_DTYPES[b.dtype]))
            for n, dt, shape in prepared.buffers:
                tensors[n] = torch.zeros(shape, dtype=getattr(torch, TORCH_DTYPES[dt]))
            fake = _FullFakeDriver()
            saved, saved_ctx = driver._import_driver, dict(driver._contexts)
            driver._import_driver = lambda: fake
            driver._initialised = False
            driver._contexts.clear()

            class Dev:
                index = 0

            try:
                op.launch_prepared(prepared, tensors, Dev(), 4321)
            finally:
                driver._import_driver = saved
                driver._contexts.clear()
                driver._contexts.update(saved_ctx)
                driver._initialised = False
        self.assertEqual([c[0] for c in fake.calls[:4]], ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"])
        loads = [c[1][0] for c in fake.calls if c[0] == "cuModuleLoadData"]
        self.assertEqual(len(loads), 13)  # each kernel loaded once (repeat_heads runs twice)
        self.assertTrue(all(b.startswith(b"// PTX of ") for b in loads))
        opted = [c[1][2] for c in fake.calls if c[0] == "cuFuncSetAttribute"]
        self.assertEqual(sorted(opted), sorted(m.dynamic_smem_bytes for m in op.loaded.kernels.values() if m.dynamic_smem_bytes > 48 * 1024))
        self.assertEqual([l[0] for l in fake.launches], [l.kernel for l in op.plan.launches])
        for (fn, gx, gy, gz, bx, by, bz, smem, stream), s in zip(fake.launches, prepared.steps):
            self.assertEqual(((gx, gy, gz), (bx, by, bz), smem, stream), (s.grid, s.block, s.dynamic_smem_bytes, 4321))
        # One tensor map encoded per map of each launched kernel (state_fwd, K#1, dqkwg, K#2 have them).
        maps = sum(len(op.loaded.kernels[l.kernel].tensor_maps) for l in op.plan.launches)
        self.assertGreater(maps, 0)
        self.assertEqual(sum(1 for c in fake.calls if c[0] == "cuTensorMapEncodeTiled"), maps)
