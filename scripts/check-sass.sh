#!/usr/bin/env bash
# Builds every dsl-examples/*.tile for sm_100a, assembles it with ptxas and checks each kernel's
# SASS (nvdisasm) for the Blackwell tensor-core path and the TMEM lifecycle:
#   - UTCHMMA (tcgen05.mma) and LDTM (tcgen05.ld) present, and TMA copies (UTMALDG) in gemm and K#1;
#   - exactly one allocation: one alloc site in the PTX, which ptxas lowers to a retry loop of two
#     UTCATOMSWS.FIND_AND_SET.ALIGN (blackwell.md §1.2);
#   - exactly one deallocation: one tcgen05.dealloc in the PTX = one UTCATOMSWS.AND in SASS
#     (with its two guardrail traps), and one relinquish (UVIRTCOUNT.DEALLOC.SMPOOL).
# Kernels whose metadata has no TMEM plan are only checked to assemble.
# Then the sm_90a (Hopper) path of every example: wgmma tensor-core instructions (HGMMA) in every
# kernel with a register-resident accumulator (kernels without a matrix product: none needed), TMA copies (UTMALDG) in gemm and K#1, and no local
# memory (LDL/STL: spills or a register array indexed at run time) except the spills ptxas
# reports for a kernel whose contract allows them (one that declares `ctas_per_sm`). For every example: no ptxas
# performance advisory (an injected wgmma wait, serialized wgmmas).
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
# Per target: the tensor-core and TMEM checks of one kernel's SASS ($sass) and PTX ($ptx).
check_sm_100a() {
  if ! grep -q '"tmem": {' "$meta"; then echo "ok   $name/$k (no TMEM: assembled only)"; return; fi
  mma=$(count 'UTCHMMA' "$sass"); ldtm=$(count 'LDTM' "$sass"); utma=$(count 'UTMALDG' "$sass")
  find=$(count 'UTCATOMSWS\.FIND_AND_SET' "$sass"); andd=$(count 'UTCATOMSWS\.AND' "$sass")
  relq=$(count 'UVIRTCOUNT\.DEALLOC' "$sass")
  palloc=$(count 'tcgen05\.alloc\.' "$ptx"); pdealloc=$(count 'tcgen05\.dealloc\.' "$ptx")
  msg="UTCHMMA=$mma LDTM=$ldtm UTMALDG=$utma alloc(ptx)=$palloc FIND_AND_SET=$find dealloc(ptx)=$pdealloc UTCATOMSWS.AND=$andd relinquish=$relq"
  if [ "$mma" -ge 1 ] && [ "$ldtm" -ge 1 ] && [ "$palloc" -eq 1 ] && [ "$find" -eq 2 ] && [ "$pdealloc" -eq 1 ] && [ "$andd" -eq 1 ] && [ "$relq" -eq 1 ] \
     && { [ "$name" != gemm ] && [ "$name" != k1_reverse_scan ] || [ "$utma" -ge 1 ]; }; then
    echo "ok   $name/$k: $msg"
  else
    echo "FAIL $name/$k: $msg"; fail=1
  fi
}
check_sm_90a() {
  hgmma=$(count 'HGMMA' "$sass"); wg=$(count 'wgmma\.mma_async' "$ptx"); ldgsts=$(count 'LDGSTS' "$sass")
  utma=$(count 'UTMALDG' "$sass"); local_mem=$(count '\b(LDL|STL)\b' "$sass"); r2ur=$(count 'R2UR' "$sass")
  # R2UR: moves into uniform registers, printed for the Rust test that checks where ptxas
  # builds the wgmma descriptors (one per descriptor half when it builds them per thread).
  msg="HGMMA=$hgmma (wgmma in PTX: $wg) UTMALDG=$utma LDGSTS=$ldgsts LDL/STL=$local_mem R2UR=$r2ur"
  # A kernel without matrix products (no accumulator, so no TMEM plan in its sm_100a metadata)
  # has no wgmma to check.
  if ! grep -q '"tmem": {' "$dir/$k.sm_100a.meta.json"; then
    if [ "$local_mem" -eq 0 ]; then echo "ok   $name/$k (sm_90a, no MMA): $msg"; else echo "FAIL $name/$k (sm_90a, no MMA): $msg"; fail=1; fi
    return
  fi
  # Local memory is allowed in one case: the artifact's contract allows spills (tilec writes
  # `"no_spill": false` only for a kernel that declares `ctas_per_sm` on this target — the
  # author traded registers for CTAs per SM and measured it, docs/results.md) and ptxas counts
  # spill stores; it is printed. The stack frame must be no larger than the spill slots (ptxas
  # rounds the frame up to 8 bytes: 36 B of spills take a 40 B frame): a register array
  # indexed at run time would add local memory of its own.
  meta="$dir/$k.sm_90a.meta.json"
  field() { grep -o "\"$1\": *[0-9]*" "$meta" | grep -o '[0-9]*$' || echo 0; }
  spilled=$(field spill_store_bytes); stack=$(field stack_bytes)
  local_ok=0
  if [ "$local_mem" -eq 0 ]; then local_ok=1
  elif grep -q '"no_spill": *false' "$meta" && [ "${spilled:-0}" -gt 0 ] && [ "${stack:-0}" -le $(( (${spilled:-0} + 7) / 8 * 8 )) ]; then
    local_ok=1; msg="$msg (${spilled} B spilled under ctas_per_sm)"
  fi
  if [ "$wg" -ge 1 ] && [ "$hgmma" -ge "$wg" ] && [ "$local_ok" -eq 1 ] && { [ "$name" != gemm ] && [ "$name" != k1_reverse_scan ] || [ "$utma" -ge 1 ]; }; then
    echo "ok   $name/$k (sm_90a): $msg"
  else
    echo "FAIL $name/$k (sm_90a): $msg"; fail=1
  fi
}
for src in "$root"/dsl-examples/*.tile; do
  name="$(basename "$src" .tile)"
  dir="$out/$name"
  mkdir -p "$dir"
  if ! "${tilec[@]}" build "$src" --target all -o "$dir" 2>"$dir/build.log"; then
    echo "FAIL $name: tilec build failed"; sed 's/^/    /' "$dir/build.log"; fail=1; continue
  fi
  # ptxas's performance advisories (C7517: a wgmma wait it injected, waiting for every wgmma in
  # flight; C7510: wgmmas serialized): the compiler's waits must be the ones that run.
  if grep -q '^  ptxas: ' "$dir/build.log"; then
    echo "FAIL $name: ptxas advisories"; grep '^  ptxas: ' "$dir/build.log" | sed 's/^/  /'; fail=1
  fi
  for target in sm_100a sm_90a; do
    for meta in "$dir"/*."$target".meta.json; do
      k="$(basename "$meta" ."$target".meta.json)"
      cubin="$dir/$k.$target.cubin"; ptx="$dir/$k.$target.ptx"; sass="$dir/$k.$target.sass"
      if [ ! -f "$cubin" ]; then echo "FAIL $name/$k ($target): no cubin"; fail=1; continue; fi
      "$nvdisasm" -c "$cubin" > "$sass"
      "check_$target"
    done
  done
done
exit $fail
