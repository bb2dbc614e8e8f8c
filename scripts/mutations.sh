#!/usr/bin/env bash
# Checks that the tests catch a wrong lowering: applies each mutation below, one at a time, to a
# temporary worktree of HEAD, runs `cargo test -p tilec`, and prints the tests that fail (a
# mutation that fails no test is a hole in the suite: exit status 1).
# Env: CARGO_TARGET_DIR (default: a target folder inside the temporary worktree).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/.tools/env.sh"
wt="$(mktemp -d)/tilec-mutations"
git -C "$root" worktree add --detach "$wt" HEAD >/dev/null
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$wt/target}"
holes=0
mutate() { # NAME FILE FROM TO
  (cd "$wt" && python3 - "$2" "$3" "$4" <<'PY'
import sys
p, a, b = sys.argv[1:]
s = open(p).read()
assert a in s, f"{p}: mutation site not found: {a}"
open(p, "w").write(s.replace(a, b, 1))
PY
  ) || { echo "=== $1: site not found"; holes=1; return; }
  echo "=== $1"
  failed=$(cd "$wt" && cargo test -q -p tilec --no-fail-fast 2>&1 | sed -nE 's/^---- (.*) stdout ----$/\1/p' | sort -u)
  if [ -z "$failed" ]; then echo "    NO TEST FAILS"; holes=1; else echo "$failed" | sed 's/^/    /'; fi
  git -C "$wt" checkout -q -- "$2"
}
mutate "swap A-fragment registers 1 and 2 (sm_90a lowering)" compiler/src/backend/sm90/mma_sync.rs \
  'for &(ro, ko) in &A_REGS {' 'for &(ro, ko) in &[A_REGS[0], A_REGS[2], A_REGS[1], A_REGS[3]] {'
mutate "swap A_REGS[1] and A_REGS[2] (layout table)" compiler/src/layout/mma_sync.rs \
  'pub const A_REGS: [(u32, u32); 4] = [(0, 0), (8, 0), (0, 8), (8, 8)];' 'pub const A_REGS: [(u32, u32); 4] = [(0, 0), (0, 8), (8, 0), (8, 8)];'
mutate "TMEM lane quarter warp & 1 instead of warp & 3" compiler/src/layout/tmem.rs \
  'let quarter = a.and(warp, 3)?;' 'let quarter = a.and(warp, 1)?;'
mutate "C-fragment column offset 1 -> 0 (sm_90a accumulator write-back)" compiler/src/layout/mma_sync.rs \
  'pub const C_REGS: [(u32, u32); 4] = [(0, 0), (0, 1), (8, 0), (8, 1)];' 'pub const C_REGS: [(u32, u32); 4] = [(0, 0), (0, 0), (8, 0), (8, 1)];'
mutate "K-major staging: core-matrix rows 8 bytes apart instead of 16" compiler/src/layout/staging.rs \
  'let o3 = a.mul(a.and(r, 7)?, a.c(16))?;' 'let o3 = a.mul(a.and(r, 7)?, a.c(8))?;'
exit $holes
