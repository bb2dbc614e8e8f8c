"""What the H200 bench scripts share: JSON-lines recording, tilec-run calls, the error metric.

Imported by bench/h200_gdn_bwd.py and bench/h200_gdn_fwd.py (run as `python3 bench/<script>.py`,
so this folder is on sys.path). Needs torch only for `rel` and `bits`.
"""
import json
import subprocess


class Recorder:
    """Prints each measurement (a dict) as one JSON line and rewrites all of them, indented, to
    `path` after each, so a run cut short keeps what it measured."""

    def __init__(self, path):
        self.path, self.rows = path, []

    def __call__(self, r):
        self.rows.append(r)
        print(json.dumps(r), flush=True)
        with open(self.path, "w") as f:
            json.dump(self.rows, f, indent=1)


def run_tilec(tilec_run, plan, inputs, out, *extra):
    """`tilec-run PLAN --inputs INPUTS --out OUT --code cubin EXTRA...`: its stdout.

    Raises RuntimeError with the tails of stdout and stderr when it exits non-zero (4: no GPU)."""
    p = subprocess.run([tilec_run, plan, "--inputs", inputs, "--out", out, "--code", "cubin", *extra], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tilec-run failed ({p.returncode}): {p.stdout[-1500:]} {p.stderr[-1500:]}")
    return p.stdout


def rel(a, b):
    """max|a − b| / max|b| in float64 (the anchors' metric: fla and FlashQLA report it)."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def bits(t):
    """The raw bits of a 16- or 32-bit tensor, for bitwise comparison."""
    import torch
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)
