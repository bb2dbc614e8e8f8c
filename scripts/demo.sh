#!/usr/bin/env bash
# The main job on the shipped examples:
#   1. tilec check every example, printing its TMEM plan (column map);
#   2. show that the #904-class negative example is rejected (544 > 512 columns);
#   3. tilec build the K#1 reverse state scan, and gdn.tile — the GDN backward operator, its
#      stages and the K#1/K#2 kernels it imports — for sm_100a and sm_90a (PTX, cubin, metadata,
#      gdn_bwd.<target>.plan.json) with --verify: the operator runs on the interpreter and every
#      gradient is judged against kverify's fp64 oracle; then gdn_fwd.tile, the forward
#      operators (o and the final state judged the same way), into the same folder; and gemm.tile,
#      whose kernel declares contract(matmul): --verify judges c against kverify's matmul;
#   4. kverify RES-02 on the built artifacts' metadata (TMEM budget, lifecycle, smem, spills).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
# shellcheck disable=SC1091
. "$root/.tools/env.sh"
cd "$root"
cargo build --release --locked -p tilec -p kverify
bin="${CARGO_TARGET_DIR:-$root/target}/release"
for f in dsl-examples/*.tile; do
  echo "== tilec check $f --emit tmem-plan"
  "$bin/tilec" check "$f" --emit tmem-plan
done
for f in dsl-examples/negative/*.tile; do
  echo "== tilec check $f   (must be rejected)"
  if "$bin/tilec" check "$f"; then echo "ERROR: $f was accepted"; exit 1; fi
done
for ex in k1_reverse_scan gemm gdn gdn_fwd; do
  out="$root/out/${ex%_fwd}"
  verify=()
  [ "$ex" != k1_reverse_scan ] && verify=(--verify)
  echo "== tilec build dsl-examples/$ex.tile --target all -o $out ${verify[*]}"
  "$bin/tilec" build "dsl-examples/$ex.tile" --target all -o "$out" "${verify[@]}"
  # gdn_fwd.tile builds into gdn's folder (tilec_torch loads forward and backward plans from
  # one place): check that folder once, after both.
  [ "$ex" = gdn ] && continue
  for m in "$out"/*.meta.json; do
    echo "== kverify check --meta $m"
    "$bin/kverify" check --meta "$m" --json "$out/$(basename "$m" .meta.json).res02.json"
  done
done
echo "demo: ok (artifacts in $root/out/k1_reverse_scan, $root/out/gemm and $root/out/gdn)"
