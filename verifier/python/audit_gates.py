"""The gates of ``kverify audit`` for arbitrary tasks beyond CMP-01, RES-01, ORD-02 and EXC-01
(docs/audit.md, "The gates for arbitrary tasks"): CMP-03, ORD-01, ORD-03, EXC-02, PRC-01 and
PRC-02. Imported by audit_worker.py after torch. Like the worker, this module only *measures*:
every bound, applicability rule and verdict is kverify's (verifier/src/audit/judge.rs).

``prepare(task, gate, seeds)`` does the reference side (the task's own Model in fp64 and two
honest fp32 orderings; its exceptions make the probe n/a, never charged); ``run(task, gate,
seeds)`` the candidate side. ``task`` is the worker's ``Task``.

Facts of the value gates (CMP-03, ORD-01, ORD-03, PRC-01, PRC-02), per probe:
  prepare {"name", "ref_error"?, "honest": [a, b], "own_nonfinite", "finite", "ref_max"}
  run     {"name", "err", "nonfinite_where_ref_finite", "shape_ok", "raised"?, "fits"?}
where ``honest`` and ``err`` are the normalised error ``e(y) = |y - r| / (|r| + mean|r|)`` over
positions where the fp64 reference ``r`` is finite — its maximum, or for ORD-01 its root mean
square — of the task's own fp32 Model (a: on the device, PyTorch defaults; b: a CPU copy) and of
the candidate. EXC-02 facts are sign-class counts (see ``exc02_*``).
"""
import contextlib
import copy
import traceback

import task_source

import torch

GATES = ("CMP-03", "ORD-01", "ORD-03", "EXC-02", "PRC-01", "PRC-02")
TINY32 = 1.1754943508222875e-38

# Exponents of the EXC-02 probes per input dtype: "sub" puts N(0,1) data 4 binades below the
# smallest normal (subnormal inputs); "tiny" about half the normal range down, so that products
# of two inputs (matmul, conv, x*y) land among the subnormals of the output dtype.
SCALE_EXP = {
    torch.float32: {"sub": -130, "tiny": -67},
    torch.bfloat16: {"sub": -130, "tiny": -67},
    torch.float16: {"sub": -18, "tiny": -9},
    torch.float64: {"sub": -1026, "tiny": -515},
}


def is_oom(e):
    """Whether ``e`` (an exception or its message) says the device ran out of memory. With
    several workers sharing a GPU that is the audit's contention, not the task's or the
    candidate's doing: it propagates to kverify, which judges the unit again with the GPU to
    itself (docs/audit.md), instead of becoming an n/a or a charged refusal here."""
    m = str(e).lower()
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in m or "alloc_failed" in m


def msg(e, limit=1000):
    """An exception as its type and message, the last ``limit`` characters."""
    return "".join(traceback.format_exception_only(type(e), e)).strip()[-limit:]


def transform(xs, kind, seed):
    """Replace the values of every non-empty floating tensor in ``xs`` (CPU, before the move to
    the device), keeping shape, dtype and the task's structure; other arguments pass through.
      wide: +-U[1,2)*2^k, k uniform integer in [-20, 20) (f16: [-6, 6)), ORD-03's ~40 binades;
      pos:  U[1,2) (PRC-01/02: positive, no cancellation, full fp32 mantissas);
      sub / tiny: the given N(0,1) data times 2^SCALE_EXP[dtype][kind] (EXC-02).
    Structure kept: positions where ``get_inputs()`` put an exact zero, or a non-finite value,
    keep it, and a tensor with no negative element gets none (``wide`` then takes |value|) —
    a task whose inputs are, say, upper-triangular states a precondition a candidate may rely
    on, and dense probe data would charge it for inputs the task never gives (a triangular
    matmul of the CUDA-L1 corpus, docs/audit.md). Seeded by ``seed`` through its own
    generator."""
    g = torch.Generator().manual_seed(int(seed))
    out = []
    for x in xs:
        if not (torch.is_tensor(x) and x.is_floating_point() and x.numel()):
            out.append(x)
            continue
        dt, shape, dev = x.dtype, x.shape, x.device
        x64 = x.detach().to("cpu", torch.float64)
        if kind == "wide":
            lim = 6 if dt == torch.float16 else 20
            u = lambda: torch.rand(shape, generator=g, dtype=torch.float64)  # noqa: E731
            m, e, s = 1.0 + u(), torch.floor(u() * 2 * lim - lim), torch.where(u() < 0.5, -1.0, 1.0)
            y = s * m * torch.exp2(e)
            if not bool((x64 < 0).any()):
                y = y.abs()
        elif kind == "pos":
            y = 1.0 + torch.rand(shape, generator=g, dtype=torch.float64)
        elif kind in ("sub", "tiny"):
            y = x64 * 2.0 ** SCALE_EXP.get(dt, SCALE_EXP[torch.float32])[kind]
        else:
            raise ValueError(f"unknown probe kind {kind}")
        y = torch.where((x64 == 0) | ~torch.isfinite(x64), x64, y)
        out.append(y.to(dt).to(dev))
    return out


def nan_positions(x, seed):
    """EXC-01's injection sites in ``x`` (flattened): every 256th element from ``seed mod 256``,
    among those where ``get_inputs()`` put no exact zero (the task's structure: a NaN where a
    triangular or masked input is zero breaks its precondition, not the candidate)."""
    flat = x.reshape(-1)
    pos = torch.arange((seed % 256) % flat.numel(), flat.numel(), 256)
    return pos[flat[pos] != 0]


def outputs(o):
    """A forward's result flattened into a list (as the worker's ``outputs``)."""
    if isinstance(o, (list, tuple)):
        return [t for x in o for t in outputs(x)]
    return [o]


def plain(outs):
    return [o.as_subclass(torch.Tensor) if torch.is_tensor(o) else o for o in outs]


def errs(ys, rs):
    """Normalised errors of outputs ``ys`` against fp64 reference outputs ``rs``: max and root
    mean square of |y - r| / (|r| + mean|r|) over positions where r is finite (mean per output
    tensor), the count of those positions (``finite``) where y is not finite (``bad``), whether
    the output count and shapes agree, and the largest finite |r|.

    Computed in float64 where the reference lives (the GPU on a GPU host; the CPU if the GPU
    has no room): on the H200 this comparison, done on one CPU thread, was most of an audit's
    judging time (docs/audit.md, "Measured on the H200"). Only the sums' rounding order
    depends on the place (fp64: relative differences of order 1e-16)."""
    worst, sq, n, bad, finite, rmax = 0.0, 0.0, 0, 0, 0, 0.0
    shape_ok = len(ys) == len(rs)
    for y, r in zip(ys, rs):
        if not (torch.is_tensor(y) and torch.is_tensor(r)) or tuple(y.shape) != tuple(r.shape):
            shape_ok = False
            continue
        try:
            t = _err_terms(y, r, r.device)
        except torch.cuda.OutOfMemoryError:
            t = _err_terms(y, r, torch.device("cpu"))
        if t is None:
            continue
        worst, sq, n, bad, finite, rmax = max(worst, t[0]), sq + t[1], n + t[2], bad + t[3], finite + t[4], max(rmax, t[5])
    return {"max": worst, "rms": (sq / n) ** 0.5 if n else 0.0, "bad": bad, "finite": finite, "shape_ok": shape_ok, "ref_max": rmax}


def _err_terms(y, r, dev):
    """One output's (max error, sum of squared errors, their count, non-finite y where r is
    finite, finite r, max finite |r|), on ``dev``; None when r has no finite element."""
    r = r.detach().to(dev, torch.float64)
    y = y.detach().to(dev, torch.float64)
    fin = torch.isfinite(r)
    nfin = int(fin.sum())
    if nfin == 0:
        return None
    ra = r[fin].abs()
    e = ((y - r).abs() / (r.abs() + ra.mean()).clamp_min(TINY32))[fin]
    bad = int((~torch.isfinite(y[fin])).sum())
    e = e[torch.isfinite(e)]
    if not e.numel():
        return (0.0, 0.0, 0, bad, nfin, float(ra.max()))
    return (float(e.max()), float((e * e).sum()), e.numel(), bad, nfin, float(ra.max()))


# -- CMP-03: the task's size constants ------------------------------------------------------------
def code_names(fn):
    """Global names read by ``fn`` and the functions, lambdas and comprehensions inside it."""
    names, todo = set(), [getattr(fn, "__code__", None)]
    while todo:
        c = todo.pop()
        if c is None:
            continue
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


@contextlib.contextmanager
def override(mod, values):
    """Set module globals for the duration (functions read globals when called), and the
    module-level values the task's source derives from them (``task_source.derived_values``:
    ``groups = in_channels`` follows ``in_channels``)."""
    src = mod.__dict__.get(task_source.SOURCE_KEY)
    if src:
        values = {**task_source.derived_values(src, mod.__dict__, values), **values}
    old = {k: mod.__dict__[k] for k in values if k in mod.__dict__}
    mod.__dict__.update(values)
    try:
        yield
    finally:
        for k in values:
            if k in old:
                mod.__dict__[k] = old[k]
            else:
                mod.__dict__.pop(k, None)


def input_shapes(mod):
    """Shapes of ``mod.get_inputs()`` (on the meta device: nothing allocated; a program that
    places tensors itself runs for real on the CPU)."""
    torch.manual_seed(0)
    try:
        with torch.device("meta"):
            xs = list(mod.get_inputs())
    except Exception:
        xs = list(mod.get_inputs())
    return [tuple(x.shape) if torch.is_tensor(x) else repr(x) for x in xs]


def size_constants(mod):
    """The task's size constants: module-level ints (not bools) >= 1 that ``get_inputs`` or
    ``get_init_inputs`` read and that change the input shapes when doubled alone. Constants that
    change no input shape (an axis index, a kernel size, a flag) are left alone."""
    names = code_names(getattr(mod, "get_inputs", None)) | code_names(getattr(mod, "get_init_inputs", None))
    base = input_shapes(mod)
    found = {}
    for n in sorted(names):
        v = mod.__dict__.get(n)
        if type(v) is not int or v < 1:
            continue
        try:
            with override(mod, {n: 2 * v}):
                if input_shapes(mod) != base:
                    found[n] = v
        except Exception:
            continue
    return found


def variants(consts):
    """x2: every size constant doubled; odd: every size constant made odd and changed (n + 1 for
    even n, n + 2 for odd n)."""
    return [("x2", {k: 2 * v for k, v in consts.items()}), ("odd", {k: v + 1 if v % 2 == 0 else v + 2 for k, v in consts.items()})]


def cmp03_prepare(task, seeds):
    consts = size_constants(task.ref_mod)
    facts = {"constants": consts, "probes": []}
    task.cache["CMP-03"] = {}
    if not consts:  # sizes written as literals: nothing to change (the layouts still apply)
        facts["probes"].append({"name": "sizes", "na": "no module-level size constant shapes the inputs (sizes are literals): nothing to change consistently"})
    for (name, vals), seed in zip(variants(consts) if consts else [], seeds + seeds[-1:] * 2):
        f = {"name": name, "sizes": vals}
        try:
            with override(task.ref_mod, vals):
                init = list(task.ref_mod.get_init_inputs())
                torch.manual_seed(task.seed)
                if torch.cuda.is_available():
                    torch.cuda.manual_seed(task.seed)
                m = task.ref_mod.Model(*init)
                m64 = copy.deepcopy(m).double().to(task.device)
                m32 = m.to(task.device)
                xs = task.inputs(seed, tag=name)
                r64 = task.run_ref64(xs, m64)
                a, b = errs(task.run_ref32(xs, m32), r64), errs(task.run_cpu32_single_thread(xs, m32), r64)
        except Exception as e:  # the task's own Model cannot run at this size: n/a
            if is_oom(e):
                raise
            f["ref_error"] = msg(e)
            facts["probes"].append(f)
            continue
        task.cache["CMP-03"][name] = (vals, init, seed, r64)
        f.update(honest=[a["max"], b["max"]], own_nonfinite=a["bad"] + b["bad"], finite=a["finite"], ref_max=a["ref_max"])
        facts["probes"].append(f)
    facts["probes"] += layouts_prepare(task, seeds[0])
    return facts


def cmp03_run(task, seeds):
    probes = []
    for name, (vals, init, seed, r64) in task.cache.get("CMP-03", {}).items():
        # The candidate's own copies of the task's constants (same name, same native value) are
        # changed too: a candidate reading the task's constants is not shape-rigid.
        cm = task.cand_mod.__dict__ if task.cand_mod is not None else {}
        native = task.ref_mod.__dict__
        cvals = {k: v for k, v in vals.items() if type(cm.get(k)) is int and cm[k] == native[k]}
        f = {"name": name}
        try:
            with override(task.ref_mod, vals), override(task.cand_mod, cvals) if task.cand_mod is not None else contextlib.nullcontext():
                torch.manual_seed(task.seed)
                if torch.cuda.is_available():
                    torch.cuda.manual_seed(task.seed)
                cand = task.cand_mod.ModelNew(*init).to(task.device)
                xs = task.inputs(seed, tag=name)
                with torch.no_grad():
                    out = plain(outputs(cand(*xs)))
        except Exception as e:  # a refusal at another legal size: rejected (a crash is the process's)
            out = e
        probes.append(candidate_facts(f, out, r64))
    return {"probes": probes + layouts_run(task)}


def candidate_facts(f, out, r64):
    """A CMP-03 probe's candidate facts into ``f``: its outputs ``out`` against ``r64``, or, when
    ``out`` is the exception the candidate raised, the refusal (``raised``; out of memory
    propagates: the audit's contention, not the candidate's)."""
    if isinstance(out, Exception):
        if is_oom(out):
            raise out
        f["raised"] = msg(out)
        return f
    e = errs(out, r64)
    f.update(err=e["max"], nonfinite_where_ref_finite=e["bad"], shape_ok=e["shape_ok"])
    return f


# -- CMP-03's layouts: the same values in other memory layouts (issue 12, item 4) -------------------
# KernelBench hands every input over contiguous, so a candidate that reads a tensor's storage as
# if it were dense row-major (a transposed view read as the original, a view's storage offset
# ignored) passes every other gate. As the NumPy worker (kverify_worker.apply_layout) and
# kverify's own candidates (verifier/src/gates/cmp03_probes.rs): at the task's native sizes,
# every floating input of more than one element once as a transposed view (last two axes
# column-major), once as a view LAYOUT_OFFSET elements into a NaN-headed buffer, once as a
# stride-0 view along its first axis of extent > 1 (the values made constant along that axis
# first, on the reference's side too). Judged as the other CMP-03 probes (docs/audit.md).
LAYOUT_OFFSET = 3
LAYOUTS = ("transposed views", "offset views", "expanded (stride-0) views")


def layout_of(x, label):
    """The layout the probe ``label`` gives input ``x`` ("transposed", "offset", "expanded"), or
    None where it leaves it as it is: not a floating tensor of more than one element; for
    transposed views a tensor of rank < 2 or whose last two extents are both 1; for expanded
    views one whose values, made constant along the axis, would be non-zero where
    ``get_inputs()`` put an exact zero (the task's structure, kept as ``transform`` keeps it)."""
    if not (torch.is_tensor(x) and x.is_floating_point() and x.numel() > 1):
        return None
    if label == LAYOUTS[0]:
        return "transposed" if x.dim() >= 2 and x.shape[-1] * x.shape[-2] > 1 else None
    if label == LAYOUTS[1]:
        return "offset"
    return None if bool(((x == 0) & (_constant(x) != 0)).any()) else "expanded"


def _constant(x):
    """``x`` made constant along its first axis of extent > 1 (its slice at index 0 repeated)."""
    ax = next(i for i, n in enumerate(x.shape) if n > 1)
    return x.narrow(ax, 0, 1).expand(x.shape)


def layout_values(xs, label):
    """The probe's input values: the task's own, or for expanded views each laid-out input made
    constant along its first axis of extent > 1."""
    if label != LAYOUTS[2]:
        return xs
    return [_constant(x).contiguous() if layout_of(x, label) else x for x in xs]


def layout_view(x, how):
    """``x``'s values in layout ``how`` (a view; for "expanded" ``x`` must be constant along its
    first axis of extent > 1, as ``layout_values`` makes it)."""
    if how == "transposed":
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "offset":
        buf = torch.full((x.numel() + LAYOUT_OFFSET,), float("nan"), dtype=x.dtype, device=x.device)
        buf[LAYOUT_OFFSET:] = x.reshape(-1)
        return buf[LAYOUT_OFFSET:].view(x.shape)
    v = _constant(x.clone())
    if not torch.equal(v, x):
        raise ValueError("expanded layout asked for values that vary along the expanded axis")
    return v


def layout_inputs(task, seed, label):
    """(values, views, layouts) of the probe ``label``: the contiguous values the fp64 reference
    takes, the same values laid out as the candidate receives them, and each input's layout
    (None: as given)."""
    xs = layout_values(task.inputs(seed, tag="layouts"), label)
    hows = [layout_of(x, label) for x in xs]
    return xs, [layout_view(x, h) if h else x for x, h in zip(xs, hows)], hows


def layouts_prepare(task, seed):
    """Reference side of the layout probes at the task's native inputs of ``seed``: the fp64
    Model on the probe's values, and the two honest fp32 runs — the task's own Model handed the
    same views (a layout may change its reduction order too; the CPU copy gets them as well)."""
    facts, refs = [], {}
    task.cache[("CMP-03", "layouts")] = {}
    for label in LAYOUTS:
        xs, views, hows = layout_inputs(task, seed, label)
        f = {"name": label}
        if not any(hows):
            f["na"] = f"no floating input of more than one element can be given as {label}"
            facts.append(f)
            continue
        key = label == LAYOUTS[2]  # the transposed and offset probes share the task's own values
        try:
            if key not in refs:
                refs[key] = task.run_ref64(xs)
            r64 = refs[key]
            a, b = errs(task.run_ref32(views), r64), errs(task.run_cpu32_single_thread(views), r64)
        except Exception as e:
            if is_oom(e):
                raise
            f["ref_error"] = msg(e)
            facts.append(f)
            continue
        task.cache[("CMP-03", "layouts")][label] = (seed, r64)
        f.update(honest=[a["max"], b["max"]], own_nonfinite=a["bad"] + b["bad"], finite=a["finite"], ref_max=a["ref_max"], layouts=[h or "as given" for h in hows])
        facts.append(f)
    return facts


def layouts_run(task):
    """Candidate side of the layout probes: ModelNew (the loaded slot) on the views; an
    exception is a refusal (``raised``), as at the other sizes."""
    probes = []
    for label, (seed, r64) in task.cache.get(("CMP-03", "layouts"), {}).items():
        try:
            out = plain(task.run_cand(layout_inputs(task, seed, label)[1]))
        except Exception as e:
            out = e
        probes.append(candidate_facts({"name": label}, out, r64))
    return probes


# -- value probes at other input distributions -----------------------------------------------------
PROBES = {
    # gate: (statistic, [(probe name, input kind), ...]); one seed per probe, in order.
    "ORD-01": ("rms", [("seed0", None), ("seed1", None), ("seed2", None)]),
    "ORD-03": ("max", [("wide0", "wide"), ("wide1", "wide")]),
    "PRC-01": ("max", [("pos", "pos")]),
    "PRC-02": ("max", [("pos", "pos")]),
}

# PRC-01's diagnosis: the candidate against the fp64 reference at inputs rounded to P.
REDUCED = [("11-bit significand (fp16/tf32 inputs)", torch.float16), ("bf16 inputs", torch.bfloat16)]


def value_prepare(task, gate, seeds):
    stat, probes = PROBES[gate]
    facts = []
    for (name, kind), seed in zip(probes, seeds + seeds[-1:] * len(probes)):
        f = {"name": name}
        try:
            xs = task.inputs(seed, kind=kind)
            if kind is not None and not any(torch.is_tensor(x) and x.is_floating_point() and x.numel() for x in xs):
                f["ref_error"] = "no floating-point input"
                facts.append(f)
                continue
            r64, a, b = task.reference(seed, kind, gate)
            extra = {}
            if gate == "PRC-01":
                extra["reduced"] = [task.run_ref64([x.to(dt).to(x.dtype) if torch.is_tensor(x) and x.is_floating_point() else x for x in xs]) for _, dt in REDUCED]
        except Exception as e:
            if is_oom(e):
                raise
            f["ref_error"] = msg(e)
            facts.append(f)
            continue
        task.cache[(gate, name)] = (seed, kind, r64, extra)
        f.update(honest=[a[stat], b[stat]], own_nonfinite=a["bad"] + b["bad"], finite=a["finite"], ref_max=a["ref_max"])
        facts.append(f)
    return {"statistic": stat, "probes": facts}


def value_run(task, gate, seeds):
    stat, probes = PROBES[gate]
    facts = []
    for name, _ in probes:
        if (gate, name) not in task.cache:
            continue
        seed, kind, r64, extra = task.cache[(gate, name)]
        out = plain(task.run_cand(task.inputs(seed, kind=kind)))
        e = errs(out, r64)
        f = {"name": name, "err": e[stat], "nonfinite_where_ref_finite": e["bad"], "shape_ok": e["shape_ok"]}
        if gate == "PRC-01":
            f["fits"] = [[label, errs(out, r)[stat]] for (label, _), r in zip(REDUCED, extra["reduced"])]
        facts.append(f)
    return {"probes": facts}


# -- EXC-02: subnormals ----------------------------------------------------------------------------
def sign_classes(t, dev=None):
    """0 zero, 1 positive, 2 negative, 3 NaN, 4 +Inf, 5 -Inf, per element (flattened, int8), on
    ``dev`` (default: where ``t`` is — the GPU on a GPU host, where these passes over every
    output element cost little; on the CPU they were most of EXC-02's time)."""
    t = t.detach() if dev is None else t.detach().to(dev)
    c = torch.zeros(t.numel(), dtype=torch.int8, device=t.device)
    if not t.is_floating_point():
        return c
    f = t.reshape(-1)
    for cls, where in ((1, f > 0), (2, f < 0), (3, torch.isnan(f)), (4, f == float("inf")), (5, f == float("-inf"))):
        c.masked_fill_(where, cls)
    return c


def _exc02_target(r, a, b, dev):
    """One output of EXC-02's reference side on ``dev``: the sign classes of the fp64 reference
    ``r`` rounded to the output dtype, the positions compared (both honest fp32 runs ``a``,
    ``b`` in the reference's class, and |r| above 16 x their largest absolute error, or r not
    finite), and the count of subnormals in the rounded reference."""
    rr = r.detach().to(dev).to(a.dtype)
    cls = sign_classes(rr)
    r64 = r.detach().to(dev, torch.float64).reshape(-1)
    fin = torch.isfinite(r64)
    band = 0.0
    for h in (a, b):
        d = (h.detach().to(dev, torch.float64).reshape(-1) - r64)[fin].abs()
        d = d[torch.isfinite(d)]
        if d.numel():
            band = max(band, 16.0 * float(d.max()))
    mask = (sign_classes(a, dev) == cls) & (sign_classes(b, dev) == cls)
    if band > 0:
        mask &= (r64.abs() > band) | ~fin
    sub = (rr != 0) & (rr.abs() < torch.finfo(rr.dtype).tiny)
    return cls, mask, int(sub.sum())


def exc02_prepare(task, seeds):
    """Per probe (subnormal inputs, tiny inputs): the fp64 reference rounded to the task's
    output dtype, its sign classes, and the positions compared: where both honest fp32 runs have
    the reference's class and |r| exceeds 16 x their largest absolute error (below that band
    rounding alone may change the class; a band of 0 — exact honest runs — compares every
    position, zeros included). Computed where the reference lives, on the CPU if the GPU has no
    room."""
    facts = []
    task.cache["EXC-02"] = {}
    for name, seed in (("subnormal", seeds[0]), ("tiny", seeds[-1])):
        f = {"name": name}
        try:
            xs = task.inputs(seed, kind="sub" if name == "subnormal" else "tiny")
            if not any(torch.is_tensor(x) and x.is_floating_point() and x.numel() for x in xs):
                f["ref_error"] = "no floating-point input"
                facts.append(f)
                continue
            r64 = task.run_ref64(xs)
            own, cpu = task.run_ref32(xs), task.run_cpu32_single_thread(xs)
        except Exception as e:
            if is_oom(e):
                raise
            f["ref_error"] = msg(e)
            facts.append(f)
            continue
        want, masks, nsub, compared = [], [], 0, 0
        for r, a, b in zip(r64, own, cpu):
            if not (torch.is_tensor(r) and torch.is_tensor(a) and r.is_floating_point() and a.is_floating_point()):
                masks.append(None)
                want.append(None)
                continue
            try:
                cls, mask, n = _exc02_target(r, a, b, r.device)
            except torch.cuda.OutOfMemoryError:
                cls, mask, n = _exc02_target(r, a, b, torch.device("cpu"))
            nsub += n
            compared += int(mask.sum())
            masks.append(mask)
            want.append(cls)
        task.cache["EXC-02"][name] = (seed, want, masks)
        f.update(compared=compared, ref_subnormal=nsub, total=int(sum(m.numel() for m in masks if m is not None)))
        facts.append(f)
    return {"probes": facts}


def exc02_run(task, seeds):
    facts = []
    for name, (seed, want, masks) in task.cache.get("EXC-02", {}).items():
        out = plain(task.run_cand(task.inputs(seed, kind="sub" if name == "subnormal" else "tiny")))
        if len(out) != len(want) or any(w is not None and (not torch.is_tensor(o) or o.numel() != w.numel()) for o, w in zip(out, want)):
            facts.append({"name": name, "shape_ok": False})
            continue
        mism, flushed = 0, 0
        for o, w, m in zip(out, want, masks):
            if w is None:
                continue
            c = sign_classes(o, w.device)
            mism += int(((c != w) & m).sum())
            flushed += int(((c == 0) & (w != 0) & m).sum())
        facts.append({"name": name, "shape_ok": True, "mismatches": mism, "flushed": flushed})
    return {"probes": facts}


def prepare(task, gate, seeds):
    if gate == "CMP-03":
        return cmp03_prepare(task, seeds)
    if gate == "EXC-02":
        return exc02_prepare(task, seeds)
    return value_prepare(task, gate, seeds)


def run(task, gate, seeds):
    if gate == "CMP-03":
        return cmp03_run(task, seeds)
    if gate == "EXC-02":
        return exc02_run(task, seeds)
    return value_run(task, gate, seeds)
