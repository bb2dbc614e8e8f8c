#!/usr/bin/env bash
# GPU checks of what this checkout builds, run on the H200 (the device machine has no Rust and no
# LLVM): `scripts/h200-prepare.sh` builds everything here into .device/ (ignored by git), then
# on the device, from the repository root: `scripts/h200-check.sh`.
#   1. the runtime's GPU smoke tests (#[ignore]d in CI), run with --ignored;
#   2. every sm_90a example artifact on the GPU through tilec-run, compared with the CPU
#      interpreter's sm_90a numerics at odd sizes (bitwise count and max |difference|);
#   3. a view outside its tile fails the launch (trap);
#   4. flat offsets past 2^31 elements: big_offset.tile and gemm on 4 GiB inputs, exact values;
#   5. kverify judging the sm_90a gemm artifact on the GPU (--tilec-artifact).
set -uo pipefail
d=${DEVICE_DIR:-.device}; b=$d/bin; a=$d/art; io=$d/io
out=${OUT:-/tmp/h200-check}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ "${RACECHECK:-0}" = only ] && skip=1 || skip=0
[ $skip = 1 ] || echo "== runtime GPU smoke tests (--ignored)"
[ $skip = 1 ] || "$b/gpu_smoke" --ignored --test-threads=1 2>&1 | grep -E "^test |test result"
[ $skip = 1 ] || echo "== sm_90a artifacts vs the interpreter"
for case in $( [ $skip = 1 ] || cat "$io/cases"); do
  kernel=${case%%@*}; name=${case#*@}
  "$b/tilec-run" "$a/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out "$out/$name.gpu.safetensors" $(cat "$io/$name.flags" 2>/dev/null) \
    || { echo "FAIL $name: tilec-run exit $?"; continue; }
  # Cases whose every element the GPU computes in the interpreter's order: bitwise or FAIL.
  exact=(); case $name in reductions_*|table_*|repeat_*|views_*|tmem_vars_*|float_rem_*) exact=(--exact);; esac
  python3 scripts/h200_compare_outputs.py "$name" "$out/$name.gpu.safetensors" "$io/$name.interp.safetensors" "${exact[@]}"
done
# RACECHECK=1: every case again under compute-sanitizer's shared-memory race detector (the
# barrier pass places a barrier only where two threads' accesses conflict: a missing one is a
# hazard here even when the values happen to come out right); RACECHECK=only: just that.
if [ "${RACECHECK:-0}" != 0 ]; then
  echo "== racecheck (compute-sanitizer --tool racecheck)"
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
  for case in $(cat "$io/cases"); do
    kernel=${case%%@*}; name=${case#*@}
    "$cs" --tool racecheck --racecheck-report hazard --print-limit 3 "$b/tilec-run" "$a/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out "$out/$name.race.safetensors" $(cat "$io/$name.flags" 2>/dev/null) >"$out/$name.race.txt" 2>&1
    rc=$?; summary=$(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/$name.race.txt" | tail -n1)
    if [ $rc -ne 0 ] || ! grep -q "RACECHECK SUMMARY: 0 hazards" "$out/$name.race.txt"; then
      echo "FAIL racecheck $name (exit $rc): ${summary:-no summary}"; grep -m3 -E "Error|Warning|hazard" "$out/$name.race.txt"
    else
      echo "racecheck $name: $summary"
    fi
  done
fi
[ $skip = 1 ] && exit 0
# trap_pair KERNEL INSIDE OUTSIDE: KERNEL with n = INSIDE must run, with n = OUTSIDE fail its launch.
trap_pair() {
  local k=$1 n_in=$2 n_out=$3
  "$b/tilec-run" "$a/$k.sm_90a.meta.json" --inputs "$io/${k}_n$n_in.in.safetensors" --out "$out/$k$n_in.safetensors" >/dev/null 2>&1 \
    && echo "$k n=$n_in (inside): ran" || echo "FAIL $k n=$n_in (inside) did not run"
  if "$b/tilec-run" "$a/$k.sm_90a.meta.json" --inputs "$io/${k}_n$n_out.in.safetensors" --out "$out/$k$n_out.safetensors" 2>"$out/$k$n_out.err"; then
    echo "FAIL $k n=$n_out (outside) ran instead of trapping"
  else
    echo "$k n=$n_out (outside): launch failed as it must: $(tail -n1 "$out/$k$n_out.err")"
  fi
}
echo "== a view outside its tile traps"
trap_pair view_trap 12 13
echo "== a gather index outside its tile traps (tests/gpu/gathers.tile, gather_trap)"
trap_pair gather_trap 15 16
echo "== an access past an undeclared edge traps (tests/gpu/edge_trap.tile, N = 16)"
for nm in 12_8 13_8 12_9; do
  if "$b/tilec-run" "$a/edge_trap.sm_90a.meta.json" --inputs "$io/edge_trap_$nm.in.safetensors" --out "$out/edge_trap_$nm.safetensors" 2>"$out/edge_trap_$nm.err"; then
    [ $nm = 12_8 ] && echo "edge_trap n,m=$nm (inside): ran" || echo "FAIL edge_trap n,m=$nm (past the edge) ran instead of trapping"
  else
    [ $nm = 12_8 ] && echo "FAIL edge_trap n,m=$nm (inside) did not run: $(tail -n1 "$out/edge_trap_$nm.err")" || echo "edge_trap n,m=$nm (past the edge): launch failed as it must: $(tail -n1 "$out/edge_trap_$nm.err")"
  fi
done
echo "== flat offsets past 2^31 elements (issue 9, item 8; a 4 GiB bf16 input made here per case)"
for c in offset gemm; do
  k=big_offset; [ $c = gemm ] && k=gemm
  in=${BIG_DIR:-/tmp}/big_$c.in.safetensors
  python3 scripts/h200_big_offset.py make $c "$in" \
    && "$b/tilec-run" "$a/$k.sm_90a.meta.json" --inputs "$in" --out "$out/big_$c.safetensors" \
    && python3 scripts/h200_big_offset.py check $c "$out/big_$c.safetensors" || echo "FAIL big_$c (exit $?)"
  rm -f "$in"
done
echo "== repeat 5x, bitwise"
first=$(head -n1 "$io/cases"); kernel=${first%%@*}; name=${first#*@}
for i in 1 2 3 4 5; do "$b/tilec-run" "$a/$kernel.sm_90a.meta.json" --inputs "$io/$name.in.safetensors" --out "$out/rep$i.safetensors" $(cat "$io/$name.flags" 2>/dev/null) >/dev/null; done
sha256sum "$out"/rep[1-5].safetensors | awk '{print $1}' | sort -u | wc -l | sed 's/^/distinct outputs over 5 runs: /'
echo "== kverify on the sm_90a gemm artifact (GPU executor)"
"$b/kverify" check --op matmul --tilec-artifact "$a/gemm.sm_90a.meta.json" --tilec-run "$b/tilec-run" --json "$out/kverify-gemm.json" 2>&1 | tail -18
