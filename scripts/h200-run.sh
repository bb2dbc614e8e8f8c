#!/usr/bin/env bash
# One H200 call's worth of measurements, after `scripts/h200-prepare.sh` (carry `.device`, and
# `.devmut` for the mutation step): STEPS (default all, in this order) from
#   check     scripts/h200-check.sh (runtime smoke tests, every example against the interpreter,
#             then each under compute-sanitizer racecheck; RACECHECK=0 skips that)
#   mutation  frag_reductions built with the shuffle distances swapped (.devmut): must FAIL --exact
#   torch     python/tests/test_gpu.py (or TORCH_TESTS, unittest names): tilec_torch through the real plans
#   fwd       bench/h200_gdn_fwd.py (accuracy, speed beside fla's forward)
#   bwd       bench/h200_gdn_bwd.py (accuracy, speed dense/saved/kda/gla beside fla)
#   train     bench/h200_train.py (five members, tilec ×2, fla, fla with permuted batch rows)
#   prefill   only fla's cold first training steps (five in parallel), leaving the cache for a later call
#   ncu       bench/h200_ncu.py (Nsight Compute: what gdn_bwd's kernels wait on; NCU_KERNELS)
# The varlen accuracy cases are in .devchk/rec (the carry's 64 MiB): a call with carry
# [".device/bin", ".device/art", ".device/perf", ".devchk"] and CASES=.devchk/rec STEPS="fwd bwd" runs them.
# fla's wheel travels in .device/perf; its Triton cache is filled first by five short training
# runs in parallel (which also record fla's cold first step). Each step is cut at the call's
# remaining time (BUDGET seconds from the start, default 570); everything goes to $OUT.
set -u
export PYTHONUNBUFFERED=1
start=$(date +%s); budget=${BUDGET:-570}
left() { local l=$(( budget - ($(date +%s) - start) )); echo $(( l > 1 ? l : 1 )); }   # timeout 0 would mean no limit
steps=" ${STEPS:-check mutation torch fwd bwd train} "
has() { [[ $steps == *" $1 "* ]]; }
M=${MEMBERS:-gdn kda gla ssd la}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/perf/*.whl && export PYTHONPATH=/tmp/site
# fla's Triton cache can travel between calls: with SAVE_TRITON=1 a call leaves it in
# $OUT/triton.tgz.* (parts of 15 MiB; each takes one of $OUT's 8 files, and the parts must fit
# the next call's 64 MiB carry beside what else it carries — the five members' training and
# bench kernels made 5 parts, too many), carried as .devcache/triton.tgz.* into the next call,
# which then skips most of fla's JIT (its autotuning still runs).
export TRITON_CACHE_DIR=/tmp/triton; mkdir -p $TRITON_CACHE_DIR
# In parts of 15 MiB: $OUT takes files of 16 MiB at most.
ls .devcache/triton.tgz* >/dev/null 2>&1 && cat .devcache/triton.tgz* | tar xzf - -C $TRITON_CACHE_DIR
save_cache() {
  tar czf - -C $TRITON_CACHE_DIR . | split -b 15M - $OUT/triton.tgz.
  local n; n=$(ls $OUT/triton.tgz.* | wc -l)
  [ "$n" -gt 3 ] && echo "warning: fla's Triton cache is $n parts of 15 MiB: too many to carry back"
}
[ "${SAVE_TRITON:-0}" = 1 ] && trap save_cache EXIT
R=.device/bin/tilec-run; A=.device/art; io=.device/io
cold=()
if has train || has prefill; then   # the benches JIT their own shapes; prefill: only this (and the cache it leaves)
  for m in $M; do
    timeout 400 python3 bench/h200_train.py --art $A --members $m --backends fla --steps 3 --out $OUT/train_cold.json >/tmp/cold_$m.log 2>&1 & cold+=($!)
  done
fi
# CHECK_S caps the check step (seconds; default: the rest of the budget).
if has check; then echo "=== check"; RACECHECK=${RACECHECK:-1} OUT=/tmp/chk timeout ${CHECK_S:-$(left)} scripts/h200-check.sh; fi
if has mutation; then
  echo "=== mutation: frag_reduce shuffle distances swapped (must FAIL)"
  $R .devmut/art/frag_reductions.sm_90a.meta.json --inputs $io/reductions_frag_r150.in.safetensors --out /tmp/mut.safetensors $(cat $io/reductions_frag_r150.flags) \
    && python3 scripts/h200_compare_outputs.py reductions_frag_r150_MUTANT /tmp/mut.safetensors $io/reductions_frag_r150.interp.safetensors --exact
fi
if has torch; then echo "=== torch"; TILEC_TORCH_ARTIFACTS=$A timeout $(left) python3 -m unittest -v ${TORCH_TESTS:-python/tests/test_gpu.py} 2>&1 | tail -40; fi
[ ${#cold[@]} -gt 0 ] && { echo "=== waiting for fla's cold runs"; wait "${cold[@]}"; tail -n2 /tmp/cold_*.log; }
if has fwd; then echo "=== fwd"; timeout $(left) python3 bench/h200_gdn_fwd.py --tilec-run $R --art $A --cases ${CASES:-.device/rec} --repeat 10 2>&1 | grep -v "^$" | cut -c1-600; fi
if has bwd; then echo "=== bwd"; timeout $(left) python3 bench/h200_gdn_bwd.py --tilec-run $R --art $A --cases ${CASES:-.device/rec} --fla-for ${FLA_FOR:-gdn} --qla-for none --speed ${SPEED:-dense,saved,kda,gla} --qla-speed none --fla-speed ${FLA_SPEED:-dense,saved,kda,gla} 2>&1 | cut -c1-600; fi
if has ncu; then   # (skipped below when no ncu is found)
  echo "=== ncu"; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
  [ -n "$ncu" ] || echo "no ncu on this machine: profile skipped"
  [ -n "$ncu" ] && timeout $(left) python3 bench/h200_ncu.py --ncu "$ncu" --tilec-run $R --plan $A/gdn_bwd.sm_90a.plan.json --out /tmp/ncu ${NCU_KERNELS:+--kernels "$NCU_KERNELS"} 2>&1 | cut -c1-1500
  # gemm at 4096^3 too (issue 9: tensor pipe, DRAM, occupancy and stalls of both gemm and K#1).
  [ -n "$ncu" ] && timeout $(left) python3 bench/h200_ncu.py --ncu "$ncu" --tilec-run $R --plan $A/gemm.sm_90a.meta.json --kernels gemm --out /tmp/ncu 2>&1 | cut -c1-1500
  [ -d /tmp/ncu ] && tar czf $OUT/ncu.tgz --exclude '*.ncu-rep' -C /tmp ncu   # $OUT takes 8 files
fi
if has train; then echo "=== train"; timeout $(left) python3 bench/h200_train.py --art $A --warm-fla --members ${M// /,} ${TRAIN_ARGS:-} --out $OUT/train.json 2>&1 | cut -c1-400; fi
echo "=== done in $(( $(date +%s) - start )) s"
