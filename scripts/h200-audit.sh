#!/usr/bin/env bash
# On the H200 (the device tool; carry `.devaud`): judge the CUDA-L1 corpus with `kverify audit`
# for at most BUDGET seconds, resuming from the records carried in .devaud/rec-$MODE, and leave
# the records and the summary in $OUT. Between calls, copy $OUT's $MODE-kernels-*.jsonl back
# into .devaud/rec-$MODE/kernels-*.jsonl (docs/audit.md, "Measured on the H200"). Prepared by
#   cp ../shared/data/foreign/cuda-l1-h100.jsonl .devaud/corpus.jsonl
#   cargo build --release -p kverify && cp target/release/kverify .devaud/ && strip .devaud/kverify
# MODE=audit|control (the positive control), LIMIT (kernels of the corpus to cover so far: the
# first LIMIT in corpus order), JOBS (judging workers on the one GPU), BUILD_JOBS (load_inline
# builds beside them; the host's 16 cores are what an audit there is bound by), BUDGET (seconds:
# no kernel starts after BUDGET - DRAIN, the run is killed at BUDGET), PROFILE=1 (per-request
# seconds by part, $MODE-profile.jsonl). Both modes in one call, e.g.:
#   MODE=audit BUDGET=330 bash scripts/h200-audit.sh; MODE=control BUDGET=230 bash scripts/h200-audit.sh
set -u
MODE=${MODE:-audit}; LIMIT=${LIMIT:-250}; JOBS=${JOBS:-8}; BUILD_JOBS=${BUILD_JOBS:-8}; BUDGET=${BUDGET:-480}; DRAIN=${DRAIN:-150}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=/tmp/aud-$MODE; mkdir -p "$D"
cp .devaud/rec-$MODE/kernels-*.jsonl "$D/" 2>/dev/null || true
flags=(); [ "$MODE" = control ] && flags=(--control)
K=.devaud/kverify
[ "${PROFILE:-0}" = 1 ] && export KVERIFY_AUDIT_PROFILE="$OUT/$MODE-profile.jsonl"  # per-request seconds by part
start=$(date +%s)
log="$OUT/$MODE-log.txt"
timeout -s KILL "$BUDGET" "$K" audit .devaud/corpus.jsonl --out "$D" --device cuda:0 --jobs "$JOBS" \
  --limit "$LIMIT" --build-jobs "$BUILD_JOBS" --stop-after $((BUDGET > DRAIN ? BUDGET - DRAIN : 1)) --extensions-dir /tmp/torch_ext --worker "python3 verifier/python/audit_worker.py" \
  "${flags[@]}" --quiet >"$log" 2>&1
echo "audit rc $? after $(( $(date +%s) - start )) s" | tee -a "$log"
pkill -KILL -f audit_worker.py 2>/dev/null; sleep 1
"$K" audit .devaud/corpus.jsonl --out "$D" "${flags[@]}" --report-only >>"$log" 2>&1
# Records leave as $MODE-kernels-*.jsonl, the log (kverify's output, then the summary) as
# $MODE-log.txt: two or three files per mode, so an audit and a control fit one call's $OUT.
# Copy the records back into .devaud/rec-$MODE/ without the prefix to resume.
for f in "$D"/kernels-*.jsonl; do cp "$f" "$OUT/$MODE-$(basename "$f")"; done
python3 - "$D" <<'PY' | tee -a "$log"
import glob, json, statistics, sys
e = [json.loads(l)["elapsed_s"] for f in glob.glob(sys.argv[1] + "/kernels-*.jsonl") for l in open(f) if l.strip()]
if e:
    print(f"seconds per kernel over {len(e)} records: median {statistics.median(e):.0f}, max {max(e):.0f}, total {sum(e):.0f}")
PY
tail -n 45 "$log"
