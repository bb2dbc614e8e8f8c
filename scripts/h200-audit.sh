#!/usr/bin/env bash
# On the H200 (the device tool; carry `.devaud`): judge the CUDA-L1 corpus with `kverify audit`
# for at most BUDGET seconds, resuming from the records carried in .devaud/rec-{audit,control},
# and leave the records and the summaries in $OUT. Between calls, copy $OUT's
# {audit,control}-{kernels,partial}-*.jsonl back into .devaud/rec-{audit,control}/ (without the
# prefix); at a session's end, the records into bench/audit/cuda-l1.h200-v2.{,control.}kernels-
# 0of1.jsonl, the tracked resume set used when .devaud holds none (docs/audit.md). Prepared by
#   cp ../shared/data/foreign/cuda-l1-h100.jsonl .devaud/corpus.jsonl
#   cargo build --release -p kverify && cp target/release/kverify .devaud/ && strip .devaud/kverify
# MODE=both (default: every task's positive control judged beside its candidate in one worker,
# `--with-control`; LIMIT counts rows) | audit | control. JOBS (judging workers on the one GPU),
# BUILD_JOBS (load_inline builds beside them; the host's 16 cores are what an audit there is
# bound by), BUDGET (seconds: no unit starts after BUDGET - DRAIN, the run is killed at
# BUDGET), PROFILE=1 (per-request seconds by part, $OUT/profile.jsonl). Extensions are built
# into .devext (ignored), which a machine still warm from the last call keeps.
set -u
MODE=${MODE:-both}; LIMIT=${LIMIT:-250}; JOBS=${JOBS:-8}; BUILD_JOBS=${BUILD_JOBS:-6}; BUDGET=${BUDGET:-560}; DRAIN=${DRAIN:-60}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" .devext
A=/tmp/aud-audit; C=/tmp/aud-control; mkdir -p "$A" "$C"
# A machine still warm from the last call has newer records in /tmp than those carried; with
# no carried records the audit resumes from the tracked ones (bench/audit/cuda-l1.h200-v2.*).
# Per-gate progress of the kernels a kill interrupted (partial-*.jsonl) travels the same way.
if ! ls "$A"/kernels-*.jsonl >/dev/null 2>&1; then
  cp .devaud/rec-audit/kernels-*.jsonl "$A/" 2>/dev/null || cp bench/audit/cuda-l1.h200-v2.kernels-0of1.jsonl "$A/kernels-0of1.jsonl"
  cp .devaud/rec-audit/partial-*.jsonl "$A/" 2>/dev/null
fi
if ! ls "$C"/kernels-*.jsonl >/dev/null 2>&1; then
  cp .devaud/rec-control/kernels-*.jsonl "$C/" 2>/dev/null || cp bench/audit/cuda-l1.h200-v2.control.kernels-0of1.jsonl "$C/kernels-0of1.jsonl"
  cp .devaud/rec-control/partial-*.jsonl "$C/" 2>/dev/null
fi
case "$MODE" in
  both) dirs=(--out "$A" --with-control "$C") ;;
  audit) dirs=(--out "$A") ;;
  control) dirs=(--out "$C" --control) ;;
  *) echo "MODE wants both, audit or control" >&2; exit 2 ;;
esac
K=.devaud/kverify
[ "${PROFILE:-0}" = 1 ] && export KVERIFY_AUDIT_PROFILE="$OUT/profile.jsonl"
rm -f "$OUT"/*
start=$(date +%s)
log="$OUT/log.txt"
timeout -s KILL "$BUDGET" "$K" audit .devaud/corpus.jsonl "${dirs[@]}" --device cuda:0 --jobs "$JOBS" \
  --limit "$LIMIT" --build-jobs "$BUILD_JOBS" --stop-after $((BUDGET > DRAIN ? BUDGET - DRAIN : 1)) --extensions-dir "$PWD/.devext" \
  --worker "python3 verifier/python/audit_worker.py" --quiet >"$log" 2>&1
echo "audit rc $? after $(( $(date +%s) - start )) s" | tee -a "$log"
pkill -KILL -f audit_worker.py 2>/dev/null; sleep 1
"$K" audit .devaud/corpus.jsonl "${dirs[@]}" --report-only >>"$log" 2>&1
# Records leave as {audit,control}-{kernels,partial}-*.jsonl beside log.txt (and
# profile.jsonl): at most seven files, inside what one call's $OUT brings back.
for f in "$A"/kernels-*.jsonl "$A"/partial-*.jsonl; do [ -s "$f" ] && cp "$f" "$OUT/audit-$(basename "$f")"; done
for f in "$C"/kernels-*.jsonl "$C"/partial-*.jsonl; do [ -s "$f" ] && cp "$f" "$OUT/control-$(basename "$f")"; done
python3 - "$A" "$C" <<'PY' | tee -a "$log"
import glob, json, statistics, sys
for d in sys.argv[1:]:
    e = [json.loads(l)["elapsed_s"] for f in glob.glob(d + "/kernels-*.jsonl") for l in open(f) if l.strip()]
    if e:
        print(f"{d}: {len(e)} records, seconds per unit: median {statistics.median(e):.0f}, max {max(e):.0f}")
PY
tail -n 60 "$log"
