#!/usr/bin/env python3
"""Run ``kverify audit`` past one host: its shards as Ray tasks, then one merged report.

    python3 scripts/audit_ray.py CORPUS.jsonl --out /shared/DIR [--device cuda|cpu]
        [--shards N] [--cpus-per-shard C] [--address ADDR] [--kverify PATH] [-- AUDIT ARGS...]

Shard i of n is ``kverify audit CORPUS --out DIR --shard i/n --device D --quiet`` in one Ray
task; with ``--device cuda`` each task asks Ray for one GPU (Ray sets CUDA_VISIBLE_DEVICES, so
the task's device is ``cuda:0``), with ``--device cpu`` for ``--cpus-per-shard`` CPUs. When
every task has ended, the driver runs ``kverify audit CORPUS --out DIR --report-only``, which
merges the shard files into DIR/summary.{json,txt} and the plots (docs/audit.md).

Ray only places and retries tasks; kverify does the rest. A shard writes its records into
DIR/kernels-<i>of<n>.jsonl as each kernel ends, so DIR must be one folder that every node sees
(a shared filesystem) and the kverify binary, the audit worker and PyTorch must exist at the
same paths on every node. A task lost with its node is retried by Ray (``--retries``); a
rerun of this script resumes every shard where it stopped (kverify skips what is recorded).
Nothing here schedules anything itself.

Defaults: ``--shards`` = the cluster's GPUs (cuda) or CPUs / ``--cpus-per-shard`` (cpu), as
Ray reports them; ``--address`` = ``auto`` when RAY_ADDRESS is set or a local cluster is
running, else a Ray instance started for this run on this machine.

Exit status: 0 when every shard and the report succeeded; 1 when a shard failed (its kverify
exit status and the end of its stderr are printed; rerun to resume); 2 on a usage error.
"""
import argparse
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_KVERIFY = os.path.join(HERE, "..", "target", "release", "kverify")


def parse(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", help="corpus JSON lines (ref_code / custom_code per row)")
    ap.add_argument("--out", required=True, help="output folder, on a filesystem every node sees")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="one GPU per shard (cuda) or CPUs (cpu)")
    ap.add_argument("--shards", type=int, default=0, help="number of shards (default: the cluster's GPU or CPU slots)")
    ap.add_argument("--cpus-per-shard", type=float, default=1.0, help="CPUs Ray reserves per shard (default 1)")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: auto, else a local instance)")
    ap.add_argument("--kverify", default=os.environ.get("KVERIFY", DEFAULT_KVERIFY), help="kverify binary, same path on every node")
    ap.add_argument("--retries", type=int, default=2, help="Ray retries of a shard whose node or process died (default 2)")
    a = ap.parse_args(argv)
    if a.shards < 0 or a.cpus_per_shard <= 0 or a.retries < 0:
        ap.error("--shards, --retries must be >= 0 and --cpus-per-shard > 0")
    if not os.path.isfile(a.corpus):
        ap.error(f"corpus {a.corpus} does not exist")
    if not (os.path.isfile(a.kverify) and os.access(a.kverify, os.X_OK)):
        ap.error(f"kverify binary {a.kverify} not found or not executable (--kverify, or KVERIFY)")
    for bad in ("--shard", "--out", "--device", "--report-only"):
        if any(x == bad or x.startswith(bad + "=") for x in extra):
            ap.error(f"{bad} is set by this driver; do not pass it after --")
    a.extra = extra
    a.corpus, a.out, a.kverify = (os.path.abspath(p) for p in (a.corpus, a.out, a.kverify))
    return a


def shard_command(a, i, n):
    dev = "cuda:0" if a.device == "cuda" else "cpu"
    return [a.kverify, "audit", a.corpus, "--out", a.out, "--shard", f"{i}/{n}", "--device", dev, "--quiet", *a.extra]


def run_shard(cmd):
    """One shard (runs inside a Ray task): kverify's exit status and the end of its stderr."""
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stderr[-4000:]


def main(argv):
    a = parse(argv)
    try:
        import ray
    except ImportError:
        print("audit_ray.py: Ray is not importable (pip install ray; docs/audit.md)", file=sys.stderr)
        return 2
    address = a.address or ("auto" if os.environ.get("RAY_ADDRESS") else None)
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(log_to_driver=False)
    res = ray.cluster_resources()
    if a.device == "cuda":
        slots = int(res.get("GPU", 0))
        opts = {"num_gpus": 1, "num_cpus": a.cpus_per_shard}
        if slots == 0:
            print("audit_ray.py: the Ray cluster has no GPU (use --device cpu)", file=sys.stderr)
            return 2
    else:
        slots = int(res.get("CPU", 0) // a.cpus_per_shard)
        opts = {"num_cpus": a.cpus_per_shard}
    n = a.shards or max(slots, 1)
    os.makedirs(a.out, exist_ok=True)
    task = ray.remote(max_retries=a.retries, **opts)(run_shard)
    cmds = [shard_command(a, i, n) for i in range(n)]
    print(f"audit_ray.py: {n} shards on {slots} {'GPU' if a.device == 'cuda' else 'CPU'} slot(s)", file=sys.stderr)
    refs = {task.remote(c): i for i, c in enumerate(cmds)}
    failed = []
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for r in done:
            i = refs[r]
            try:
                rc, err = ray.get(r)
            except Exception as e:  # the task itself was lost after its retries
                rc, err = -1, f"Ray task failed: {e}"
            tail = err.strip().splitlines()[-1:] or [""]
            print(f"audit_ray.py: shard {i}/{n} exit {rc}: {tail[0]}", file=sys.stderr)
            if rc != 0:
                failed.append((i, rc, err))
    ray.shutdown()
    for i, rc, err in failed:
        print(f"--- shard {i}/{n} failed (exit {rc}); rerun to resume:\n{shlex.join(cmds[i])}\n{err}", file=sys.stderr)
    report = subprocess.run([a.kverify, "audit", a.corpus, "--out", a.out, "--report-only", *report_args(a.extra)])
    if failed or report.returncode != 0:
        return 1
    return 0


def report_args(extra):
    """The arguments of the shard runs that also shape the report (--control selects keys)."""
    return [x for x in extra if x == "--control"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
