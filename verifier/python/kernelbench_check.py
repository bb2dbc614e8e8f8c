"""KernelBench's own correctness check, the other side of ``kverify audit``'s differential (gate
KB; docs/audit.md, "KB — KernelBench's own check"). Imported by audit_worker.py after torch.
Like the worker it only *measures*: kverify judges the trial facts (verifier/src/audit/judge.rs,
``kernelbench``) and sends the base seed and the number of trials (verifier/src/audit/kernelbench.rs).

Reimplemented, no code copied, from ``run_and_check_correctness`` of
ScalingIntelligence/KernelBench — MIT licence, Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia
Mirhoseini — read at commit 48642c5 (``src/eval.py``, KernelBench v0.1, atol = rtol = 1e-2).
"""
import torch

import audit_gates


def trial_seeds(seed, n):
    """KernelBench's ``n`` trial seeds for base ``seed``, drawn as it draws them — after
    ``torch.manual_seed(seed)``, one ``torch.randint(0, 2**32 - 1, (1,))`` per trial — with this
    machine's PyTorch: the values depend on its version (2.11 reduces one 32-bit MT19937 output
    mod 2^32 − 1, 2.15 draws 64 bits for such a range), and KernelBench uses whatever is
    installed. Leaves the CPU generator seeded with ``seed`` and advanced by ``n`` draws, as
    KernelBench leaves it (the trials seed it again before they use it)."""
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(n)]


def trials(task, seeds, atol, rtol, set_seed):
    """KernelBench's check of ``task``'s current candidate slot: one fact per trial run,
    ``{"seed", "shape_ok", "allclose"}``, with ``"error"`` when the reference's run or the
    comparison raised (a KernelBench failure). ``task`` is the worker's ``Task`` (its
    ``inputs(seed)``, fp32 ``ref32`` and candidate ``cand``); ``seeds`` are KernelBench's trial
    seeds; ``set_seed`` seeds the CPU and CUDA generators (KernelBench's ``set_seed``).

    Per trial, as KernelBench: seed and call ``get_inputs()``, move the inputs to the device,
    seed again, run the reference ``Model`` and then ``ModelNew`` on the *same* input objects
    (the candidate sees the generator state the reference's forward left, and any change it
    made to the inputs), both under ``torch.no_grad()`` in the models' default (training) mode,
    the reference under the candidate's process-wide switches (one process, as KernelBench).
    A shape mismatch of the raw outputs (``output.shape != output_new.shape``: a tuple has no
    ``.shape`` and raises) ends the check; otherwise ``torch.allclose(output, output_new, atol,
    rtol)`` — reference first, so ``rtol`` scales ``|output_new|`` — judges the trial, and a
    mismatch goes on to the next one. The candidate's own exception propagates (kverify
    charges it, and counts KernelBench's check as failed); so does running out of device
    memory (kverify judges the unit again alone)."""
    facts = []
    with torch.no_grad():
        for s in seeds:
            xs = task.inputs(s)
            set_seed(s)
            try:
                output = task.ref32(*xs)
            except BaseException as e:
                if audit_gates.is_oom(e):
                    raise
                facts.append({"seed": s, "shape_ok": False, "allclose": False, "error": "reference raised: " + audit_gates.msg(e, 2000)})
                break
            if task.cand is None:
                raise RuntimeError(f"ModelNew failed to build: {task.cand_error}")
            output_new = task.cand(*xs)
            try:
                if output.shape != output_new.shape:
                    facts.append({"seed": s, "shape_ok": False, "allclose": False})
                    break
                close = bool(torch.allclose(output, output_new, atol=atol, rtol=rtol))
            except BaseException as e:
                if audit_gates.is_oom(e):
                    raise
                facts.append({"seed": s, "shape_ok": True, "allclose": False, "error": "comparison raised: " + audit_gates.msg(e, 2000)})
                break
            facts.append({"seed": s, "shape_ok": True, "allclose": close})
    return facts
