#!/usr/bin/env bash
# Runs the whole test suite (installs what is missing first). CI calls this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
# shellcheck disable=SC1091
. "$root/.tools/env.sh"
cd "$root"
# One build from scratch gains nothing from incremental caches; they took 4.7 GB of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The tilec commands the tests run keep their build cache beside the test build, never in the
# user's (even one TILEC_CACHE_DIR names).
export TILEC_CACHE_DIR="${CARGO_TARGET_DIR:-$root/target}/tilec-test-cache"
cargo test --workspace --locked "$@"
# tilec_torch (python/): plan loading, argument checks, launch arguments; standard library only,
# under a second (its torch tests skip where torch is not installed).
python3 -m unittest discover -s python/tests
