"""CPU tests of tilec_torch: plan/metadata loading, binding, launch-argument construction and the
driver layer (with a fake driver). Standard library only — no torch, NumPy or GPU needed:

    python3 -m unittest discover -s python/tests -v        (or: pytest python/tests)
"""

import copy
import ctypes
import json
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tilec_torch import driver  # noqa: E402
from tilec_torch.bind import BindError, TensorSpec as S, scalar_bytes  # noqa: E402
from tilec_torch.expr import ExprError, SizeExpr  # noqa: E402
from tilec_torch.launch import OperatorError, encoding, pack_launch, prepare  # noqa: E402
from tilec_torch.meta import MetaError, load_kernel_meta, load_operator, load_plan, plan_from_dict, kernel_meta_from_dict  # noqa: E402

ART = os.environ.get("TILEC_TORCH_TEST_ARTIFACTS") or os.path.join(HERE, "fixtures", "gdn_sm90a")


def gdn_specs(B=2, T=100, H=2, G=1, K=128, V=128, **override):
    s = dict(
        q=S("bf16", (B, T, H, K)), k=S("bf16", (B, T, H, K)), v=S("bf16", (B, T, H * G, V)),
        g=S("f32", (B, T, H * G)), beta=S("bf16", (B, T, H * G)), s0=S("f32", (B, H * G, K, V)),
        do=S("bf16", (B, T, H * G, V)), dht=S("f32", (B, H * G, K, V)),
    )
    s.update(override)
    return s


class Expressions(unittest.TestCase):
    def ev(self, text, **env):
        return SizeExpr(text).eval(env)

    def test_kernel_division_semantics(self):
        # docs/metadata.md: truncating division, remainder with the dividend's sign, cdiv as emitted.
        self.assertEqual(self.ev("-7 / 2"), -3)
        self.assertEqual(self.ev("-7 % 2"), -1)
        self.assertEqual(self.ev("cdiv(-150, 64)"), -1)
        self.assertEqual(self.ev("(T - 100) / 64 + 1", T=50), 1)
        self.assertEqual(self.ev("((cdiv(T, 64) + NP) - 2)", T=100, NP=2), 2)
        self.assertEqual(self.ev("min(T, 3) * max(2, H) - -1", T=100, H=4), 13)
        self.assertEqual(self.ev("2 + 3 * 4 % 5"), 4)

    def test_errors(self):
        for bad in ["T / 0", "T % 0", "cdiv(T, 0)"]:
            with self.assertRaises(ExprError):
                self.ev(bad, T=1)
        with self.assertRaises(ExprError):
            self.ev("9223372036854775807 + T", T=1)
        with self.assertRaises(ExprError):
            self.ev("-9223372036854775807 - 1 - T", T=1)
        for bad in ["T +", "foo(T, 1)", "cdiv(T)", "(T", "T T", "1.5"]:
            with self.assertRaises(ExprError, msg=bad):
                SizeExpr(bad)
        with self.assertRaises(ExprError):
            self.ev("U", T=1)

    def test_product_factor(self):
        self.assertEqual(SizeExpr("(H * G)").solve_factor(6, {"H": 3}), ("G", 2))
        self.assertIsNone(SizeExpr("B").solve_factor(6, {}))


class Loading(unittest.TestCase):
    def test_loads_the_gdn_plans(self):
        op = load_operator(ART, "gdn_bwd")
        self.assertEqual(op.plan.target, "sm_90a")
        self.assertEqual(len(op.plan.launches), 14)
        self.assertEqual([sp.name for sp in op.plan.size_params], ["K", "V"])
        self.assertIn("k1_scan_scalar_bf16", op.kernels)
        self.assertEqual(len(op.kernels["k1_scan_scalar_bf16"].tensor_maps), 5)
        vl = load_operator(ART, "gdn_bwd_varlen", "sm_90a")
        self.assertEqual(vl.plan.offsets, [("cu_seqlens", "T")])

    def _plan_raw(self):
        with open(os.path.join(ART, "gdn_bwd.sm_90a.plan.json")) as f:
            return json.load(f)

    def _meta_raw(self):
        with open(os.path.join(ART, "k1_scan_scalar_bf16.sm_90a.meta.json")) as f:
            return json.load(f)

    def test_schema_versions(self):
        raw = self._plan_raw()
        for v, ok in [(1, False), (2, False), (3, True), (4, False), (0, False)]:
            r = copy.deepcopy(raw)
            r["schema_version"] = v
            if ok:
                plan_from_dict(r)
            else:
                with self.assertRaises(MetaError) as c:
                    plan_from_dict(r)
                # v1 and v2 are read, but cannot carry what later versions added: size_params
                # and offsets (v2), optional inputs (v3).
                self.assertIn({1: "version 2", 2: "version 3"}.get(v, f"schema version {v}"), str(c.exception))
        r = copy.deepcopy(raw)
        r["schema_version"] = 2
        del r["optional"]
        plan_from_dict(r)
        r = copy.deepcopy(raw)
        del r["schema_version"]
        with self.assertRaisesRegex(MetaError, "no integer `schema_version`"):
            plan_from_dict(r)
        m = self._meta_raw()
        kernel_meta_from_dict(m)
        m3 = {"schema_version": 3, "brand_new": True}
        with self.assertRaisesRegex(MetaError, "unsupported metadata schema version 3"):
            kernel_meta_from_dict(m3)
        m1 = copy.deepcopy(m)
        m1["schema_version"] = 1
        with self.assertRaisesRegex(MetaError, "needs schema version 2"):
            kernel_meta_from_dict(m1)
        del m1["tensor_maps"]
        self.assertEqual(kernel_meta_from_dict(m1).tensor_maps, [])

    def test_unknown_fields_and_structure(self):
        m = self._meta_raw()
        m["kernal"] = "x"
        with self.assertRaisesRegex(MetaError, "unknown field `kernal`"):
            kernel_meta_from_dict(m)
        m = self._meta_raw()
        m["params"][2]["shape"][0] = "B*"
        with self.assertRaisesRegex(MetaError, r"params\[2\]"):
            kernel_meta_from_dict(m)
        m = self._meta_raw()
        m["tensor_maps"][0]["swizzle"] = "96B"
        with self.assertRaisesRegex(MetaError, "not none, 32B"):
            kernel_meta_from_dict(m)
        r = self._plan_raw()
        r["launches"][0]["args"][0]["value"] = "nothing"
        with self.assertRaisesRegex(MetaError, "neither a parameter nor a buffer"):
            plan_from_dict(r)
        r = self._plan_raw()
        r["size_params"][0]["value"] = 96
        with self.assertRaisesRegex(MetaError, "not one of `supported`"):
            plan_from_dict(r)

    def test_plan_kernel_mismatch_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            for f in [f for f in os.listdir(ART) if f.endswith(".json")]:
                with open(os.path.join(ART, f)) as src, open(os.path.join(d, f), "w") as dst:
                    dst.write(src.read())
            p = os.path.join(d, "combine.sm_90a.meta.json")
            with open(p) as f:
                m = json.load(f)
            m["params"][0], m["params"][1] = m["params"][1], m["params"][0]
            with open(p, "w") as f:
                json.dump(m, f)
            with self.assertRaisesRegex(MetaError, "combine"):
                load_operator(d, "gdn_bwd")
            with self.assertRaisesRegex(MetaError, "no plan for operator `nope`"):
                load_operator(d, "nope")


class ForwardPlans(unittest.TestCase):
    """gdn_fwd.tile's forward plans (fixtures from the same build as the backward's)."""

    def test_forward_plan_loads_and_binds(self):
        op = load_operator(ART, "gdn_fwd")
        kernels = [l.kernel for l in op.plan.launches]
        # The backward's recomputation, then the output stage.
        # (No repeat_heads: the forward's stages read q and k at each value head's key head.)
        self.assertEqual(kernels, ["seq_bounds", "chunk_table", "gate_cumsum", "kkt", "solve_tril", "recompute_w_u", "state_fwd", "chunk_o"])
        specs = {k: v for k, v in gdn_specs(G=2).items() if k not in ("do", "dht")}
        p = prepare(op, specs, {"scale": 0.088})
        outs = {o.name: o.shape for o in p.outputs}
        # ai: Ai = (I + L)^-1 of every chunk of 64 (fla's A), bf16 [B, T, H * G, 64], for the saved backward.
        self.assertEqual(outs, {"o": (2, 100, 4, 128), "ht": (2, 4, 128, 128), "ai": (2, 100, 4, 64)})
        self.assertEqual([(p.name, p.dtype) for p in op.plan.params if p.role == "output"], [("o", "bf16"), ("ht", "f32"), ("ai", "bf16")])
        with self.assertRaises(OperatorError) as c:
            prepare(op, gdn_specs(G=2), {"scale": 0.088})
        self.assertEqual(c.exception.param, "do")

    def test_varlen_forward_states_per_sequence(self):
        vl = load_operator(ART, "gdn_fwd_varlen")
        self.assertEqual(vl.plan.offsets, [("cu_seqlens", "T")])
        specs = {k: v for k, v in gdn_specs(B=1, T=200).items() if k not in ("do", "dht")}
        specs["s0"] = S("f32", (3, 2, 128, 128))          # three sequences
        specs["cu_seqlens"] = S("i32", (4,))
        p = prepare(vl, specs, {"scale": 0.088})
        outs = {o.name: o.shape for o in p.outputs}
        self.assertEqual((outs["ht"], outs["ai"]), ((3, 2, 128, 128), (1, 200, 2, 64)))


class OptionalInputs(unittest.TestCase):
    """`s0`, `dht` `optional(zeros)` (plan schema 3): a call may leave them out, as fla's
    initial_state=None and dht=None; the call allocates them zero-filled, never returns them."""

    def test_backward_without_states_allocates_them_as_zero_inputs(self):
        op = load_operator(ART, "gdn_bwd")
        self.assertEqual(op.plan.optional, ("s0", "dht"))
        full = prepare(op, gdn_specs(G=2), {"scale": 0.088})
        specs = {k: v for k, v in gdn_specs(G=2).items() if k not in ("s0", "dht")}
        p = prepare(op, specs, {"scale": 0.088})
        # Their extents come from the required inputs: [B, H * G, K, V] = [2, 4, 128, 128].
        self.assertEqual({t.name: t.shape for t in p.zero_inputs}, {"s0": (2, 4, 128, 128), "dht": (2, 4, 128, 128)})
        self.assertEqual({o.name for o in p.outputs}, {o.name for o in full.outputs}, "not returned as outputs")
        self.assertEqual(full.zero_inputs, ())
        self.assertEqual([s.grid for s in p.steps], [s.grid for s in full.steps])
        # A required input is still refused, naming it.
        with self.assertRaises(OperatorError) as c:
            prepare(op, {k: v for k, v in specs.items() if k != "do"}, {"scale": 0.088})
        self.assertEqual(c.exception.param, "do")

    def test_optional_names_an_input_tensor_once(self):
        with open(os.path.join(ART, "gdn_bwd.sm_90a.plan.json")) as f:
            raw = json.load(f)
        self.assertEqual(plan_from_dict(copy.deepcopy(raw)).optional, ("s0", "dht"))
        for names, version in [(["dq"], 3), (["scale"], 3), (["nope"], 3), (["s0", "s0"], 3), (["s0"], 2), (None, 3), (False, 3), ({}, 3), ("s0", 3)]:
            bad = copy.deepcopy(raw)
            bad["optional"], bad["schema_version"] = names, version
            with self.assertRaises(MetaError, msg=f"{names} v{version}"):
                plan_from_dict(bad)


class SavedBackward(unittest.TestCase):
    """gdn_bwd_saved[_varlen]: the backward fed the forward's ai instead of recomputing L and its
    inverse (fixtures from the same build)."""

    @classmethod
    def setUpClass(cls):
        cls.op = load_operator(ART, "gdn_bwd_saved")
        cls.vl = load_operator(ART, "gdn_bwd_saved_varlen")

    def specs(self, **override):
        return gdn_specs(G=2, **dict({"ai": S("bf16", (2, 100, 4, 64))}, **override))

    def test_launches_skip_kkt_and_solve_tril(self):
        for saved, full in [(self.op, "gdn_bwd"), (self.vl, "gdn_bwd_varlen")]:
            kernels = [l.kernel for l in saved.plan.launches]
            want = [k for k in (l.kernel for l in load_operator(ART, full).plan.launches) if k not in ("kkt", "solve_tril")]
            self.assertEqual(kernels, want, full)
        self.assertEqual([l.kernel for l in self.op.plan.launches],
                         ["seq_bounds", "chunk_table", "repeat_heads", "repeat_heads", "gate_cumsum", "recompute_w_u", "state_fwd",
                          "dv_local", "k1_scan_scalar_bf16", "dqkwg_bf16", "k2_wy_vjp", "combine"])

    def test_parameters_take_the_forwards_ai(self):
        self.assertEqual([p.name for p in self.op.plan.params if p.role == "input" and not p.is_scalar],
                         ["q", "k", "v", "g", "beta", "ai", "s0", "do", "dht"])
        fwd = load_operator(ART, "gdn_fwd").plan.param("ai")
        ai = self.op.plan.param("ai")
        self.assertEqual((ai.dtype, ai.shape, ai.role), (fwd.dtype, fwd.shape, "input"))
        self.assertEqual(ai.shape, ("B", "T", "(H * G)", "64"))

    def test_binds_as_gdn_bwd(self):
        p = prepare(self.op, self.specs(), {"scale": 0.088})
        full = prepare(load_operator(ART, "gdn_bwd"), gdn_specs(G=2), {"scale": 0.088})
        self.assertEqual(p.sizes, {"B": 2, "T": 100, "H": 2, "G": 2})
        self.assertEqual({o.name: o.shape for o in p.outputs}, {o.name: o.shape for o in full.outputs})
        self.assertEqual([s.kernel for s in p.steps], [l.kernel for l in self.op.plan.launches])

    def test_wrong_ai_is_refused_naming_it(self):
        def refuse(specs, pattern, op=None):
            with self.assertRaises(OperatorError) as c:
                prepare(op or self.op, specs, {"scale": 0.088})
            self.assertRegex(str(c.exception), pattern)
            self.assertEqual(c.exception.param, "ai")

        refuse(self.specs(ai=S("bf16", (2, 100, 4, 128))), r"`ai` dim 3: expected 64, found 128")
        refuse(self.specs(ai=S("bf16", (2, 100, 2, 64))), r"`ai` dim 2: expected \(H \* G\) = 4, found 2")   # another head layout
        refuse(self.specs(ai=S("bf16", (2, 99, 4, 64))), r"size `T` is inconsistent: .* parameter `ai` dim 1 gives 99")
        refuse(self.specs(ai=S("f32", (2, 100, 4, 64))), r"`ai`: expected dtype bf16, found f32")
        refuse(self.specs(ai=S("bf16", (2, 100, 4))), r"`ai`: expected rank 4")
        s = self.specs()
        del s["ai"]
        refuse(s, r"missing input parameter `ai`: expected bf16 tensor \[B, T, \(H \* G\), 64\]")
        vs = gdn_specs(B=1, T=100, cu_seqlens=S("i32", (4,)), ai=S("bf16", (1, 100, 2, 64)))
        st = S("f32", (3, 2, 128, 128))
        vs.update(s0=st, dht=st)
        p = prepare(self.vl, vs, {"scale": 0.1}, {"cu_seqlens": [0, 1, 40, 100]})
        self.assertEqual({o.name: o.shape for o in p.outputs}["ds0"], (3, 2, 128, 128))
        vs.update(ai=S("bf16", (1, 100, 4, 64)))
        refuse(vs, r"operator `gdn_bwd_saved_varlen`: parameter `ai` dim 2: expected \(H \* G\) = 2, found 4", self.vl)


class Binding(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.op = load_operator(ART, "gdn_bwd")
        cls.vl = load_operator(ART, "gdn_bwd_varlen")

    def refuse(self, specs, pattern, param, scalars=None, op=None):
        with self.assertRaises(OperatorError) as c:
            prepare(op or self.op, specs, {"scale": 0.088} if scalars is None else scalars)
        self.assertRegex(str(c.exception), pattern)
        self.assertEqual(c.exception.param, param)
        return str(c.exception)

    def test_good_call_binds_sizes_and_shapes(self):
        p = prepare(self.op, gdn_specs(G=2), {"scale": 0.088})
        self.assertEqual(p.sizes, {"B": 2, "T": 100, "H": 2, "G": 2})
        outs = {o.name: o.shape for o in p.outputs}
        self.assertEqual(outs, {"dq": (2, 100, 2, 128), "dk": (2, 100, 2, 128), "dv": (2, 100, 4, 128), "dg": (2, 100, 4), "dbeta": (2, 100, 4), "ds0": (2, 4, 128, 128)})
        bufs = {n: s for n, _, s in p.buffers}
        # ct has cdiv(T, 64) + NP - 2 rows = 2; hs one [K, V] state per chunk row and value head.
        self.assertEqual(bufs["gdn_bwd_varlen.ct"], (2, 2))
        self.assertEqual(bufs["gdn_bwd_varlen.hs"], (2, 2, 4, 128, 128))
        self.assertEqual(bufs["cu"], (2,))

    def test_wrong_dtype_names_the_tensor(self):
        self.refuse(gdn_specs(v=S("f32", (2, 100, 2, 128))), r"parameter `v`: expected dtype bf16, found f32", "v")
        self.refuse(gdn_specs(g=S("bf16", (2, 100, 2))), r"`g`: expected dtype f32", "g")

    def test_wrong_rank_and_extent(self):
        self.refuse(gdn_specs(beta=S("bf16", (2, 100, 2, 1))), r"`beta`: expected rank 3", "beta")
        self.refuse(gdn_specs(do=S("bf16", (2, 99, 2, 128))), r"size `T` is inconsistent: parameter `q` dim 1 gives 100, but parameter `do` dim 1 gives 99", "do")
        self.refuse(gdn_specs(s0=S("f32", (3, 2, 128, 128))), r"size `B` is inconsistent", "s0")

    def test_gva_needs_a_multiple(self):
        self.refuse(gdn_specs(v=S("bf16", (2, 100, 3, 128))), r"parameter `v` dim 2 \(`\(H \* G\)`\): 3 is not a positive multiple of 2", "v")

    def test_head_sizes_the_build_lacks(self):
        K64 = gdn_specs(q=S("bf16", (2, 100, 2, 64)))
        msg = self.refuse(K64, r"`q` dim 3: expected 128, found 64: it is compiled with K = 128; K = 64 needs `--const K=64`", "q")
        self.assertIn("operator `gdn_bwd`", msg)
        self.refuse(gdn_specs(q=S("bf16", (2, 100, 2, 96))), r"K = 96 is not supported \(the source supports K ∈ \{64, 128\}\)", "q")
        self.refuse(gdn_specs(v=S("bf16", (2, 100, 2, 256)), do=S("bf16", (2, 100, 2, 256))), r"V = 256 needs `--const V=256`", "v")

    def test_zero_tokens_name_the_size(self):
        # T = 0 leaves a chunk grid empty: the message names T (as the Rust binder's), not only the grid.
        msg = self.refuse(gdn_specs(T=0), r"launch \d+ \(`\w+`\): launch.grid\[\d\] = `cdiv\(T, 64\)` evaluates to 0 with T = 0, outside 1\.\.=", None)
        self.assertIn("operator `gdn_bwd`", msg)

    def test_missing_and_unknown(self):
        s = gdn_specs()
        del s["do"]
        self.refuse(s, r"missing input parameter `do`: expected bf16 tensor \[B, T, \(H \* G\), 128\]", "do")
        self.refuse(gdn_specs(), r"missing input parameter `scale`", "scale", scalars={})
        self.refuse(gdn_specs(x=S("f32", (1,))), r"has no tensor parameter `x`", "x")
        self.refuse(gdn_specs(), r"`scale`: expected a f32 scalar", "scale", scalars={"scale": "big"})

    def test_offset_tables_given_on_the_host(self):
        spec = gdn_specs(B=1, T=100, cu_seqlens=S("i32", (4,)))
        s0 = S("f32", (3, 2, 128, 128))
        spec.update(s0=s0, dht=s0)
        prepare(self.vl, spec, {"scale": 0.1}, {"cu_seqlens": [0, 1, 40, 100]})
        for table, why in [([0, 1, 130, 100], r"entry 2 \(130\) is past T = 100"), ([1, 2, 3, 100], "entry 0 is 1, not 0"), ([0, 50, 40, 100], "entry 2 \\(40\\) is less than entry 1"), ([0, 1, 40, 99], r"the last entry \(index 3\) is 99, not 100")]:
            with self.assertRaisesRegex(OperatorError, why):
                prepare(self.vl, spec, {"scale": 0.1}, {"cu_seqlens": table})
        # On the device (not given): not checked, as fla.
        prepare(self.vl, spec, {"scale": 0.1})
        # States are per sequence: [B * (NP - 1), ...].
        spec.update(s0=S("f32", (1, 2, 128, 128)))
        with self.assertRaisesRegex(OperatorError, r"`s0` dim 0: expected \(B \* \(NP - 1\)\) = 3, found 1"):
            prepare(self.vl, spec, {"scale": 0.1})


class LaunchArguments(unittest.TestCase):
    """Grid, block, shared memory, the packed parameters and the tensor-map encode arguments,
    against values worked out by hand from the metadata."""

    @classmethod
    def setUpClass(cls):
        cls.op = load_operator(ART, "gdn_bwd")
        cls.p = prepare(cls.op, gdn_specs(B=2, T=100, H=2, G=2), {"scale": 0.088})
        names = [n for n, *_ in cls.p.buffers] + [p.name for p in cls.op.plan.params if not p.is_scalar]
        # Distinct, 256-byte aligned fake device addresses.
        cls.ptrs = {n: 0x7F00_0000_0000 + i * 0x1_0000_0000 for i, n in enumerate(sorted(names))}

    def step(self, kernel):
        return next(s for s in self.p.steps if s.kernel == kernel)

    def test_order_and_configuration(self):
        self.assertEqual([s.kernel for s in self.p.steps], [l.kernel for l in self.op.plan.launches])
        k1 = self.step("k1_scan_scalar_bf16")
        # grid [cdiv(V, 32), (B * H) * (NP - 1), 1] with B=2, H=4 value heads (repeat_heads), NP=2.
        smem = self.op.kernels["k1_scan_scalar_bf16"].dynamic_smem_bytes  # the metadata's, passed on as is
        self.assertEqual((k1.grid, k1.block, k1.dynamic_smem_bytes), ((4, 8, 1), (128, 1, 1), smem))
        comb = self.step("combine")  # grid [NS, B * H, 1] with H = 2 key heads, NS = 2 chunk rows
        self.assertEqual(comb.grid, (2, 4, 1))
        self.assertEqual(self.step("seq_bounds").grid, (1, 1, 1))
        self.assertEqual(self.step("state_fwd").grid, (4, 8, 1))
        self.assertEqual(self.step("dqkwg_bf16").grid, (2, 8, 2))

    def test_packed_parameters(self):
        k1 = self.step("k1_scan_scalar_bf16")
        pk = pack_launch(k1, self.ptrs)
        meta = self.op.kernels["k1_scan_scalar_bf16"]
        self.assertEqual(len(pk.params), len(meta.params) + len(meta.tensor_maps))  # 18 + 5, as the PTX's 23 .params
        routed = dict(self.op.plan.launches[10].args)
        for i, p in enumerate(meta.params):
            data = pk.params[i]
            if not p.is_scalar:
                self.assertEqual(data, struct.pack("<Q", self.ptrs[routed[p.name]]), p.name)
        tail = dict(zip([p.name for p in meta.params[12:]], pk.params[12:18]))
        self.assertEqual(tail["scale"], struct.pack("<f", 0.088))
        self.assertEqual([struct.unpack("<i", tail[n])[0] for n in ["NP", "B", "T", "H", "V"]], [2, 2, 100, 4, 128])
        self.assertEqual(pk.params[18:], (None,) * 5)
        self.assertEqual([i for i, _ in pk.tensor_maps], [18, 19, 20, 21, 22])

    def test_tensor_map_encoding(self):
        k1 = self.step("k1_scan_scalar_bf16")
        pk = pack_launch(k1, self.ptrs)
        encs = [e for _, e in pk.tensor_maps]
        kmap = encs[0]  # k (the repeated kv buffer): bf16 [B=2, T=100, HV=4, 128], box [1, 64, 1, 64], 128B
        self.assertEqual(kmap.global_address, self.ptrs["gdn_bwd_varlen.kv"])
        self.assertEqual(kmap.global_dim, (128, 4, 100, 2))
        self.assertEqual(kmap.global_strides, (256, 1024, 102400))
        self.assertEqual(kmap.box_dim, (64, 1, 64, 1))
        self.assertEqual(kmap.element_strides, (1, 1, 1, 1))
        a = kmap.driver_args()
        self.assertEqual((a["tensorDataType"], a["tensorRank"], a["swizzle"], a["interleave"], a["l2Promotion"], a["oobFill"]), (9, 4, 3, 0, 3, 0))
        names = [t.tensor for t in self.op.kernels["k1_scan_scalar_bf16"].tensor_maps]  # the metadata's order
        dv = encs[names.index("dv")]  # dv: box [1, 64, 1, 32], 64B swizzle
        self.assertEqual((dv.box_dim, dv.swizzle_bytes, dv.driver_args()["swizzle"]), ((32, 1, 64, 1), 64, 2))
        self.assertEqual(encs[names.index("dout")].swizzle_bytes, 0)  # dout: none
        dq = self.step("dqkwg_bf16")
        hs = pack_launch(dq, self.ptrs).tensor_maps[0][1]  # hs: bf16 [2, 2, 4, 128, 128], box [1,1,1,64,64]
        self.assertEqual((hs.global_dim, hs.global_strides, hs.box_dim), ((128, 128, 4, 2, 2), (256, 32768, 131072, 262144), (64, 64, 1, 1, 1)))

    def test_unencodable_maps_are_none(self):
        tm = self.op.kernels["k1_scan_scalar_bf16"].tensor_maps[0]
        self.assertIsNone(encoding(tm, "bf16", (2, 100, 4, 128), 0x1008))  # base not 16-byte aligned
        self.assertIsNone(encoding(tm, "bf16", (2, 100, 4), 0))  # rank differs from the box
        self.assertIsNone(encoding(tm, "bf16", (2, 0, 4, 128), 0))  # empty
        self.assertIsNone(encoding(tm, "bf16", (2, 100, 4, 65), 0))  # a 130-byte row
        ptrs = dict(self.ptrs, **{"gdn_bwd_varlen.kv": self.ptrs["gdn_bwd_varlen.kv"] + 8})
        self.assertIsNone(pack_launch(self.step("k1_scan_scalar_bf16"), ptrs).tensor_maps[0][1])

    def test_scalar_bytes_round_once(self):
        self.assertEqual(scalar_bytes("bf16", 1.0), b"\x80\x3f")
        self.assertEqual(scalar_bytes("bf16", 1 + 2 ** -8), b"\x80\x3f")  # tie to even
        self.assertEqual(scalar_bytes("bf16", 1 + 3 * 2 ** -8), b"\x82\x3f")
        self.assertEqual(scalar_bytes("bf16", 1e39), b"\x80\x7f")
        self.assertEqual(scalar_bytes("bf16", -(2.0 ** -133)), b"\x01\x80")  # smallest subnormal
        self.assertEqual(scalar_bytes("f16", 65504.0), struct.pack("<H", 0x7BFF))
        self.assertEqual(scalar_bytes("f16", 65520.0), struct.pack("<H", 0x7C00))
        self.assertEqual(scalar_bytes("f32", 0.1), struct.pack("<f", 0.1))
        self.assertEqual(scalar_bytes("i32", -5), struct.pack("<i", -5))
        # Double rounding (f64 -> f32 -> bf16) would round this up; one rounding keeps it down.
        x = 1 + 2 ** -8 - 2 ** -30
        self.assertEqual(scalar_bytes("bf16", x), b"\x80\x3f")


class FakeDriver:
    """Records the driver calls of ``driver.launch`` and reads the kernelParams it was given."""

    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = CUtensorMapFloatOOBfill = staticmethod(int)
    CUstream = staticmethod(int)

    class _Map:
        def __init__(self, tag):
            self.opaque = [tag] * 16

    def __init__(self, sizes):
        self.sizes = sizes
        self.encoded = []
        self.launched = None

    def cuTensorMapEncodeTiled(self, *args):
        self.encoded.append(args)
        return (0, self._Map(len(self.encoded)))

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        arr = (ctypes.c_void_p * len(self.sizes)).from_address(params)
        got = [ctypes.string_at(arr[i], n) for i, n in enumerate(self.sizes)]
        aligned = [arr[i] % 64 == 0 for i in range(len(self.sizes))]
        self.launched = (f, (gx, gy, gz), (bx, by, bz), smem, stream, got, aligned, extra)
        return (0,)


class DriverLayer(unittest.TestCase):
    def test_launch_passes_the_packed_parameters(self):
        op = load_operator(ART, "gdn_bwd")
        p = prepare(op, gdn_specs(B=1, T=64, H=2, G=1), {"scale": 0.5})
        step = next(s for s in p.steps if s.kernel == "k1_scan_scalar_bf16")
        ptrs = {n: 0x10000 * (i + 1) for i, n in enumerate(sorted({v for l in op.plan.launches for _, v in l.args}))}
        ptrs["gdn_bwd_varlen.w"] += 8  # w's map cannot be encoded: 128 zero bytes
        pk = pack_launch(step, ptrs)
        fake = FakeDriver([len(x) if x is not None else 128 for x in pk.params])
        saved = driver._import_driver
        driver._import_driver = lambda: fake
        try:
            driver.launch("FN", pk, 1234)
        finally:
            driver._import_driver = saved
        f, grid, block, smem, stream, got, aligned, extra = fake.launched
        planned = op.kernels["k1_scan_scalar_bf16"].dynamic_smem_bytes  # the metadata's, passed to the driver as is
        self.assertEqual((f, grid, block, smem, stream, extra), ("FN", (4, 2, 1), (128, 1, 1), planned, 1234, 0))
        self.assertEqual(got[:18], list(pk.params[:18]))
        self.assertEqual(len(fake.encoded), 4)  # k, q, dout, dv; not w
        self.assertEqual(fake.encoded[0][:4], (9, 4, ptrs["gdn_bwd_varlen.kv"], [128, 2, 64, 1]))
        self.assertEqual(got[18:22], [struct.pack("<Q", i) * 16 for i in (1, 2, 3, 4)])
        self.assertEqual(got[22], bytes(128))
        self.assertTrue(all(aligned[18:]))


if __name__ == "__main__":
    unittest.main()
