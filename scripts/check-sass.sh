#!/usr/bin/env bash
# Builds every dsl-examples/*.tile for sm_100a, assembles it with ptxas and checks each kernel's
# SASS (nvdisasm) for the Blackwell tensor-core path and the TMEM lifecycle:
#   - UTCHMMA (tcgen05.mma) and LDTM (tcgen05.ld) present;
#   - exactly one allocation: one alloc site in the PTX, which ptxas lowers to a retry loop of two
#     UTCATOMSWS.FIND_AND_SET.ALIGN (blackwell.md §1.2);
#   - exactly one deallocation: one tcgen05.dealloc in the PTX = one UTCATOMSWS.AND in SASS
#     (with its two guardrail traps), and one relinquish (UVIRTCOUNT.DEALLOC.SMPOOL).
# Kernels whose metadata has no TMEM plan are only checked to assemble.
#
# Env: TILEC (tilec binary; default: cargo run -q -p tilec --), TILEC_PTXAS / TILEC_NVDISASM
# (default: .tools/env.sh from scripts/setup.sh, else PATH), OUT (default: a temporary folder).
# Exit status: 0 all good, 1 a check failed, 2 tools missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -f "$root/.tools/env.sh" ]; then . "$root/.tools/env.sh"; fi
ptxas="${TILEC_PTXAS:-$(command -v ptxas || true)}"
nvdisasm="${TILEC_NVDISASM:-$(command -v nvdisasm || true)}"
if [ -z "$ptxas" ] || [ ! -x "$ptxas" ] || [ -z "$nvdisasm" ] || [ ! -x "$nvdisasm" ]; then
  echo "check-sass: ptxas/nvdisasm not found (run scripts/setup.sh)" >&2
  exit 2
fi
export TILEC_PTXAS="$ptxas"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
if [ -n "${TILEC:-}" ]; then tilec=("$TILEC"); else tilec=(cargo run -q -p tilec --); fi

fail=0
count() { grep -cE "$1" "$2" || true; }
for src in "$root"/dsl-examples/*.tile; do
  name="$(basename "$src" .tile)"
  dir="$out/$name"
  mkdir -p "$dir"
  if ! "${tilec[@]}" build "$src" --target sm_100a -o "$dir" 2>"$dir/build.log"; then
    echo "FAIL $name: tilec build failed"; sed 's/^/    /' "$dir/build.log"; fail=1; continue
  fi
  for meta in "$dir"/*.sm_100a.meta.json; do
    k="$(basename "$meta" .sm_100a.meta.json)"
    cubin="$dir/$k.sm_100a.cubin"; ptx="$dir/$k.sm_100a.ptx"
    if [ ! -f "$cubin" ]; then echo "FAIL $name/$k: no cubin"; fail=1; continue; fi
    "$nvdisasm" -c "$cubin" > "$dir/$k.sass"
    sass="$dir/$k.sass"
    if ! grep -q '"tmem": {' "$meta"; then echo "ok   $name/$k (no TMEM: assembled only)"; continue; fi
    mma=$(count 'UTCHMMA' "$sass"); ldtm=$(count 'LDTM' "$sass")
    find=$(count 'UTCATOMSWS\.FIND_AND_SET' "$sass"); andd=$(count 'UTCATOMSWS\.AND' "$sass")
    relq=$(count 'UVIRTCOUNT\.DEALLOC' "$sass")
    palloc=$(count 'tcgen05\.alloc\.' "$ptx"); pdealloc=$(count 'tcgen05\.dealloc\.' "$ptx")
    msg="UTCHMMA=$mma LDTM=$ldtm alloc(ptx)=$palloc FIND_AND_SET=$find dealloc(ptx)=$pdealloc UTCATOMSWS.AND=$andd relinquish=$relq"
    if [ "$mma" -ge 1 ] && [ "$ldtm" -ge 1 ] && [ "$palloc" -eq 1 ] && [ "$find" -eq 2 ] && [ "$pdealloc" -eq 1 ] && [ "$andd" -eq 1 ] && [ "$relq" -eq 1 ]; then
      echo "ok   $name/$k: $msg"
    else
      echo "FAIL $name/$k: $msg"; fail=1
    fi
  done
done
exit $fail
