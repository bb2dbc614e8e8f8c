# The loss curves of bench/h200_train.py's runs (one panel per member: tilec, fla, fla on
# permuted batch rows, one curve per permutation) and the spread table of docs/training.md, from its JSON lines.
# Usage: python3 bench/plot_training.py TRAIN.jsonl [--png docs/training.png]   (needs matplotlib)
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("train")
ap.add_argument("--png", default="docs/training.png")
args = ap.parse_args()
runs = [json.loads(line) for line in open(args.train) if line.strip()]
members = list(dict.fromkeys(r["member"] for r in runs))


def runs_of(m, backend):
    return [r for r in runs if r["member"] == m and r["backend"] == backend and "losses" in r]


def gap(a, b, lo=0, hi=None):
    return max(abs(x - y) for x, y in list(zip(a, b))[lo:hi])


def perms(m):
    """The fla runs on permuted rows (fla_p, fla_p2, ...), one each."""
    return [r for r in runs if r["member"] == m and r["backend"].startswith("fla_p") and "losses" in r]


def crossing(losses, level):
    return next((i for i, x in enumerate(losses) if x < level), None)


print("| member | tilec ×2 bitwise | max\\|tilec − fla\\| steps 0–9 | fla spread steps 0–9 | max\\|tilec − fla\\| all | fla spread all | tilec inside the fla envelope | loss < 1 at step: tilec / fla runs | final loss tilec / fla runs | recall tilec / fla runs | tokens/s tilec / fla | peak MiB tilec / fla | first step s tilec |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for m in members:
    t, f, ps = runs_of(m, "tilec"), runs_of(m, "fla"), perms(m)
    if not (t and f and ps):
        continue
    same = len(t) > 1 and t[0]["losses"] == t[1]["losses"]
    L = lambda r: r["losses"]
    fl = [f[0]] + ps
    # The spread: the largest distance of a permuted run from fla (what reordering the fp32
    # reductions alone moves the curve by); the envelope: min..max over all fla runs, per step.
    spread10 = max(gap(L(f[0]), L(p), 0, 10) for p in ps)
    spread = max(gap(L(f[0]), L(p)) for p in ps)
    lo = [min(xs) for xs in zip(*map(L, fl))]
    hi = [max(xs) for xs in zip(*map(L, fl))]
    inside = sum(a <= x <= b for x, a, b in zip(L(t[0]), lo, hi)) / len(lo)
    cross = lambda r: crossing(L(r), 1.0)
    print(f"| {m} | {'yes' if same else 'NO'} | {gap(L(t[0]), L(f[0]), 0, 10):.1e} | {spread10:.1e} | {gap(L(t[0]), L(f[0])):.2f} | {spread:.2f} | {100 * inside:.0f} % of steps "
          f"| {cross(t[0])} / {', '.join(str(cross(r)) for r in fl)} | {L(t[0])[-1]:.4f} / {', '.join(f'{L(r)[-1]:.4f}' for r in fl)} "
          f"| {t[0]['recall']:.4f} / {', '.join(format(r['recall'], '.4f') for r in fl)} "
          f"| {t[-1]['tokens_per_s'] / 1e3:.0f}k / {f[0]['tokens_per_s'] / 1e3:.0f}k | {t[0]['peak_mem_mib']:.0f} / {f[0]['peak_mem_mib']:.0f} | {t[0]['first_step_s']:.2f} |")

# The same against the pairwise spread (the largest distance between any two fla runs) and
# tilec's distance to the nearest fla run: the ratios docs/training.md quotes.
print()
print("| member | steps 0–9: tilec to nearest fla run / pairwise fla spread (ratio) | all steps: tilec to nearest / pairwise (ratio) |")
print("|---|---|---|")
for m in members:
    t, fl = runs_of(m, "tilec"), runs_of(m, "fla") + perms(m)
    if not (t and len(fl) > 1):
        continue
    pairs = [(a, b) for i, a in enumerate(fl) for b in fl[i + 1:]]
    cells = []
    for lo, hi in ((0, 10), (0, None)):
        near = min(gap(t[0]["losses"], r["losses"], lo, hi) for r in fl)
        spread = max(gap(a["losses"], b["losses"], lo, hi) for a, b in pairs)
        ratio = f"{near / spread:.2f}×" if spread > 0 else "fla runs identical"
        cells.append(f"{near:.2g} / {spread:.2g} ({ratio})")
    print(f"| {m} | {cells[0]} | {cells[1]} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    raise SystemExit("matplotlib is not installed: table only")
fig, axes = plt.subplots(1, len(members), figsize=(4 * len(members), 3.4), sharey=True)
for ax, m in zip(axes, members):
    for r in [*runs_of(m, "fla"), *perms(m)]:
        ax.plot(r["losses"], "-" if r["backend"] == "fla" else ":", color="tab:blue", alpha=1.0 if r["backend"] == "fla" else 0.6,
                label=f"{r['backend']} (recall {r['recall']:.2f})", linewidth=1.0)
    for r in runs_of(m, "tilec")[:1]:
        ax.plot(r["losses"], "--", color="tab:red", label=f"tilec (recall {r['recall']:.2f})", linewidth=1.2)
    ax.set_title(m)
    ax.set_xlabel("step")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
axes[0].set_ylabel("MQAR loss")
fig.tight_layout()
fig.savefig(args.png, dpi=110)
print(f"wrote {args.png}")
