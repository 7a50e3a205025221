#!/usr/bin/env bash
# fused_decode_sweep.sh: batch-1 decode ms per step of the fused decode kernel (ops/fused_decode) under a list of its
# tuning knobs, beside the eager decode, in one process per setting (bench_generate; docs/inference.md names the
# knobs). For a device call: binaries unpacked under $BIN (default /tmp/hlm/bin), results under $OUT.
#
# usage: bash tools/device/fused_decode_sweep.sh [MODELS] [SETTING...]
#   MODELS   bench_generate --models list (default qwen3_4b,olmo3_7b)
#   SETTING  space-free list of VAR=VALUE pairs joined by ',' (e.g. DOTS=fma,PREFETCH_KB=256), each VAR prefixed with
#            HLM_FUSED_DECODE_; "eager" runs with the fused decode off. Default: eager, the defaults, DOTS=fma,
#            PREFETCH_KB=128, PREFETCH_KB=256, DOTS=fma,PREFETCH_KB=256.
# Prints one line per setting and model: the markdown row bench_generate printed (ms per step in column 9).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/fused_sweep}
models=${1:-qwen3_4b,olmo3_7b}
shift || true
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(eager default DOTS=fma PREFETCH_KB=128 PREFETCH_KB=256 DOTS=fma,PREFETCH_KB=256)
mkdir -p "$OUT"
for s in "${settings[@]}"; do
  env_args=(HLM_FUSED_DECODE=on)
  if [ "$s" = eager ]; then
    env_args=(HLM_FUSED_DECODE=off)
  elif [ "$s" != default ]; then
    IFS=',' read -r -a pairs <<< "$s"
    for p in "${pairs[@]}"; do env_args+=("HLM_FUSED_DECODE_$p"); done
  fi
  tag=$(echo "$s" | tr ',=' '_-')
  env "${env_args[@]}" timeout 150 "$BIN/bench_generate" --models "$models" --contexts 1024 --batches 1 \
    --decode-steps 64 --out "$OUT/$tag" > "$OUT/$tag.log" 2>&1
  echo "== $s (rc $?)"
  grep -E '^   \|' "$OUT/$tag.log"
done
