#!/usr/bin/env bash
# One H200 call comparing two compilers' artifacts in the same run (a code-generation change
# and the commit before it): after `scripts/h200-prepare.sh` (the new artifacts, .device/art)
# and `OLD=<commit> scripts/h200-ab.sh prepare` here (the old ones that differ, .device/art_old, built by
# that commit's tilec — TILEC_OLD, or built into target/ab-old — from that commit's sources
# in a scratch worktree). On the device, carry
# [".device"] and run `scripts/h200-ab.sh` (BUDGET seconds, default 570):
#   1. (same) every check case run with both sets, the outputs compared bitwise (`--exact`:
#      where the arithmetic order did not change they must be equal); (plans) likewise every
#      member's whole backward plan on its .device/rec case;
#   2. (anchors, bwd) bench/h200_tilec_vs_anchors.py (gemm vs torch.matmul, K#1 vs fla) and
#      bench/h200_gdn_bwd.py (the dense backward; fla beside the new set) on both sets;
#   3. (check) scripts/h200-check.sh on the new artifacts (every check case against the
#      interpreter, then racecheck unless RACECHECK=0).
# Before the speed parts it prints each set's CTAs per SM as the driver computes them
# (scripts/h200_occupancy.py) for the kernels in OCC_KERNELS (default K#1 and gemm).
# AB_PARTS picks parts (default "same anchors bwd check"; also "plans"); AB_SPEED the bench's speed sets
# (default dense; e.g. dense,saved,kda), AB_SETS the sets timed, in order (default new, the x sets,
# old), AB_FLA_SPEED those fla runs beside the new set (default
# dense; each new shape costs fla ~2 min of JIT). Everything goes to $OUT: ab.txt,
# {new,old}/perf.json, {new,old}/gdn_bwd.json.
# Experiment sets (the same compiler on edited sources), each .device/art_x* that exists:
# `X_SED='s/^const BV = 32;/const BV = 16;/' X_FILES=dsl-examples/k1_reverse_scan.tile
# X_NAME=x_bv16 scripts/h200-ab.sh prepare-x` here copies .device/art to .device/art_$X_NAME
# (X_NAME default x) and rebuilds each of X_FILES, edited by the sed script X_SED (a copy
# beside it, so that imports resolve) or by the patch X_PATCH (applied to a scratch worktree of
# HEAD), into it; on the device each is compared with new
# (bitwise) and timed like the others ($X_NAME/perf.json, $X_NAME/gdn_bwd.json). ANCHOR_SKIP_X
# (default empty; e.g. gemm) is passed to the anchors bench as --skip for the x sets.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ "${1:-}" = prepare-x ]; then
  set -e
  . .tools/env.sh
  t="${CARGO_TARGET_DIR:-$root/target}"
  xn=${X_NAME:-x}; [[ $xn == x* ]] || { echo "prepare-x: X_NAME must start with x" >&2; exit 1; }
  rm -rf ".device/art_$xn"; cp -r .device/art ".device/art_$xn"
  if [ -n "${X_PATCH:-}" ]; then
    # A patch (changes sed cannot say): applied to a scratch worktree of HEAD, X_FILES built there.
    wt=$(mktemp -d); git worktree add -q --detach "$wt" HEAD
    (cd "$wt" && git apply "$root/$X_PATCH")
    for f in ${X_FILES:?X_FILES names the sources to rebuild}; do
      "$t/release/tilec" build "$wt/$f" --target sm_90a -o ".device/art_$xn" 2>/tmp/prepare-x.log || { cat /tmp/prepare-x.log; git worktree remove --force "$wt"; exit 1; }
      grep -E '^(built|warning)' /tmp/prepare-x.log || true
    done
    git worktree remove --force "$wt"
    X_FILES=""
  fi
  for f in ${X_FILES-}; do
    x="$(dirname "$f")/.x-$(basename "$f")"
    sed -e "${X_SED:?X_SED is the sed script that makes the x sources}" "$f" > "$x"
    if cmp -s "$f" "$x"; then echo "prepare-x: X_SED changes nothing in $f" >&2; rm -f "$x"; exit 1; fi
    # tilec reports on stderr; its exit status, not grep's, says whether the build worked.
    "$t/release/tilec" build "$x" --target sm_90a -o ".device/art_$xn" 2>/tmp/prepare-x.log || { cat /tmp/prepare-x.log; rm -f "$x"; exit 1; }
    rm -f "$x"
    grep -E '^(built|warning)' /tmp/prepare-x.log || true
  done
  # Only what differs from .device/art travels (the carry is limited); the device run fills
  # the rest back in from .device/art.
  for f in .device/art/*; do cmp -s "$f" ".device/art_$xn/${f##*/}" && rm -f ".device/art_$xn/${f##*/}"; done
  echo "prepare-x: .device/art_$xn holds $(ls ".device/art_$xn" | wc -l) files that differ from .device/art"
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
  # Only what differs from .device/art travels (the carry is limited); the files dropped are
  # listed in .same, and the device run puts back exactly those — not files the old commit
  # never had (its missing kernels must fail, not compare new against itself).
  for f in .device/art_old/*; do
    n=${f##*/}; cmp -s "$f" ".device/art/$n" && { rm -f "$f"; echo "$n" >> .device/art_old/.same; }
  done
  du -sh .device/art_old
  exit 0
fi
start=$(date +%s); budget=${BUDGET:-570}
left() { local l=$(( budget - ($(date +%s) - start) )); echo $(( l > 1 ? l : 1 )); }
parts=" ${AB_PARTS:-same anchors bwd check} "
has() { [[ $parts == *" $1 "* ]]; }
out=${OUT:-/tmp/ab}; mkdir -p "$out"
b=.device/bin; io=.device/io
xsets=$(cd .device && ls -d art_x* 2>/dev/null | sed 's/^art_//')
for x in $xsets; do cp -n .device/art/* ".device/art_$x/"; done   # what prepare-x left out: as in art
# What `prepare` dropped from art_old as identical to art (only those).
[ -f .device/art_old/.same ] && while read -r n; do cp -n ".device/art/$n" .device/art_old/; done < .device/art_old/.same
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/perf/*.whl && export PYTHONPATH=/tmp/site
{
  date
  if has same; then
    echo "=== old vs new GPU outputs (bitwise where the arithmetic order is unchanged)"
    for case in $(cat "$io/cases"); do
      kernel=${case%%@*}; name=${case#*@}
      for s in old new; do
        a=.device/art; [ $s = old ] && a=.device/art_old
        [ -d "$a" ] || continue
        rm -f "/tmp/ab_$s.safetensors"
        "$b/tilec-run" "$a/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out "/tmp/ab_$s.safetensors" $(cat "$io/$name.flags" 2>/dev/null) >/dev/null || echo "FAIL $name ($s): tilec-run exit $?"
      done
      [ -d .device/art_old ] && python3 scripts/h200_compare_outputs.py "old-vs-new $name" /tmp/ab_new.safetensors /tmp/ab_old.safetensors --exact
      for x in $xsets; do
        rm -f /tmp/ab_x.safetensors   # a failed run must not leave the last set's output to compare
        "$b/tilec-run" ".device/art_$x/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out /tmp/ab_x.safetensors $(cat "$io/$name.flags" 2>/dev/null) >/dev/null || echo "FAIL $name ($x): tilec-run exit $?"
        python3 scripts/h200_compare_outputs.py "$x-vs-new $name" /tmp/ab_new.safetensors /tmp/ab_x.safetensors --exact
      done
    done
  fi
  if has plans; then
    # The whole backward of every member (.device/rec/<case>: gdn, ssd, la, gla, kda, gdn_gva;
    # <member>_bwd on in.safetensors) with each set, compared with the new set's outputs.
    echo "=== backward plans against new (bitwise where the arithmetic order is unchanged)"
    for c in $(ls .device/rec); do
      op=${c%%_*}_bwd; rm -f /tmp/abp_new.safetensors
      "$b/tilec-run" ".device/art/$op.sm_90a.plan.json" --inputs ".device/rec/$c/in.safetensors" --out /tmp/abp_new.safetensors >/dev/null || echo "FAIL plan $c (new): tilec-run exit $?"
      for x in old $xsets; do
        [ -d ".device/art_$x" ] || continue
        rm -f /tmp/abp_x.safetensors
        "$b/tilec-run" ".device/art_$x/$op.sm_90a.plan.json" --inputs ".device/rec/$c/in.safetensors" --out /tmp/abp_x.safetensors >/dev/null || echo "FAIL plan $c ($x): tilec-run exit $?"
        python3 scripts/h200_compare_outputs.py "$x-vs-new plan $c" /tmp/abp_new.safetensors /tmp/abp_x.safetensors --exact
      done
    done
  fi
  # Residency as the driver computes it (`ctas_per_sm`): registers and CTAs per SM of the
  # kernels in OCC_KERNELS (default K#1 and gemm).
  occ=${OCC_KERNELS:-k1_scan_scalar k1_scan_scalar_bf16 k1_scan_channel k1_scan_channel_bf16 gemm}
  for s in new $xsets old; do
    a=.device/art; [ $s != new ] && a=.device/art_$s
    [ -d "$a" ] || continue
    PYTHONPATH=python:${PYTHONPATH:-} timeout 60 python3 scripts/h200_occupancy.py $s $(for kn in $occ; do echo "$a/$kn.sm_90a.meta.json"; done) 2>&1 | tail -$(( $(wc -w <<<"$occ") + 1 ))
  done
  # Speed: new then old, each bench in the same call; fla (the anchor) is timed beside the new
  # backward only (its first call JIT-compiles for ~100 s).
  # AB_OLD_SPEED=0: old is compared (same, plans) but not timed.
  sets="new $xsets"; [ -d .device/art_old ] && [ "${AB_OLD_SPEED:-1}" != 0 ] && sets="$sets old"
  # AB_SETS: the timing order (what matters most first, when the budget may cut the rest).
  sets=${AB_SETS:-$sets}
  for s in $sets; do
    a=.device/art; [ $s != new ] && a=.device/art_$s
    skip=""; [[ $s == x* ]] && skip="--skip=${ANCHOR_SKIP_X:-}"
    mkdir -p "$out/$s"
    if has anchors; then echo "=== anchors ($s)"; OUT="$out/$s" timeout "$(left)" python3 bench/h200_tilec_vs_anchors.py --tilec-run "$b/tilec-run" --art $a --work /tmp/perf_$s $skip 2>&1 | cut -c1-400; fi
    if has bwd; then
      speed=${AB_SPEED:-dense}; fla=none; [ $s = new ] && fla=${AB_FLA_SPEED:-dense}
      echo "=== gdn_bwd ($s)"; OUT="$out/$s" timeout "$(left)" python3 bench/h200_gdn_bwd.py --tilec-run "$b/tilec-run" --art $a --cases .device/rec --fla-for none --qla-for none --speed $speed --qla-speed none --fla-speed $fla --work /tmp/gdn_$s 2>&1 | grep speed | cut -c1-900
    fi
  done
  if has check; then echo "=== check (new artifacts)"; RACECHECK=${RACECHECK:-1} OUT=/tmp/chk timeout "$(left)" scripts/h200-check.sh; fi
  echo "=== done in $(( $(date +%s) - start )) s"
} 2>&1 | tee "$out/ab.txt"
