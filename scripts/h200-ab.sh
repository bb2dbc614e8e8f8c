#!/usr/bin/env bash
# One H200 call comparing two compilers' artifacts in the same run (a code-generation change
# and the commit before it): after `scripts/h200-prepare.sh` (the new artifacts, .device/art)
# and `OLD=<commit> scripts/h200-ab.sh prepare` here (the old ones, .device/art_old, built by
# that commit's tilec — TILEC_OLD, or built into target/ab-old — from that commit's sources
# in a scratch worktree). On the device, carry
# [".device"] and run `scripts/h200-ab.sh` (BUDGET seconds, default 570):
#   1. (same) every check case run with both sets, the outputs compared bitwise (`--exact`:
#      where the arithmetic order did not change they must be equal);
#   2. (anchors, bwd) bench/h200_tilec_vs_anchors.py (gemm vs torch.matmul, K#1 vs fla) and
#      bench/h200_gdn_bwd.py (the dense backward; fla beside the new set) on both sets;
#   3. (check) scripts/h200-check.sh on the new artifacts (every check case against the
#      interpreter, then racecheck unless RACECHECK=0).
# Before the speed parts it prints each set's CTAs per SM for K#1 and gemm as the driver
# computes them (scripts/h200_occupancy.py).
# AB_PARTS picks parts (default "same anchors bwd check"). Everything goes to $OUT: ab.txt,
# {new,old}/perf.json, {new,old}/gdn_bwd.json.
# A third set, x (an experiment: the same compiler on edited sources), when .device/art_x
# exists: `X_SED='s/ ctas_per_sm(3)//' X_FILES=dsl-examples/k1_reverse_scan.tile
# scripts/h200-ab.sh prepare-x` here copies .device/art and rebuilds each of X_FILES, edited by
# the sed script X_SED (a copy beside it, so that imports resolve), into it; on the device it is
# compared with new (bitwise) and timed like the others (x/perf.json, x/gdn_bwd.json).
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ "${1:-}" = prepare-x ]; then
  set -e
  . .tools/env.sh
  t="${CARGO_TARGET_DIR:-$root/target}"
  rm -rf .device/art_x; cp -r .device/art .device/art_x
  for f in ${X_FILES:?X_FILES names the sources to rebuild}; do
    x="$(dirname "$f")/.x-$(basename "$f")"
    sed -e "${X_SED:?X_SED is the sed script that makes the x sources}" "$f" > "$x"
    if cmp -s "$f" "$x"; then echo "prepare-x: X_SED changes nothing in $f" >&2; rm -f "$x"; exit 1; fi
    "$t/release/tilec" build "$x" --target sm_90a -o .device/art_x | grep '^built' || { rm -f "$x"; exit 1; }
    rm -f "$x"
  done
  exit 0
fi
if [ "${1:-}" = prepare ]; then
  set -e
  . .tools/env.sh   # ptxas: the old artifacts get cubins, as the new ones
  old=${OLD:?OLD=<commit> names the compiler to compare with}
  wt=$(mktemp -d); git worktree add -q --detach "$wt" "$old"
  # TILEC_OLD: that commit's tilec, already built. Otherwise a target folder of its own (a
  # full build): sharing target/ would leave the old binary where cargo thinks the new one is.
  tilec_old=${TILEC_OLD:-}
  if [ -z "$tilec_old" ]; then
    (cd "$wt" && . "$root/.tools/env.sh" && CARGO_TARGET_DIR="$root/target/ab-old" cargo build -q --release -p tilec)
    tilec_old="$root/target/ab-old/release/tilec"
  fi
  rm -rf .device/art_old; mkdir -p .device/art_old
  for f in "$wt"/dsl-examples/*.tile "$wt"/tests/gpu/*.tile; do "$tilec_old" build "$f" --target sm_90a -o .device/art_old >/dev/null; done
  git worktree remove --force "$wt"
  du -sh .device/art_old
  exit 0
fi
start=$(date +%s); budget=${BUDGET:-570}
left() { local l=$(( budget - ($(date +%s) - start) )); echo $(( l > 1 ? l : 1 )); }
parts=" ${AB_PARTS:-same anchors bwd check} "
has() { [[ $parts == *" $1 "* ]]; }
out=${OUT:-/tmp/ab}; mkdir -p "$out"
b=.device/bin; io=.device/io
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/perf/*.whl && export PYTHONPATH=/tmp/site
{
  date
  if has same; then
    echo "=== old vs new GPU outputs (bitwise where the arithmetic order is unchanged)"
    for case in $(cat "$io/cases"); do
      kernel=${case%%@*}; name=${case#*@}
      for s in old new; do
        a=.device/art; [ $s = old ] && a=.device/art_old
        "$b/tilec-run" "$a/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out "/tmp/ab_$s.safetensors" $(cat "$io/$name.flags" 2>/dev/null) >/dev/null || echo "FAIL $name ($s): tilec-run exit $?"
      done
      python3 scripts/h200_compare_outputs.py "old-vs-new $name" /tmp/ab_new.safetensors /tmp/ab_old.safetensors --exact
      if [ -d .device/art_x ]; then
        "$b/tilec-run" ".device/art_x/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out /tmp/ab_x.safetensors $(cat "$io/$name.flags" 2>/dev/null) >/dev/null || echo "FAIL $name (x): tilec-run exit $?"
        python3 scripts/h200_compare_outputs.py "x-vs-new $name" /tmp/ab_new.safetensors /tmp/ab_x.safetensors --exact
      fi
    done
  fi
  # Residency as the driver computes it (K#1 and gemm; `ctas_per_sm`): registers and CTAs per SM.
  for s in new x old; do
    a=.device/art; [ $s != new ] && a=.device/art_$s
    [ -d "$a" ] || continue
    PYTHONPATH=python:${PYTHONPATH:-} timeout 60 python3 scripts/h200_occupancy.py $s "$a"/k1_scan_scalar.sm_90a.meta.json "$a"/k1_scan_channel.sm_90a.meta.json "$a"/gemm.sm_90a.meta.json 2>&1 | tail -4
  done
  # Speed: new then old, each bench in the same call; fla (the anchor) is timed beside the new
  # backward only (its first call JIT-compiles for ~100 s).
  sets="new old"; [ -d .device/art_x ] && sets="new x old"
  for s in $sets; do
    a=.device/art; [ $s != new ] && a=.device/art_$s
    mkdir -p "$out/$s"
    if has anchors; then echo "=== anchors ($s)"; OUT="$out/$s" timeout "$(left)" python3 bench/h200_tilec_vs_anchors.py --tilec-run "$b/tilec-run" --art $a --work /tmp/perf_$s 2>&1 | cut -c1-400; fi
    if has bwd; then
      fla=none; [ $s = new ] && fla=dense
      echo "=== gdn_bwd ($s)"; OUT="$out/$s" timeout "$(left)" python3 bench/h200_gdn_bwd.py --tilec-run "$b/tilec-run" --art $a --cases .device/rec --fla-for none --qla-for none --speed dense --qla-speed none --fla-speed $fla --work /tmp/gdn_$s 2>&1 | grep speed | cut -c1-900
    fi
  done
  if has check; then echo "=== check (new artifacts)"; RACECHECK=${RACECHECK:-1} OUT=/tmp/chk timeout "$(left)" scripts/h200-check.sh; fi
  echo "=== done in $(( $(date +%s) - start )) s"
} 2>&1 | tee "$out/ab.txt"
