#!/usr/bin/env python3
"""kverify audit worker (protocol kverify-audit/1, docs/audit.md): judges one KernelBench-style
task at a time — its reference ``Model`` and a candidate ``ModelNew`` — with PyTorch.

    python3 audit_worker.py --device cpu|cuda:N

kverify starts one worker per job under its containment (docs/audit.md), sends one JSON line
per request and reads one JSON line per answer. The worker *measures*; every decision (bounds,
pass/fail, applicability) is taken by kverify (verifier/src/audit/judge.rs).

Requests:
  {"id", "cmd": "load", "ref_code", "seed"}                 build Model (fp32 and fp64 copies)
  {"id", "cmd": "load_candidate", "custom_code", "slot"?}  build ModelNew, seeded the same way,
                                                           into a slot (default 0)
  {"id", "cmd": "prepare", "gate", "params"}  reference-side work of a gate (its failure is n/a)
  {"id", "cmd": "run", "gate", "params", "slot"?}  candidate-side work of a gate for a slot's
                                              ModelNew (its failure is charged)
  {"id", "cmd": "forget", "gate"}             the gate is judged for every slot: drop its cache
Slots: with ``kverify audit --with-control`` slot 0 holds the task's own Model and slot 1 the
candidate, both judged against one reference side.
Answers: {"id", "ok": true, "facts": {...}} or {"id", "ok": false, "error": str, "env": bool,
"oom": bool} (``env``: the failure is this machine's — no CUDA — not the kernel's; ``oom``: the
device ran out of memory, on either side — kverify judges the unit again with the GPU alone).
Gates KB, CMP-01, RES-01, ORD-02 and EXC-01 are measured here (KB's trials by
kernelbench_check.py); CMP-03, ORD-01, ORD-03, EXC-02, PRC-01 and PRC-02 by audit_gates.py
beside this file (both imported after torch).
"""
import argparse
import copy
import hashlib
import json
import os
import sys
import time
import traceback
import types

import task_source

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
PROTOCOL = "kverify-audit/1"
ENV_MARKERS = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs", "CUDA_HOME", "nvcc", "cuda runtime", "CUDA driver")

torch = None  # imported in main() so that a missing torch is a start-up failure with a message
audit_gates = None  # the further gates (audit_gates.py beside this file), imported with torch
kernelbench_check = None  # KernelBench's own check (kernelbench_check.py), imported with torch
U32 = 2.0**-24
# Inputs kept per task for reuse (Task.inputs), in bytes on the task's device; several workers
# share one GPU, so the default stays a small part of an H200's 141 GB.
INPUT_CACHE_BYTES = int(os.environ.get("KVERIFY_INPUT_CACHE_MB", "1024")) * 2**20
# Seconds spent per part of a request (reference fp64, fp32 on the device and on the CPU, the
# candidate, input generation), written as one JSON line per request to the file named by
# KVERIFY_AUDIT_PROFILE when it is set: where an audit's time goes, without touching the facts.
PROFILE = os.environ.get("KVERIFY_AUDIT_PROFILE")
SPENT = {}


def timed(part):
    def wrap(f):
        def g(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                if PROFILE and torch.cuda.is_available():
                    try:  # charge a GPU part to itself, not to its reader
                        torch.cuda.synchronize()
                    except BaseException:  # noqa: BLE001  (the part's own error, if any, is what propagates)
                        pass
                SPENT[part] = SPENT.get(part, 0.0) + time.perf_counter() - t0
        return g
    return wrap


# Process-wide numerics switches that programs flip, at import or inside forward (24 of the
# CUDA-L1 ModelNews set allow_tf32). A switch a candidate sets must not reach the reference
# side (it would make the honest fp32 run, and so CMP-01's bound, TF32-sized) nor another
# candidate slot: the worker snapshots the task's state after loading Model, each slot's after
# loading its ModelNew, and runs every request under the state of whoever it measures.
SWITCHES = (
    ("backends", "fp32_precision"),
    ("backends.cuda.matmul", "fp32_precision"),
    ("backends.cudnn", "fp32_precision"),
    ("backends.cudnn.conv", "fp32_precision"),
    ("backends.cudnn.rnn", "fp32_precision"),
    ("backends.cuda.matmul", "allow_tf32"),
    ("backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("backends.cudnn", "allow_tf32"),
    ("backends.cudnn", "benchmark"),
    ("backends.cudnn", "deterministic"),
    ("backends.cudnn", "enabled"),
)


def _owner(path):
    o = torch
    for part in path.split("."):
        o = getattr(o, part)
    return o


def switches():
    """The current state of SWITCHES, float32 matmul precision, deterministic algorithms and
    the default dtype (a switch this PyTorch lacks, or refuses to read, is left out)."""
    st = {}
    for path, attr in SWITCHES:
        try:
            st[(path, attr)] = getattr(_owner(path), attr)
        except Exception:  # noqa: BLE001  (absent in this PyTorch, or a mixed-API refusal)
            pass
    st["matmul_precision"] = torch.get_float32_matmul_precision()
    st["deterministic"] = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    st["default_dtype"] = torch.get_default_dtype()
    return st


def set_switches(st):
    for key, v in st.items():
        try:
            if key == "matmul_precision":
                torch.set_float32_matmul_precision(v)
            elif key == "deterministic":
                torch.use_deterministic_algorithms(v[0], warn_only=v[1])
            elif key == "default_dtype":
                torch.set_default_dtype(v)
            else:
                setattr(_owner(key[0]), key[1], v)
        except Exception:  # noqa: BLE001  (a switch this PyTorch will not take back: left)
            pass


class switched:
    """``with switched(state):`` runs under ``state`` and puts back what was there before."""

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        self.before = switches()
        set_switches(self.state)

    def __exit__(self, *exc):
        set_switches(self.before)
        return False


# Gates that share a reference (same seeds, same inputs) -> the last of them in kverify's order.
LAST_USER = {"CMP-01": "ORD-01", "PRC-01": "PRC-02"}


def set_seed(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def exec_module(code, name):
    mod = types.ModuleType(name)
    mod.__dict__["__name__"] = name
    # The source, for the values CMP-03 must re-derive when it changes a size constant.
    mod.__dict__[task_source.SOURCE_KEY] = code
    exec(compile(code, f"<{name}>", "exec"), mod.__dict__)
    return mod


def is_env_error(msg):
    """A failure that says this machine has no CUDA (only then: on a GPU host an nvcc error is
    the kernel's own build failure)."""
    return not torch.cuda.is_available() and any(m.lower() in msg.lower() for m in ENV_MARKERS)


def outputs(o):
    """Flatten a forward's result into a list of tensors (non-tensors are kept for type checks)."""
    if isinstance(o, (list, tuple)):
        r = []
        for x in o:
            r.extend(outputs(x))
        return r
    return [o]


def tensor_bytes(t):
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def digest(outs):
    h = hashlib.sha256()
    for t in outs:
        if torch.is_tensor(t):
            h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
            h.update(tensor_bytes(t))
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


class Task:
    def __init__(self, req, device):
        self.device = torch.device(device)
        self.seed = int(req.get("seed", 42))
        self.ref_mod = exec_module(req["ref_code"], "kverify_reference")
        self.ref_switches = switches()  # the task's own state, whatever its module set
        # As KernelBench's eval_kernel_against_ref: seeded before get_init_inputs() and again
        # before each model is built.
        set_seed(self.seed)
        self.init_inputs = list(self.ref_mod.get_init_inputs())
        set_seed(self.seed)
        m = self.ref_mod.Model(*self.init_inputs)
        self.ref32 = m.to(self.device)
        self.cpu32 = None
        self.ref64 = None
        self.fp64_reason = None
        try:
            self.ref64 = copy.deepcopy(m).double().to(self.device)
        except Exception as e:  # a model that cannot be made fp64 is n/a, never charged
            if audit_gates.is_oom(e):
                raise
            self.fp64_reason = f"cannot convert Model to float64: {e}"
        self.slots = {}
        self.use(0)
        self.cache = {}
        self.last_user = {}  # shared reference -> the last gate that reads it (LAST_USER)
        self.input_cache = {}
        self.input_cache_bytes = 0

    def load_candidate(self, code, slot=0):
        """Build ModelNew seeded like Model into ``slot`` (a failure is the candidate's:
        reported, not raised), starting from the task's switches and keeping the ones the
        candidate leaves set as its own."""
        cand, cmod, err = None, None, None
        with switched(self.ref_switches):
            try:
                cmod = exec_module(code, f"kverify_candidate_{slot}")
                set_seed(self.seed)
                cand = cmod.ModelNew(*self.init_inputs).to(self.device)
            except BaseException as e:  # the candidate's own failure to build
                if audit_gates.is_oom(e):
                    raise  # the shared GPU's contention: kverify retries the unit alone
                err = audit_gates.msg(e, 2000)
            own = switches()
        self.slots[slot] = (cand, cmod, err, own)
        self.use(slot)

    def use(self, slot):
        """Make ``slot``'s candidate the one ``run`` measures."""
        self.cand, self.cand_mod, self.cand_error, self.cand_switches = self.slots.get(slot, (None, None, "not loaded", self.ref_switches))

    # -- inputs and models -------------------------------------------------------------------
    @timed("inputs")
    def inputs(self, seed, nan=False, kind=None, tag=None):
        """``get_inputs()`` after seeding with ``seed``; ``nan``: EXC-01's injection; ``kind``: a
        probe distribution of audit_gates.transform (wide, pos, sub, tiny) replacing the
        floating inputs' values (shapes and dtypes kept); ``tag``: the size variant the caller
        set (CMP-03), part of the cache key.

        Generated once per key and handed out as fresh copies (a candidate may write to its
        inputs): the generation on the CPU and the copy to the device were an eighth of an
        audit's worker time on the H200, most of it regenerating the same inputs. The random
        generators are left as a fresh generation would leave them, so a candidate that draws
        random numbers sees the same stream as without the cache."""
        key = (seed, nan, kind, tag)
        hit = self.input_cache.get(key)
        if hit is None:
            set_seed(seed)
            xs = list(self.ref_mod.get_inputs())
            if kind is not None:
                xs = audit_gates.transform(xs, kind, seed)
            if nan:
                for x in xs:
                    if torch.is_tensor(x) and x.is_floating_point() and x.numel() > 0:
                        x.view(-1)[audit_gates.nan_positions(x, seed)] = float("nan")
            xs = [x.to(self.device) if torch.is_tensor(x) else x for x in xs]
            rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
            size = sum(x.numel() * x.element_size() for x in xs if torch.is_tensor(x))
            if self.input_cache_bytes + size <= INPUT_CACHE_BYTES:
                self.input_cache[key] = (xs, rng)
                self.input_cache_bytes += size
            return xs
        xs, (cpu_rng, cuda_rng) = hit
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        return [x.clone() if torch.is_tensor(x) else copy.copy(x) for x in xs]

    def reference(self, seed, kind, gate):
        """``(r64, a, b)`` at the inputs of ``(seed, kind)``: the task's Model in fp64, and
        ``audit_gates.errs`` of its two honest fp32 orderings (on the device; a CPU copy)
        against it. Computed once per task: CMP-01 and ORD-01 share their seeds, PRC-01 and
        PRC-02 their probe (verifier/src/audit/session.rs, ``seeds``); kept until the last gate
        that shares it is forgotten (``forget``)."""
        key = ("reference", seed, kind)
        self.last_user[key] = LAST_USER.get(gate, gate)
        if key not in self.cache:
            xs = self.inputs(seed, kind=kind)
            r64 = self.run_ref64(xs)
            a = audit_gates.errs(self.run_ref32(xs), r64)
            b = audit_gates.errs(self.run_cpu32_single_thread(xs), r64)
            self.cache[key] = (r64, a, b)
        return self.cache[key]

    @timed("ref64")
    def run_ref64(self, xs, model=None):
        model = self.ref64 if model is None else model
        if model is None:
            raise RuntimeError(self.fp64_reason)
        xd = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in xs]
        prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.are_deterministic_algorithms_enabled())
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            with torch.no_grad():
                out = outputs(model(*xd))
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev[0], prev[1]
            torch.use_deterministic_algorithms(prev[2])
        for t in out:
            if torch.is_tensor(t) and t.is_floating_point() and t.dtype != torch.float64:
                raise RuntimeError(f"Model does not compute in float64 (output dtype {t.dtype})")
        return out

    @timed("ref32")
    def run_ref32(self, xs, model=None):
        model = self.ref32 if model is None else model
        with torch.no_grad():
            return outputs(model(*[x.clone() if torch.is_tensor(x) else x for x in xs]))

    @timed("cpu32")
    def run_cpu32_single_thread(self, xs, model=None):
        """The second honest ordering: the fp32 Model on the CPU — with one thread when the
        device is the CPU itself (another summation order than the multi-threaded run), with
        KVERIFY_CPU_THREADS threads when the device is a GPU (already another library and
        order; kverify sets it to the cores per parallel worker — one thread would make
        GPU-sized tasks take minutes, and subnormal probes run at a fraction of the CPU's
        speed)."""
        if model is not None:
            cpu = copy.deepcopy(model).to("cpu")
        else:
            if self.cpu32 is None:
                self.cpu32 = copy.deepcopy(self.ref32).to("cpu")
            cpu = self.cpu32
        n = torch.get_num_threads()
        torch.set_num_threads(1 if self.device.type == "cpu" else max(1, int(os.environ.get("KVERIFY_CPU_THREADS", n))))
        try:
            with torch.no_grad():
                return outputs(cpu(*[x.detach().cpu().clone() if torch.is_tensor(x) else x for x in xs]))
        finally:
            torch.set_num_threads(n)

    @timed("cand")
    def run_cand(self, xs):
        if self.cand is None:
            raise RuntimeError(f"ModelNew failed to build: {self.cand_error}")
        with torch.no_grad():
            return outputs(self.cand(*xs))

    def forget(self, gate):
        """Drop what ``gate`` cached (its fp64 references, masks, outputs) once kverify has
        judged it for every slot, and the shared references whose last user it was. Kept for
        the whole task, they filled the H200 beside other workers: the comparisons fell back to
        the CPU, and some tasks ran out of memory."""
        for k in list(self.cache):
            if k == gate or (isinstance(k, tuple) and k[0] == gate) or self.last_user.get(k) == gate:
                del self.cache[k]
                self.last_user.pop(k, None)

    # -- comparisons ---------------------------------------------------------------------------
    @staticmethod
    def norm_err(ys, rs):
        """CMP-01's view of ``audit_gates.errs`` (one normalised error for every gate): the max of
        |y - r| / (|r| + mean|r|) over positions where r is finite, the number of those positions
        where y is not finite, and whether the output count and shapes agree."""
        e = audit_gates.errs(ys, rs)
        return e["max"], e["bad"], e["shape_ok"]

    @staticmethod
    def classes(ts, dtype=None, dev=None):
        """EXC-01's classes per element (flattened, int8): 1 NaN, 2 +Inf, 3 -Inf, 0 finite — of
        each output rounded to ``dtype`` if given, on ``dev`` (default: where it is): EXC-02's
        sign classes with zero, positive and negative merged."""
        r = []
        for t in ts:
            t = t.detach() if dev is None else t.detach().to(dev)
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            r.append((audit_gates.sign_classes(t) - 2).clamp_min(0))
        return r

    def call_facts(self, xs, want):
        """One candidate call with RES-01's checks: output types, device, dtype, shape, aliasing
        of and changes to the inputs."""
        before = [x.clone() if torch.is_tensor(x) else None for x in xs]
        outs = self.run_cand(xs)
        f = {"types": [type(o).__module__ + "." + type(o).__qualname__ for o in outs]}
        f["type_exact"] = all(type(o) is torch.Tensor for o in outs)
        f["devices"] = [str(o.device) if torch.is_tensor(o) else "none" for o in outs]
        f["device_ok"] = all(torch.is_tensor(o) and o.device == self.device for o in outs)
        f["dtypes"] = [str(o.dtype) if torch.is_tensor(o) else "none" for o in outs]
        f["dtype_ok"] = len(outs) == len(want) and all(torch.is_tensor(o) and o.dtype == w.dtype for o, w in zip(outs, want))
        f["shape_ok"] = len(outs) == len(want) and all(torch.is_tensor(o) and tuple(o.shape) == tuple(w.shape) for o, w in zip(outs, want))
        f["alias"] = [[i, j] for i, o in enumerate(outs) for j, x in enumerate(xs) if torch.is_tensor(o) and torch.is_tensor(x) and overlaps(o, x)]
        f["mutated"] = [j for j, (x, b) in enumerate(zip(xs, before)) if b is not None and not same_bits(x, b)]
        plain = [o.as_subclass(torch.Tensor) if torch.is_tensor(o) else o for o in outs]
        return f, plain

    # -- gates ---------------------------------------------------------------------------------
    def prepare(self, gate, p):
        seeds = p.get("seeds", [self.seed])
        if gate in audit_gates.GATES:
            return audit_gates.prepare(self, gate, seeds)
        if gate == "KB":
            # The reference side alone, as the trials run it (its failure here is n/a); the
            # trials run it again beside each candidate, as KernelBench does (kernelbench_check).
            seeds = kernelbench_check.trial_seeds(seeds[0], p.get("trials", 5))
            with torch.no_grad():
                for s in seeds:
                    xs = self.inputs(s)
                    set_seed(s)
                    self.ref32(*xs)
            return {"trials": len(seeds)}
        if gate == "CMP-01":
            facts = []
            for s in seeds:
                r64, a, b = self.reference(s, None, gate)
                self.cache[("CMP-01", s)] = r64
                facts.append({"seed": s, "honest": [a["max"], b["max"]]})
            return {"seeds": facts}
        if gate == "RES-01":
            xa, xb = self.inputs(seeds[0]), self.inputs(seeds[1])
            ra = self.run_ref32(xa)
            rb = self.run_ref32(xb)
            self.cache["RES-01"] = (ra, rb)
            # What the task's own Model does to its inputs is its contract, not a violation.
            ref_self = Task.__new__(Task)
            ref_self.__dict__.update(self.__dict__)
            ref_self.cand = self.ref32
            f, _ = ref_self.call_facts(self.inputs(seeds[0]), ra)
            return {"ref_alias": f["alias"], "ref_mutated": f["mutated"], "ref_changes": digest(ra) != digest(rb)}
        if gate == "ORD-02":
            xs = self.inputs(seeds[0])
            return {"ref_hashes": [digest(self.run_ref32(xs)) for _ in range(p.get("runs", 5))]}
        if gate == "EXC-01":
            xs = self.inputs(seeds[0], nan=True)
            if not any(torch.is_tensor(x) and x.is_floating_point() and x.numel() for x in xs):
                return {"applicable": False, "reason": "no floating-point input"}
            r64 = self.run_ref64(xs)
            want = self.run_ref32(xs)
            cls = self.classes(r64, want[0].dtype if want and torch.is_tensor(want[0]) else None)
            own = self.classes(want)
            self.cache["EXC-01"] = (cls, want)
            agree = len(cls) == len(own) and all(a.shape == b.shape and bool((a == b).all()) for a, b in zip(cls, own))
            return {"applicable": True, "ref_nonfinite": int(sum(int((c != 0).sum()) for c in cls)), "own_fp32_agrees": agree}
        raise ValueError(f"unknown gate {gate}")

    def run(self, gate, p):
        seeds = p.get("seeds", [self.seed])
        if gate in audit_gates.GATES:
            return audit_gates.run(self, gate, seeds)
        if gate == "KB":
            seeds = kernelbench_check.trial_seeds(seeds[0], p.get("trials", 5))
            return {"trials": kernelbench_check.trials(self, seeds, p.get("atol", 1e-2), p.get("rtol", 1e-2), set_seed)}
        if gate == "CMP-01":
            facts = []
            for s in seeds:
                out = self.run_cand(self.inputs(s))
                out = [o.as_subclass(torch.Tensor) if torch.is_tensor(o) else o for o in out]
                e, bad, shape_ok = self.norm_err(out, self.cache[("CMP-01", s)])
                facts.append({"seed": s, "err": e, "nonfinite_where_ref_finite": bad, "shape_ok": shape_ok})
            return {"seeds": facts}
        if gate == "RES-01":
            ra, rb = self.cache["RES-01"]
            fa, oa = self.call_facts(self.inputs(seeds[0]), ra)
            fb, ob = self.call_facts(self.inputs(seeds[1]), rb)
            stale = digest(oa) == digest(ob)
            return {"calls": [fa, fb], "stale_candidate": stale}
        if gate == "ORD-02":
            xs = self.inputs(seeds[0])
            hs = []
            for _ in range(p.get("runs", 5)):
                hs.append(digest(self.run_cand([x.clone() if torch.is_tensor(x) else x for x in xs])))
            return {"hashes": hs}
        if gate == "EXC-01":
            cls, want = self.cache["EXC-01"]
            out = self.run_cand(self.inputs(seeds[0], nan=True))
            dev = cls[0].device if cls else None
            got = self.classes([o.as_subclass(torch.Tensor) for o in out], dev=dev)
            if len(got) != len(cls) or any(a.shape != b.shape for a, b in zip(got, cls)):
                return {"mismatches": -1, "total": 0, "detail": "output count or size differs"}
            mism = sum(int((a != b).sum()) for a, b in zip(got, cls))
            swallowed = sum(int(((b != 0) & (a == 0)).sum()) for a, b in zip(got, cls))
            return {"mismatches": mism, "swallowed": swallowed, "total": int(sum(c.numel() for c in cls))}
        raise ValueError(f"unknown gate {gate}")


def overlaps(a, b):
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes() and sa.nbytes() > 0 and sb.nbytes() > 0


def same_bits(x, b):
    """Whether ``x`` and ``b`` hold the same bits (compared where they are, as raw bytes: NaN
    payloads and signed zeros count)."""
    if x.shape != b.shape or x.dtype != b.dtype or x.device != b.device:
        return False
    raw = lambda t: t.detach().contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return bool(torch.equal(raw(x), raw(b)))


def main():
    global torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    import torch as _torch  # noqa: E402  (a missing torch ends the worker before its hello)

    torch = _torch
    global audit_gates
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import audit_gates as _gates  # noqa: E402

    audit_gates = _gates
    global kernelbench_check
    import kernelbench_check as _kb  # noqa: E402

    kernelbench_check = _kb
    # Profiled like the model runs: the comparisons against the fp64 reference.
    audit_gates.errs = timed("errs")(audit_gates.errs)
    # Every CPU-side op of this worker (input generation, probe transforms, hashing, the CPU's
    # honest run) gets the cores kverify assigns per worker: PyTorch's default of one thread per
    # core, in each of several workers beside nvcc builds, oversubscribed the H200's host 8-fold.
    # (On a CPU device the task's own multi-threaded run is one of the two honest orderings:
    # left as it is.)
    if a.device.startswith("cuda") and os.environ.get("KVERIFY_CPU_THREADS"):
        torch.set_num_threads(max(1, int(os.environ["KVERIFY_CPU_THREADS"])))
    out = sys.stdout
    # Candidates print; keep the protocol channel for the protocol.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto.write(json.dumps({"protocol": PROTOCOL, "pid": os.getpid(), "torch": torch.__version__, "device": a.device}) + "\n")
    proto.flush()
    task = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        rid = req.get("id", 0)
        SPENT.clear()
        t0 = time.perf_counter()
        try:
            if req["cmd"] == "load":
                task = Task(req, a.device)
                resp = {"id": rid, "ok": True, "facts": {"fp64_ok": task.ref64 is not None, "fp64_reason": task.fp64_reason}}
            elif req["cmd"] == "load_candidate":
                task.load_candidate(req["custom_code"], int(req.get("slot", 0)))
                facts = {"candidate_ok": task.cand is not None, "candidate_error": task.cand_error}
                if task.cand_error:
                    facts["env"] = is_env_error(task.cand_error)
                resp = {"id": rid, "ok": True, "facts": facts}
            elif req["cmd"] == "forget":
                if task is not None:
                    task.forget(req["gate"])
                resp = {"id": rid, "ok": True, "facts": {}}
            elif req["cmd"] == "prepare":
                with switched(task.ref_switches):
                    resp = {"id": rid, "ok": True, "facts": task.prepare(req["gate"], req.get("params", {}))}
            elif req["cmd"] == "run":
                task.use(int(req.get("slot", 0)))
                with switched(task.cand_switches):
                    resp = {"id": rid, "ok": True, "facts": task.run(req["gate"], req.get("params", {}))}
            else:
                resp = {"id": rid, "ok": False, "error": f"unknown cmd {req['cmd']}"}
        except BaseException as e:  # a failure of the measured side; kverify decides whom to charge
            msg = audit_gates.msg(e, 2000)
            resp = {"id": rid, "ok": False, "error": msg, "env": is_env_error(msg), "oom": audit_gates.is_oom(e)}
        if torch.cuda.is_available():
            # Hand cached blocks back between requests: several workers share one GPU, and
            # memory this process keeps cached is memory another worker's task cannot get.
            try:
                torch.cuda.empty_cache()
            except BaseException:  # noqa: BLE001  (a device a candidate broke: the next request reports it)
                pass
        if PROFILE:
            row = {"pid": os.getpid(), "cmd": req.get("cmd"), "gate": req.get("gate"), "s": round(time.perf_counter() - t0, 3), **{k: round(v, 3) for k, v in SPENT.items()}}
            with open(PROFILE, "a") as f:
                f.write(json.dumps(row) + "\n")
        proto.write(json.dumps(resp) + "\n")
        proto.flush()
    del out


if __name__ == "__main__":
    main()
