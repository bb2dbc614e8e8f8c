# Where a kernel's time goes, per loop of its SASS, from Nsight Compute's SASS source page (CSV,
# as bench/h200_ncu.py writes it: <plan>.<kernel>.sass.csv). A loop is the address range from a
# backward branch's target to the branch; nested loops are printed inside the loop that holds
# them. Per loop: its share of the stall samples, of the executed warp instructions, the
# executed shared-memory instructions (LDS, STS, LDSM, SHFL) and the excess shared wavefronts
# (bank conflicts), and the executed count of its first instruction (how often the loop body
# starts, summed over warps).
#
# Usage: python3 bench/ncu_loops.py KERNEL.sass.csv [--ops 12]
import argparse, collections, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_source import EXCESS, EXECUTED as EXEC, STALL, num, opcode, read_rows  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--ops", type=int, default=12, help="opcodes listed per loop, most executed first")
a = ap.parse_args()
rows = read_rows(a.csv)


addr = [int(r.get("Address", "0"), 16) for r in rows]
index = {x: i for i, x in enumerate(addr)}
stall = [num(r, STALL) for r in rows]
execd = [num(r, EXEC) for r in rows]
excess = [num(r, EXCESS) for r in rows]
tot_s, tot_e = sum(stall) or 1.0, sum(execd) or 1.0
loops = []
for i, r in enumerate(rows):
    src = r.get("Source", "")
    if opcode(src) == "BRA":
        m = re.search(r"0x([0-9a-f]+)", src.split("BRA", 1)[1])
        if m and int(m.group(1), 16) in index and index[int(m.group(1), 16)] <= i:
            loops.append((index[int(m.group(1), 16)], i))
loops = sorted(set(loops), key=lambda x: (x[0], -x[1]))
SMEM = ("LDS", "STS", "LDSM", "STSM", "SHFL", "LDGSTS")
print(f"{len(rows)} SASS lines, {tot_s:.0f} stall samples, {tot_e:.0f} warp instructions executed")
inside = [False] * len(rows)
for s, e in loops:
    depth = sum(1 for s2, e2 in loops if (s2, e2) != (s, e) and s2 <= s and e <= e2)
    ops = collections.Counter()
    for i in range(s, e + 1):
        ops[opcode(rows[i].get("Source"))] += execd[i]
        inside[i] = True
    sm = sum(ops[o] for o in SMEM)
    print(f"{'  ' * depth}SASS {s}-{e} ({e - s + 1} instr): {100 * sum(stall[s:e + 1]) / tot_s:5.1f}% samples, "
          f"{100 * sum(execd[s:e + 1]) / tot_e:5.1f}% executed, shared {sm:.0f} (excess wavefronts {sum(excess[s:e + 1]):.0f}), "
          f"first exec count {execd[s]:.0f}")
    print(f"{'  ' * depth}  " + ", ".join(f"{o} {v:.0f}" for o, v in ops.most_common(a.ops)))
out_s = sum(v for v, f in zip(stall, inside) if not f)
out_e = sum(v for v, f in zip(execd, inside) if not f)
print(f"outside loops: {100 * out_s / tot_s:.1f}% samples, {100 * out_e / tot_e:.1f}% executed")
ops = collections.Counter()
for r, v in zip(rows, execd):
    ops[opcode(r.get("Source"))] += v
print("whole kernel: " + ", ".join(f"{o} {v:.0f}" for o, v in ops.most_common(a.ops + 6)))
