#!/usr/bin/env bash
# decode_attention_check.sh: the decode attention kernels ([infer] #18) on the GPU in one device call: their op tests
# and the engine test (each kernel against the CPU), the kernels alone (bench_cuda_kernels attn_decode: split + merge
# at Table 8's and Qwen3-4B's decode shapes), and batch-1 decode per model with each kernel, interleaved, one process
# per row (bench_generate, L 1024, 128 steps, graphs on). Binaries unpacked under $BIN (default /tmp/hlm/bin, libraries
# in $BIN/../lib); everything lands in $OUT/decode_attention.tgz (written on exit, also after a timeout).
#
# usage: OUT=$OUT [PARTS=tests,bench,decode] bash tools/device/decode_attention_check.sh [MODELS] [SETTING...]
#   BATCHES  bench_generate --batches for the decode rows (default 1; e.g. 64 for the serving batch)
#   PARTS    which sections run (default all three; the decode rows take ~25 s each, so the default 24 rows with
#            the tests and the kernel bench exceed one 600-s device call: split them, e.g. PARTS=tests,bench first)
#   MODELS   comma-separated bench_generate shapes (default olmo3_7b,qwen3_4b,olmo_hybrid_7b)
#   SETTING  a label and VAR=VALUE pairs joined by ',' (e.g. warps128,HLM_DECODE_KERNEL=warps,HLM_DECODE_MIN_SPLIT_KEYS=128)
#            Default: tiled, warps, warps+fused merge, warps with ≥ 128 keys per split, the gate/up SwiGLU GEMV
#            (HLM_GATE_UP_SWIGLU=on), both changes, then tiled and warps again.
# Prints the test verdicts, the attn_decode lines and one line per (setting, model): ms per decode step.
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/decode_attention_out}
W=/tmp/decode_attention
rm -rf "$W"; mkdir -p "$W" "$OUT"
export LD_LIBRARY_PATH=$BIN/../lib HLM_GOLDEN_DIR=${HLM_GOLDEN_DIR:-$PWD/tests/golden}
finish() { tar czf "$OUT/decode_attention.tgz" -C /tmp decode_attention; }
trap finish EXIT
models=${1:-olmo3_7b,qwen3_4b,olmo_hybrid_7b}
shift || true
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(tiled,HLM_DECODE_KERNEL=tiled warps,HLM_DECODE_KERNEL=warps
  warps_fused,HLM_DECODE_KERNEL=warps,HLM_DECODE_MERGE=fused
  warps_128keys,HLM_DECODE_KERNEL=warps,HLM_DECODE_MIN_SPLIT_KEYS=128
  swiglu_gemv,HLM_GATE_UP_SWIGLU=on both,HLM_DECODE_KERNEL=warps,HLM_GATE_UP_SWIGLU=on
  tiled2,HLM_DECODE_KERNEL=tiled warps2,HLM_DECODE_KERNEL=warps)

PARTS=${PARTS:-tests,bench,decode}
has() { [[ ",$PARTS," == *",$1,"* ]]; }

if has tests; then
timeout 120 "$BIN/test_cuda_ops" --gtest_filter='AttentionCacheCuda.*:MatmulCuda.Gemv*:SwigluCuda.*' \
  > "$W/ops.log" 2>&1
echo "test_cuda_ops rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$W/ops.log" | tr '\n' ' ')"
grep -E "gemv swiglu" "$W/ops.log"
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
for s in "${settings[@]}"; do
  IFS=',' read -r -a parts <<< "$s"
  label=${parts[0]}
  for m in "${model_list[@]}"; do
    timeout 90 env "${parts[@]:1}" "$BIN/bench_generate" --models "$m" --contexts 1024 --batches "${BATCHES:-1}" \
      --decode-steps 128 --cuda-graphs on --out "$W/bg_${m}_$label" > "$W/bg_${m}_$label.log" 2>&1
    echo "$label $m rc $?: $(grep -E "^\| $m " "$W/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
  done
done
