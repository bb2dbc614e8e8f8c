# Where a kernel's warps wait, from Nsight Compute's SASS source page (CSV): the SASS lines with
# the most stall samples, the samples summed per opcode, and the shared-memory wavefronts beyond
# the ideal ("L1 Wavefronts Shared Excessive": bank conflicts) per opcode.
#
# Usage (on the device machine):
#   ncu -k regex:'^NAME$' -c 1 --section SourceCounters --section WarpStateStats -o /tmp/x CMD...
#   ncu -i /tmp/x.ncu-rep --page source --csv --print-source sass > /tmp/x.csv
#   python3 bench/ncu_hotspots.py /tmp/x.csv [--top 40]
import argparse, collections, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_source import EXCESS as excess, STALL as stall, num, read_rows  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--top", type=int, default=40)
a = ap.parse_args()
rows = read_rows(a.csv)
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
