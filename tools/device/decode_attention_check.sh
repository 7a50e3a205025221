#!/usr/bin/env bash
# decode_attention_check.sh: the decode-path variants of session 29 ([infer] #18) on the GPU in one device call: their
# op tests and engine tests (each decode attention kernel against the CPU; the gate/up SwiGLU GEMV byte for byte
# against the launches it replaces), the attention kernels alone (bench_cuda_kernels attn_decode: split + merge at
# Table 8's and Qwen3-4B's decode shapes), and decode per model with every variant on the same weights, interleaved in
# one process (bench_generate --decode-variants, L 1024, 128 steps, graphs on). Binaries unpacked under $BIN (default
# /tmp/hlm/bin, libraries in $BIN/../lib); everything lands in $OUT/decode_attention.tgz (written on exit, also after
# a timeout).
#
# usage: OUT=$OUT [PARTS=tests,bench,decode] [VARIANTS=...] [BATCHES=1] bash tools/device/decode_attention_check.sh
#          [MODELS]
#   MODELS    comma-separated bench_generate shapes (default olmo3_7b,qwen3_4b,olmo_hybrid_7b)
#   VARIANTS  bench_generate --decode-variants list (default: session 29's six variants in today's names:
#             tiled+no-swiglu, warps+no-qkfold+no-swiglu, tiled (swiglu), warps+qkfold+no-swiglu, warps (qkfold, swiglu),
#             warps+fused-merge, then three again: repeats show the spread in the process)
#   BATCHES   bench_generate --batches for the decode rows (default 1; e.g. 64 for the serving batch)
#   SPLIT_KEYS  space-separated HLM_DECODE_MIN_SPLIT_KEYS values (read once per process: one more process per value
#             and model, variants warps+qkfold+swiglu and tiled; default "32 128"; empty: none)
#   PARTS     which sections run (default all three; ~1 min of model set-up per bench_generate process plus ~3 s per
#             variant row: all of it exceeds one 600-s call, so e.g. PARTS=tests,bench, then PARTS=decode SPLIT_KEYS=,
#             then PARTS=decode with VARIANTS=tiled and the split-key rows)
# Prints the test verdicts, the attn_decode lines and the decode rows (precision column names the variant; ms per
# step in column 9).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/decode_attention_out}
W=/tmp/decode_attention
rm -rf "$W"; mkdir -p "$W" "$OUT"
export LD_LIBRARY_PATH=$BIN/../lib HLM_GOLDEN_DIR=${HLM_GOLDEN_DIR:-$PWD/tests/golden}
finish() { tar czf "$OUT/decode_attention.tgz" -C /tmp decode_attention; }
trap finish EXIT
models=${1:-olmo3_7b,qwen3_4b,olmo_hybrid_7b}
# swiglu and qkfold are on by default since session 31: the no- items give the launches they replace
default_variants=tiled+no-swiglu,warps+no-qkfold+no-swiglu,tiled,warps+qkfold+no-swiglu,warps,warps+fused-merge
variants=${VARIANTS:-$default_variants,tiled+no-swiglu,warps+no-qkfold+no-swiglu,warps}

PARTS=${PARTS:-tests,bench,decode}
has() { [[ ",$PARTS," == *",$1,"* ]]; }

if has tests; then
timeout 120 "$BIN/test_cuda_ops" \
  --gtest_filter='AttentionCacheCuda.*:AttentionDecodePrepCuda.*:MatmulCuda.Gemv*:SwigluCuda.*:QkNormRope*' \
  > "$W/ops.log" 2>&1
echo "test_cuda_ops rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/ops.log" | tr '\n' ' ')"
grep -E "gemv swiglu|\[prep\]" "$W/ops.log"
grep -E "decode, .* kernel" "$W/ops.log" | head -40
timeout 180 "$BIN/test_cuda_models" \
  --gtest_filter='CudaEngine.EveryDecodeAttentionKernelMatchesTheCpu:CudaEngine.PrefillChunkings*:CudaEngineFusions.*'\
':CudaEngineGraphs.*' \
  > "$W/models.log" 2>&1
echo "test_cuda_models rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/models.log" | tr '\n' ' ')"
grep -E "decode with the|\[fusions\]|FAILED" "$W/models.log" | head -60
fi
if has bench; then
timeout 240 "$BIN/bench_cuda_kernels" attn_decode > "$W/attn_decode.log" 2>&1
echo "bench_cuda_kernels attn_decode rc $?"
grep -E "^attn_decode" "$W/attn_decode.log"
fi
has decode || exit 0

IFS=',' read -r -a model_list <<< "$models"
for m in "${model_list[@]}"; do
  timeout 400 "$BIN/bench_generate" --models "$m" --contexts 1024 --batches "${BATCHES:-1}" --decode-steps 128 \
    --cuda-graphs on --decode-variants "$variants" --out "$W/bg_$m" > "$W/bg_$m.log" 2>&1
  echo "$m rc $?"
  grep -E "^\| $m " "$W/bg_$m/bench_generate.md" | awk -F'|' '{print $2 "|" $3 "| B" $6 " | " $9 " ms/step"}'
done
for keys in ${SPLIT_KEYS-32 128}; do
  for m in "${model_list[@]}"; do
    HLM_DECODE_MIN_SPLIT_KEYS=$keys timeout 300 "$BIN/bench_generate" --models "$m" --contexts 1024 \
      --batches "${BATCHES:-1}" --decode-steps 128 --cuda-graphs on --decode-variants tiled,warps+qkfold+swiglu \
      --out "$W/bg_${m}_keys$keys" > "$W/bg_${m}_keys$keys.log" 2>&1
    echo "$m, >= $keys keys per split: rc $?"
    grep -E "^\| $m " "$W/bg_${m}_keys$keys/bench_generate.md" | awk -F'|' '{print $2 "|" $3 "| B" $6 " | " $9 " ms/step"}'
  done
done
