# The loss curves of bench/h200_train.py's runs (one panel per member: tilec, fla, fla with
# permuted batch rows) and the spread table of docs/training.md, from its JSON lines.
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


print("| member | tilec ×2 bitwise | max\\|tilec − fla\\| steps 0–9 | max\\|fla − fla_p\\| steps 0–9 | max\\|tilec − fla\\| all | max\\|fla − fla_p\\| all | final loss tilec / fla / fla_p | recall tilec / fla / fla_p | tokens/s tilec / fla | peak MiB tilec / fla | first step s tilec |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in members:
    t, f, p = runs_of(m, "tilec"), runs_of(m, "fla"), runs_of(m, "fla_p")
    if not (t and f and p):
        continue
    same = len(t) > 1 and t[0]["losses"] == t[1]["losses"]
    L = lambda r: r["losses"]
    print(f"| {m} | {'yes' if same else 'NO'} | {gap(L(t[0]), L(f[0]), 0, 10):.1e} | {gap(L(f[0]), L(p[0]), 0, 10):.1e} | {gap(L(t[0]), L(f[0])):.2f} | {gap(L(f[0]), L(p[0])):.2f} "
          f"| {L(t[0])[-1]:.4f} / {L(f[0])[-1]:.4f} / {L(p[0])[-1]:.4f} | {t[0]['recall']:.4f} / {f[0]['recall']:.4f} / {p[0]['recall']:.4f} "
          f"| {t[-1]['tokens_per_s'] / 1e3:.0f}k / {f[0]['tokens_per_s'] / 1e3:.0f}k | {t[0]['peak_mem_mib']:.0f} / {f[0]['peak_mem_mib']:.0f} | {t[0]['first_step_s']:.2f} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    raise SystemExit("matplotlib is not installed: table only")
fig, axes = plt.subplots(1, len(members), figsize=(4 * len(members), 3.4), sharey=True)
for ax, m in zip(axes, members):
    for backend, style in (("fla", "-"), ("fla_p", ":"), ("tilec", "--")):
        rs = runs_of(m, backend)
        if rs:
            ax.plot(rs[0]["losses"], style, label=f"{backend} (recall {rs[0]['recall']:.2f})", linewidth=1.2)
    ax.set_title(m)
    ax.set_xlabel("step")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
axes[0].set_ylabel("MQAR loss")
fig.tight_layout()
fig.savefig(args.png, dpi=110)
print(f"wrote {args.png}")
