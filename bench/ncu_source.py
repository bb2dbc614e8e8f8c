# Reading Nsight Compute's SASS source page (`ncu -i REP --page source --csv --print-source sass`),
# shared by bench/ncu_hotspots.py and bench/ncu_loops.py.
import csv

STALL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
EXCESS = "L1 Wavefronts Shared Excessive"


def read_rows(path):
    """The page's rows (dicts by column name), from the header line on (ncu prints notes first)."""
    text = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(text) if l.startswith('"Address"') or l.startswith('"#"') or '"Source"' in l)
    return list(csv.DictReader(text[start:]))


def num(r, key):
    """The first column whose name starts with `key`, as a number (0 when empty or not a number)."""
    for k, v in r.items():
        if k and k.startswith(key):
            try:
                return float(str(v).replace(",", ""))
            except ValueError:
                return 0.0
    return 0.0


def opcode(src):
    """The opcode of a SASS line without its predicate and modifiers (`@P0 LDS.64 ...` → LDS)."""
    toks = [t for t in (src or "").split() if not t.startswith("@")]
    return toks[0].split(".")[0] if toks else "?"
