"""What a KernelBench task's module-level source derives from its size constants (no PyTorch).

A task may compute module-level values from others: ``groups = in_channels`` (a depthwise
convolution), ``out_channels = in_channels``. When CMP-03 changes a size constant, such a value
must follow, or the task's ``get_init_inputs`` hands the candidate an inconsistent set (a
ModelNew that honours ``groups`` then fails where the task's own Model, which ignores it, does
not: CUDA-L1 row 84, L1-T85, on the H200). The source is kept on the module by the worker
(``__kverify_source__``)."""
import ast

SOURCE_KEY = "__kverify_source__"


def derived_values(source, namespace, values):
    """The module-level plain assignments of ``source`` (``name = expr``, ``name: T = expr``)
    whose expression reads a name in ``values`` — directly or through an earlier such
    assignment — re-evaluated in source order in ``namespace`` with ``values`` in place.
    Returns ``{name: new value}``; an expression that fails to evaluate keeps its old value, and
    a name in ``values`` itself is never reassigned."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return {}
    env = dict(namespace)
    env.update(values)
    changed = set(values)
    out = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id in values:
            continue
        if not {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & changed:
            continue
        try:
            v = eval(compile(ast.Expression(value), "<derived>", "eval"), env)
        except Exception:
            continue
        env[target.id] = v
        out[target.id] = v
        changed.add(target.id)
    return out
