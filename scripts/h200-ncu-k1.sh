#!/usr/bin/env bash
# K#1 under Nsight Compute, tilec's beside fla's (issue 9: K#1 at least as fast as fla), on the
# H200 after `scripts/h200-prepare.sh` (carry .device): both kernels at B=8 T=2048 H=16
# K=V=128, scalar gate, profiled with the same `--set full --clock-control none`; writes into
# $OUT/ncu_k1/: fla_dhu.details.txt (every section as text; the autotuner's configuration is
# printed first) and tilec's gdn_bwd K#1 summary/details (bench/h200_ncu.py), packed as
# $OUT/ncu_k1.tgz ($OUT takes 8 files).
set -u
out=${OUT:-/tmp}; d=/tmp/ncu_k1; mkdir -p $d
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/perf/*.whl && export PYTHONPATH=/tmp/site
for kind in ${KINDS:-scalar}; do
  timeout ${NCU_S:-200} "$ncu" --set full --clock-control none --profile-from-start off -f -o $d/fla_dhu_$kind \
    python3 bench/h200_ncu_fla_dhu.py --kind $kind 2>&1 | grep -v '^==PROF==' | tail -5 | tee $d/fla_dhu_$kind.config.txt
  "$ncu" --import $d/fla_dhu_$kind.ncu-rep --page details > $d/fla_dhu_$kind.details.txt 2>&1
  "$ncu" --import $d/fla_dhu_$kind.ncu-rep --page source --print-source sass --csv > $d/fla_dhu_$kind.sass.csv 2>/dev/null || true
done
timeout ${NCU_S:-200} python3 bench/h200_ncu.py --ncu "$ncu" --tilec-run .device/bin/tilec-run --plan .device/art/gdn_bwd.sm_90a.plan.json --kernels k1_scan_scalar_bf16 --out $d 2>&1 | tail -30
tar czf $out/ncu_k1.tgz --exclude '*.ncu-rep' -C /tmp ncu_k1
grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Dynamic Shared|Memory Throughput|DRAM Throughput|Block Limit" $d/fla_dhu_scalar.details.txt | head -20
