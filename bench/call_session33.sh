#!/usr/bin/env bash
# The device call (docs/results.md, "Thirty-third session"), run as .device/call1.sh with
# carry [".device"] after `scripts/h200-prepare.sh` (it empties .device: prepare first), for
# each experiment set `X_PATCH=<patch> X_FILES=<sources> X_NAME=x<name> scripts/h200-ab.sh
# prepare-x` and, for an old set, `OLD=<commit> scripts/h200-ab.sh prepare`:
# the torch unit tests on the CPU stand-in; the column-piece, row-plan and gather check cases
# against the interpreter and the gather trap; the sets of SETS compared with new (bitwise) and
# timed (SPEED, default kda and gla with their saved forms; fla beside new with FLA=kda,gla, ~2 min of JIT each);
# PARTS (default "same plans bwd"; "check" runs scripts/h200-check.sh, racecheck there with RACECHECK=1); racecheck of RC; Nsight Compute on the kernels NCU_KERNELS (a regex) of the set NCU_SET if time is left. Everything goes to $OUT, whose file
# count the device limits (about 8 come back): keep SETS short.
set -u
start=$(date +%s); limit=${LIMIT:-585}   # seconds this call may take (the racechecks and Nsight stop short of it)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
echo "=== python tests (torch, CPU stand-in)"
(cd python/tests && PYTHONPATH=../:. timeout 60 python3 -m unittest test_fla_ops 2>&1 | tail -4 | tee $OUT/checks.txt)
echo "=== check cases vs interpreter"
for case in frag_reduce_pieces@reductions_pieces_r100 frag_reduce_pieces4@reductions_pieces4_r100 \
            row_plans@rowplan_r150 row_plans_wide@rowplan_wide_r300 row_plans_narrow@rowplan_narrow_r100 gathers@gathers_r100; do
  kernel=${case%%@*}; name=${case#*@}
  .device/bin/tilec-run .device/art/$kernel.sm_90a.meta.json --inputs .device/io/$name.in.safetensors --out /tmp/$name.gpu.safetensors $(cat .device/io/$name.flags 2>/dev/null) >/dev/null || echo "FAIL $name"
done
for n in 15 16; do
  .device/bin/tilec-run .device/art/gather_trap.sm_90a.meta.json --inputs .device/io/gather_trap_n$n.in.safetensors --out /tmp/gt$n.safetensors > /tmp/gt$n.txt 2>&1
  echo "gather_trap n=$n: exit $? ($( [ $n = 15 ] && echo 'must run' || echo 'must trap')): $(tail -n1 /tmp/gt$n.txt | cut -c1-160)"
done 2>&1 | tee -a $OUT/checks.txt
AB_SETS="${SETS:-new xv1}" AB_PARTS="${PARTS:-same plans bwd}" RACECHECK=${RACECHECK:-0} AB_SPEED=${SPEED:-kda,gla} AB_FLA_SPEED=${FLA:-none} AB_OLD_SPEED=${OLD_SPEED:-1} BUDGET=${BUDGET:-450} OUT=$OUT/ab scripts/h200-ab.sh > /dev/null 2>&1
# Every set's records in one file (the device returns only about eight): $OUT/ab/sets.json,
# {set: [records of bench/h200_gdn_bwd.py]}; the per-set files go.
python3 - "$OUT/ab" <<'PY'
import json, os, sys
d = sys.argv[1]; out = {}
for s in sorted(os.listdir(d)):
    f = os.path.join(d, s, "gdn_bwd.json")
    if os.path.isfile(f):
        txt = open(f).read(); dec = json.JSONDecoder(); i = 0; recs = []
        while i < len(txt):
            while i < len(txt) and txt[i] in " \n\r\t,[]": i += 1
            if i >= len(txt): break
            o, i = dec.raw_decode(txt, i); recs.append(o)
        out[s] = recs; os.remove(f)
json.dump(out, open(os.path.join(d, "sets.json"), "w"), indent=1)
PY
for name in reductions_pieces_r100 reductions_pieces4_r100 rowplan_r150 rowplan_wide_r300 rowplan_narrow_r100 gathers_r100; do
  PYTHONPATH=/tmp/site python3 scripts/h200_compare_outputs.py "$name" /tmp/$name.gpu.safetensors .device/io/$name.interp.safetensors --exact
done 2>&1 | tee -a $OUT/checks.txt   # in a file too: the reply keeps only the output's tail
grep -v "^  *bitwise" $OUT/ab/ab.txt | cut -c1-300 | tail -90
echo "=== FAIL lines:"; grep -E "FAIL" $OUT/ab/ab.txt | head -20
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n1)
for ms in ${RC-kda@new}; do   # RC="" runs none
  m=${ms%@*}; x=${ms#*@}
  [ $(( $(date +%s) - start )) -lt $(( limit - 85 )) ] || { echo "skip racecheck $m $x: time"; continue; }
  a=.device/art_$x; [ $x = new ] && a=.device/art
  cp -n .device/art/* $a/ 2>/dev/null
  timeout $(( limit - ($(date +%s) - start) )) "$cs" --tool racecheck --racecheck-report hazard --print-limit 3 .device/bin/tilec-run $a/${m}_bwd.sm_90a.plan.json --inputs .device/rec/$m/in.safetensors --out /tmp/rc_$m.safetensors > $OUT/rc_${m}_$x.txt 2>&1
  echo "racecheck $x $m (rc $?): $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/rc_${m}_$x.txt | tail -n2 | tr '\n' ' ') ($(( $(date +%s) - start )) s)"
done
el=$(( $(date +%s) - start ))
ns=${NCU_SET:-new}; na=.device/art; [ $ns = new ] || na=.device/art_$ns
if [ -n "${NCU_KERNELS:-}" ] && [ $el -lt $(( limit - 135 )) ]; then
  echo "=== ncu $NCU_KERNELS on $na kda_bwd ($el s)"
  [ $ns = new ] || cp -n .device/art/* $na/ 2>/dev/null
  PYTHONPATH=/tmp/site:python timeout $(( limit - el )) python3 bench/h200_ncu.py --tilec-run .device/bin/tilec-run --plan $na/kda_bwd.sm_90a.plan.json --out $OUT/ncu --kernels "$NCU_KERNELS" 2>&1 | tail -5
  cat $OUT/ncu/*.summary.txt 2>/dev/null | head -60
  for f in $OUT/ncu/*.sass.csv; do   # per loop of the SASS (bench/ncu_loops.py), into a file and the output
    [ -f "$f" ] && python3 bench/ncu_loops.py "$f" --ops 10 > "${f%.sass.csv}.loops.txt" 2>&1 && { echo "== $f"; head -40 "${f%.sass.csv}.loops.txt" | cut -c1-220; }
  done
  rm -f $OUT/ncu/*.ncu-rep $OUT/ncu/*.details.txt   # the device returns about eight files: keep the summary, the SASS pages and the loops
fi
echo "=== done $(( $(date +%s) - start )) s"
