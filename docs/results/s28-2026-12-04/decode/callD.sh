#!/usr/bin/env bash
# Session 28 ([infer] #18), call D: the committed defaults (pipelined GEMV, q/k cluster, HLM_PDL_ATTN unset = the
# split kernel alone as a dependent): the op and engine tests, batch-1 decode of the three shapes, and the split merge
# folded into the split kernel (HLM_DECODE_MERGE=fused) on the two attention-heavy shapes.
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:  OUT=$OUT bash .../callD.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
W=/tmp/callD; rm -rf $W; mkdir -p "$W"
finish() { tar czf "$OUT/callD.tgz" -C /tmp callD; }
trap finish EXIT
run() {  # label model env...
  local label=$1 m=$2; shift 2
  timeout 60 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out "$W/bg_${m}_$label" > "$W/bg_${m}_$label.log" 2>&1
  echo "$m $label rc $?: $(grep -E "^\| $m " "$W/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
run default olmo_hybrid_7b HLM_X=1
run default olmo3_7b HLM_X=1
run default qwen3_4b HLM_X=1
run merge_fused olmo3_7b HLM_DECODE_MERGE=fused
run merge_fused qwen3_4b HLM_DECODE_MERGE=fused
run default2 olmo_hybrid_7b HLM_X=1
timeout 40 "$B/test_cuda_ops" --gtest_filter='MatmulCuda.Gemv*:QkNormRopeCuda.*:AttentionCacheCuda.*' \
  > "$W/ops.log" 2>&1; echo "ops rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$W/ops.log"
timeout 90 "$B/test_cuda_models" --gtest_filter='CudaEngine*:-*Cli*' > "$W/models.log" 2>&1; echo "models rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|\[fusions\] " "$W/models.log" | head -20
