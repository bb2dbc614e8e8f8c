#!/usr/bin/env bash
# Benchmark: `tilec build` of every dsl-examples/*.tile for both targets, excluding ptxas
# (--no-ptxas; the time printed by tilec covers front end + LLVM code generation to PTX).
# Target from the issue: under 300 ms per example in release.
#   PROFILE=release (default) or dev; REPS (default 5). Prints best and median per example and
#   whether the median meets the target (TARGET_MS, default 300), with the margin in ms.
#   Code generation runs on up to `nproc` threads (one LLVM module per kernel and target), so
#   the numbers depend on the machine's free cores; the load average is printed with them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -f "$root/.tools/env.sh" ]; then . "$root/.tools/env.sh"; fi
profile="${PROFILE:-release}"; reps="${REPS:-5}"
flag=(); [ "$profile" = release ] && flag=(--release)
(cd "$root" && cargo build -q -p tilec "${flag[@]}")
dir="${CARGO_TARGET_DIR:-$root/target}/$([ "$profile" = release ] && echo release || echo debug)"
out="$(mktemp -d)"
target="${TARGET_MS:-300}"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); binary $dir/tilec"
printf '%-28s %10s %10s  %s  (%s, %s reps, ms)\n' example best median "target $target" "$profile" "$reps"
for src in "$root"/dsl-examples/*.tile; do
  ts=()
  for _ in $(seq "$reps"); do
    t=$("$dir/tilec" build "$src" --target all --no-ptxas --no-cache -o "$out" 2>&1 | sed -n 's/.*no ptxas): \([0-9.]*\) ms/\1/p')
    ts+=("$t")
  done
  sorted=$(printf '%s\n' "${ts[@]}" | sort -g)
  med=$(echo "$sorted" | sed -n "$(( (reps + 1) / 2 ))p")
  verdict=$(awk -v m="$med" -v t="$target" 'BEGIN { d = m - t; if (d <= 0) printf "met (%.0f under)", -d; else printf "MISSED by %.0f", d }')
  printf '%-28s %10s %10s  %s\n' "$(basename "$src")" "$(echo "$sorted" | head -1)" "$med" "$verdict"
done
rm -rf "$out"
