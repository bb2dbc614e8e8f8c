#!/usr/bin/env bash
# Builds, here, everything scripts/h200-check.sh needs on the H200 into .device/ (ignored by
# git; name `.device` in the device's `carry`; the gdn.tile head-size variants into .devvar/): release tilec-run and kverify, the runtime's GPU
# smoke-test binary, sm_90a artifacts (PTX + cubin + metadata) of every example, and per case
# seeded inputs with the CPU interpreter's sm_90a outputs at odd sizes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. .tools/env.sh
t="${CARGO_TARGET_DIR:-$root/target}"
cargo build -q --release -p tilec -p tilec-runtime -p kverify
smoke=$(cargo test -q -p tilec-runtime --test gpu_smoke --no-run --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="gpu_smoke": print(m["executable"])')
d=.device; rm -rf "$d"; mkdir -p "$d/bin" "$d/art" "$d/io"
cp "$t/release/tilec-run" "$t/release/kverify" "$d/bin/"; cp "$smoke" "$d/bin/gpu_smoke"
tilec="$t/release/tilec"
for f in dsl-examples/*.tile tests/gpu/*.tile; do "$tilec" build "$f" --target sm_90a -o "$d/art" >/dev/null; done
# gdn.tile at its other head sizes (size parameters K ∈ {64, 128}, V ∈ {64, 128, 256}).
variants=(k64v64 k64v128 k64v256 k128v64 k128v256)
kv() { local s=${1#k}; echo "--const K=${s%v*},V=${s#*v}"; }
for x in "${variants[@]}"; do "$tilec" build dsl-examples/gdn.tile $(kv $x) --target sm_90a -o "$d/art_$x" >/dev/null; done
cases=()
case_() { # NAME FILE KERNEL SIZES...
  local name=$1 file=$2 kernel=$3; shift 3
  local args=(); for s in "$@"; do args+=("$s"); done
  "$tilec" inputs "$file" --kernel "$kernel" "${args[@]}" --std "${STD:-0.5}" --seed 7 --out "$d/io/$name.in.safetensors" >/dev/null
  local run=() prev=""; for s in "$@"; do [ "$prev" = --size ] && run+=(--size "$s"); prev=$s; done
  "$tilec" run --interp --target sm_90a "$file" --kernel "$kernel" --inputs "$d/io/$name.in.safetensors" --out "$d/io/$name.interp.safetensors" "${run[@]}" >/dev/null
  printf '%s\n' "${run[@]}" | paste -sd' ' > "$d/io/$name.flags"
  cases+=("$kernel@$name")
}
case_ gemm65 dsl-examples/gemm.tile gemm --size M=65 --size K=65 --size N=65
case_ gemm256 dsl-examples/gemm.tile gemm --size M=256 --size K=192 --size N=256
# Ragged but 16-byte-aligned rows: TMA on every operand, its zero fill past each edge.
case_ gemm_ragged dsl-examples/gemm.tile gemm --size M=200 --size K=136 --size N=264
# One sequence [0, T) (cu, co), or its chunk table ct (rows (n·C, T)): a dense call.
dense1=(--size NP=2 --values cu=0,100 --values co=0,2)
dense2=(--size NS=2 --values ct=0,100,64,100)
case_ k1s_t100 dsl-examples/k1_reverse_scan.tile k1_scan_scalar --size B=1 --size T=100 --size H=2 --size V=80 --scalar scale=0.088 "${dense1[@]}"
# The bf16-dU instance gdn_bwd launches (kernel instances, docs/language.md): dv2 stored as bf16.
case_ k1sb_t100 dsl-examples/k1_reverse_scan.tile k1_scan_scalar_bf16 --size B=1 --size T=100 --size H=2 --size V=80 --scalar scale=0.088 "${dense1[@]}"
case_ k1c_t100 dsl-examples/k1_reverse_scan.tile k1_scan_channel --size B=1 --size T=100 --size H=2 --size V=80 "${dense1[@]}"
case_ k1cb_t100 dsl-examples/k1_reverse_scan.tile k1_scan_channel_bf16 --size B=1 --size T=100 --size H=2 --size V=80 "${dense1[@]}"
# Three sequences of 1, 70 and 79 tokens packed: the second starts mid-chunk.
case_ k1s_varlen dsl-examples/k1_reverse_scan.tile k1_scan_scalar --size B=1 --size T=150 --size H=2 --size V=64 --scalar scale=0.088 --size NP=4 --values cu=0,1,71,150 --values co=0,1,3,5
case_ k2_t100 dsl-examples/k2_wy_vjp.tile k2_wy_vjp --size B=1 --size T=100 --size H=2 --size G=1 "${dense2[@]}"
# cp.async (no tensor map for rank 6) into swizzled operand tiles; K = 192: a partial ring.
case_ rank6 tests/gpu/cp_async_swizzled.tile rank6 --size P=1 --size Q=1 --size R=1 --size S=1 --size M=128 --size K=192 --size N=128
case_ reuse_m100 dsl-examples/tmem_reuse_disjoint.tile reuse_disjoint --size M=100
# Views, mutable scalars, cumsums, masked stores (issue 10); N = 40: a partial last tile.
case_ views_n40 tests/gpu/views.tile views --size N=40
# Reduction orders (row: strided lanes + butterfly; column: sequential) at widths 3, 33, 80,
# 200 and a partial last tile of rows; the GPU must equal the interpreter bitwise.
case_ reductions_r150 tests/gpu/reductions.tile reductions --size R=150 --size G=3
# Row reductions of wgmma accumulators folded in their fragments (quads + 2 shuffles): the
# same order, so bitwise too; widths 16 … 256, a max, an i32 sum, two accumulators at once.
case_ reductions_frag_r150 tests/gpu/frag_reductions.tile frag_reductions --size R=150
# Loop-carried tiles declared tmem that no MMA writes: registers on sm_90a; bitwise.
case_ tmem_vars_r100 tests/gpu/tmem_loop_vars.tile tmem_loop_vars --size R=100
# Row reductions of a register tile split into two warpgroups' column pieces: folded piece
# after piece through shared memory, in the same order, so bitwise too.
case_ reductions_pieces_r100 tests/gpu/frag_reduce_pieces.tile frag_reduce_pieces --size R=100
case_ reductions_pieces4_r100 tests/gpu/frag_reduce_pieces.tile frag_reduce_pieces4 --size R=100
# Row reductions under every kind of row plan (u threads per row, k lanes each in registers,
# rotated per row; layout/reduction.rs RowPlan): bitwise against the interpreter.
case_ rowplan_r150 tests/gpu/row_plans.tile row_plans --size R=150
case_ rowplan_wide_r300 tests/gpu/row_plans.tile row_plans_wide --size R=300
case_ rowplan_narrow_r100 tests/gpu/row_plans.tile row_plans_narrow --size R=100
# Gathers `t[rows, cols]` (a row's own column, a row per 16-row block, indices from the data,
# a gather from a computed value): bitwise against the interpreter.
case_ gathers_r100 tests/gpu/gathers.tile gathers --size R=100
# Float `%`: the GPU's div.rn, cvt.rzi, fma.rn sequence; bitwise.
case_ float_rem_n1000 tests/gpu/float_rem.tile float_rem --size N=1000
# gdn.tile's chunk stages; T = 100: a partial chunk. Small values keep (I + L)⁻¹ tame.
case_ cumsum_t100 dsl-examples/gdn.tile gate_cumsum --size B=2 --size T=100 --size H=3 "${dense2[@]}"
case_ combine_t100 dsl-examples/gdn.tile combine --size B=2 --size T=100 --size G=1 --size H=3 "${dense2[@]}"
STD=0.1 case_ kkt_t100 dsl-examples/gdn.tile kkt --size B=1 --size T=100 --size H=2 --size G=1 "${dense2[@]}"
case_ tril_t100 dsl-examples/gdn.tile solve_tril --size B=1 --size T=100 --size H=2 "${dense2[@]}"
case_ wu_t100 dsl-examples/gdn.tile recompute_w_u --size B=1 --size T=100 --size H=2 --size G=1 "${dense2[@]}"
case_ statefwd_t100 dsl-examples/gdn.tile state_fwd --size B=1 --size T=100 --size H=2 --size G=1 "${dense1[@]}"
case_ gateqk_t100 dsl-examples/gdn.tile gate_qk_channel --size B=1 --size T=100 --size H=2 --size G=1 --scalar scale=0.088 "${dense2[@]}"
# The per-channel intra-chunk products with their paired distance steps (per-row gathers).
case_ scoresc_t100 dsl-examples/gdn.tile scores_channel --size B=1 --size T=100 --size H=2 --size G=1 --scalar scale=0.088 "${dense2[@]}"
STD=0.1 case_ kktc_t100 dsl-examples/gdn.tile kkt_channel --size B=1 --size T=100 --size H=2 --size G=1 "${dense2[@]}"
case_ dvlocal_t100 dsl-examples/gdn.tile dv_local --size B=1 --size T=100 --size H=2 --size G=2 --scalar scale=0.088 "${dense2[@]}"
case_ dqkwg_t100 dsl-examples/gdn.tile dqkwg --size B=1 --size T=100 --size H=2 --size G=2 --scalar scale=0.088 "${dense2[@]}"
case_ dqkwgb_t100 dsl-examples/gdn.tile dqkwg_bf16 --size B=1 --size T=100 --size H=2 --size G=2 --scalar scale=0.088 "${dense2[@]}"
# GVA: q repeated per value head (2 value heads per key head).
case_ repeat_gva dsl-examples/sequences.tile repeat_heads --size B=1 --size T=100 --size H=2 --size G=2
# The device-side chunk table itself: 3 sequences (1, 70, 79 tokens) → 5 chunks in 5 rows.
case_ table_varlen dsl-examples/sequences.tile chunk_table --size NP=4 --size NS=5 --values cu=0,1,71,150
printf '%s\n' "${cases[@]}" > "$d/io/cases"
# A view outside its tile must trap on the GPU (the interpreter stops on n = 13, so no reference is made).
for n in 12 13; do "$tilec" inputs tests/gpu/view_trap.tile --scalar n=$n --out "$d/io/view_trap_n$n.in.safetensors" >/dev/null; done
for n in 15 16; do "$tilec" inputs tests/gpu/gathers.tile --kernel gather_trap --scalar n=$n --out "$d/io/gather_trap_n$n.in.safetensors" >/dev/null; done
# An access past the edge of a tensor without `edge(zeros)` must trap too (N = 16): inside,
# a load past the edge, a masked store keeping an element past it.
for nm in 12,8 13,8 12,9; do "$tilec" inputs tests/gpu/edge_trap.tile --size N=16 --scalar n=${nm%,*} --scalar m=${nm#*,} --out "$d/io/edge_trap_${nm/,/_}.in.safetensors" >/dev/null; done
# The whole backward of each member (gdn.tile's operators) at B=1 T=256 H=2 K=V=128: inputs
# rounded to the operator's dtypes, the fp64 oracle (the member's token-serial definition) of
# exactly those values, and the interpreter's outputs.
# The varlen operators likewise on three packed sequences of 1, 70 and 185 tokens (T = 256), and
# GDN with GVA: 4 value heads over 2 key heads.
# And GDN at every other head size, KDA (whose K#2 blocks its V loop) at V = 256.
for c in gdn ssd la gla kda gdn_varlen ssd_varlen la_varlen gla_varlen kda_varlen gdn_gva "${variants[@]/#/gdn_}" kda_k64v256 kda_k128v256; do
  m=${c%%_*}; vl=(); op=${m}_bwd; dk=128; dv=128; consts=()
  case $c in
    *_varlen) vl=(--cu-seqlens 0,1,71,256); op=${m}_bwd_varlen;;
    *_gva) vl=(--value-heads 4);;
    *_k*) x=${c#*_}; consts=($(kv $x)); dk=${x#k}; dk=${dk%v*}; dv=${x#*v};;
  esac
  g="$d/rec/$c"; mkdir -p "$g"
  "$t/release/kverify" ref --model $m --batch 1 --heads 2 --seq-len 256 --dk $dk --dv $dv --seed 7 --method serial "${vl[@]}" --out "$g/raw.safetensors" >/dev/null
  scale=$(python3 scripts/gdn_case.py "$g/raw.safetensors" "$g/in.safetensors" "$g/rounded.safetensors")
  "$t/release/kverify" ref --model $m --inputs "$g/rounded.safetensors" --scale "$scale" --method serial --out "$g/ref.safetensors" >/dev/null
  "$tilec" run --interp --target sm_90a dsl-examples/gdn.tile "${consts[@]}" --operator $op --inputs "$g/in.safetensors" --out "$g/interp.safetensors" 2>/dev/null
  # The forward (gdn_fwd.tile's <member>_fwd[_varlen]) on the same inputs less do and dht.
  python3 -c 'import sys, tilec_io; tilec_io.write(sys.argv[2], {k: v for k, v in tilec_io.read(sys.argv[1]).items() if k not in ("do", "dht")})' "$g/in.safetensors" "$g/in_fwd.safetensors"
  "$tilec" run --interp --target sm_90a dsl-examples/gdn_fwd.tile "${consts[@]}" --operator ${op/_bwd/_fwd} --inputs "$g/in_fwd.safetensors" --out "$g/interp_fwd.safetensors" 2>/dev/null
  rm "$g/raw.safetensors" "$g/rounded.safetensors" "$g/in_fwd.safetensors"   # the bench derives it again from in
  # Only the gradients and the forward's o and final state st, in f32 (the carry's 64 MiB):
  # their 6e-8 relative rounding is far below the 1e-3 errors measured against them.
  python3 -c 'import sys, numpy, tilec_io; p = sys.argv[1]; tilec_io.write(p, {k: v.astype(numpy.float32) for k, v in tilec_io.read(p).items() if (k.startswith("d") and k not in ("do", "dst")) or k in ("o", "st")})' "$g/ref.safetensors"
done
# The anchor, fla-core 0.6.0 (pure Python), travels as a wheel: the device has no network.
mkdir -p "$d/perf"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$d/perf" fla-core==0.6.0 \
  || echo "warning: fla-core 0.6.0 not downloaded: the benches will have no fla anchor" >&2
# Debug symbols would take the carry past its 64 MiB (gpu_smoke alone is 36 MB with them).
strip "$d/bin/"* 2>/dev/null || true
# The head-size variants go to a second carry, .devvar (with tilec-run and the default
# artifacts, for the varlen speed run): together they pass one call's 64 MiB.
v=.devvar; rm -rf "$v"; mkdir -p "$v/rec" "$v/bin"
mv "$d"/art_k* "$v/"; mv "$d"/rec/*_k* "$v/rec/"; cp "$d/bin/tilec-run" "$v/bin/"; cp -r "$d/art" "$v/art"
# The varlen cases go to .devchk/rec: with them .device passes 64 MiB. Their call carries
# .device/bin, .device/art, .device/perf and .devchk (CASES=.devchk/rec scripts/h200-run.sh).
c=.devchk; rm -rf "$c"; mkdir -p "$c/rec"; mv "$d"/rec/*_varlen "$c/rec/"
du -sh "$d" "$v" "$c"
