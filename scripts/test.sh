#!/usr/bin/env bash
# Runs the whole test suite (installs what is missing first). CI calls this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
# shellcheck disable=SC1091
. "$root/.tools/env.sh"
cd "$root"
cargo test --workspace --locked "$@"
