# Where a kernel's warps wait, from Nsight Compute's SASS source page (CSV): the SASS lines with
# the most stall samples, the samples summed per opcode, and the shared-memory wavefronts beyond
# the ideal ("L1 Wavefronts Shared Excessive": bank conflicts) per opcode.
#
# Usage (on the device machine):
#   ncu -k regex:'^NAME$' -c 1 --section SourceCounters --section WarpStateStats -o /tmp/x CMD...
#   ncu -i /tmp/x.ncu-rep --page source --csv --print-source sass > /tmp/x.csv
#   python3 bench/ncu_hotspots.py /tmp/x.csv [--top 40]
import argparse, collections, csv, sys

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--top", type=int, default=40)
a = ap.parse_args()
text = open(a.csv, encoding="utf-8", errors="replace").read().splitlines()
start = next(i for i, l in enumerate(text) if l.startswith('"Address"') or l.startswith('"#"') or '"Source"' in l)
rows = list(csv.DictReader(text[start:]))
def num(r, key):
    for k, v in r.items():
        if k and k.startswith(key):
            try:
                return float(str(v).replace(",", ""))
            except ValueError:
                return 0.0
    return 0.0
stall = "Warp Stall Sampling (All Samples)"
excess = "L1 Wavefronts Shared Excessive"
total = sum(num(r, stall) for r in rows) or 1.0
print(f"{len(rows)} SASS lines, {total:.0f} stall samples")
by_op, ex_op = collections.Counter(), collections.Counter()
for r in rows:
    op = (r.get("Source") or "").split()
    op = [t for t in op if not t.startswith("@")]
    key = op[0] if op else "?"
    by_op[key] += num(r, stall)
    ex_op[key] += num(r, excess)
print("-- stall samples per opcode")
for k, v in by_op.most_common(20):
    print(f"{100 * v / total:6.2f}%  {k}  (excess shared wavefronts {ex_op[k]:.0f})")
print(f"-- top {a.top} lines")
for r in sorted(rows, key=lambda r: -num(r, stall))[: a.top]:
    print(f"{100 * num(r, stall) / total:6.2f}%  {r.get('Address', '')}  {r.get('Source', '')[:110]}")
