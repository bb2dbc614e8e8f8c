#!/usr/bin/env bash
# The main job on the shipped examples: check every example, print the TMEM plans,
# and show that the #904-class negative example is rejected.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
# shellcheck disable=SC1091
. "$root/.tools/env.sh"
cd "$root"
cargo build --release --locked -p tilec -p kverify
tilec="$root/target/release/tilec"
for f in dsl-examples/*.tile; do
  echo "== tilec check $f --emit tmem-plan"
  "$tilec" check "$f" --emit tmem-plan
done
for f in dsl-examples/negative/*.tile; do
  echo "== tilec check $f   (expected to be rejected)"
  if "$tilec" check "$f"; then echo "ERROR: $f was accepted"; exit 1; fi
done
