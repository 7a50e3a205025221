#!/usr/bin/env bash
# distill_glue_check.sh: the tests and the A/B timing of the 4B distillation step's glue changes ([memory] #28 /
# [perf] #20, session 22 helper): the vectorized bf16-dW add-and-round kernel, HLM_DW_BF16_EPILOGUE (cuBLASLt's bf16
# output into dw, no fp32 scratch), the GDN gated norm's bf16 y / dz and convs' bf16 dx, RoPE into bf16 q / k, the
# attention backward's bf16 dv. For a device call: binaries unpacked under $BIN (default /tmp/hlm/bin), logs under
# $OUT.
#
# usage: bash tools/device/distill_glue_check.sh [tests|bench|all]   (default all)
#   tests  test_cuda_ops: AdamWLeanCuda.* (both dW forms; the epilogue form prints how many elements are not one
#          rounding), GatedRmsnormCuda.*, RopeCuda.*, CausalConv1dCuda.* (the bf16 outputs bit for bit), MatmulCuda.*;
#          test_cuda_models: the bf16 and lean model paths that run the changed layers (CudaKeptActivations
#          bit-identical, CudaModelBackward, CudaTrainStep, CudaTrainer.Bf16TracksFp32, CudaMemoryPlans,
#          CudaTrainGraphs, CudaBf16).
#   bench  bench_distill_step 4B lean, micro-batch 4, 3 steps, HLM_DW_BF16_EPILOGUE off then on (the ms/step lines and
#          the profile lines of each).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/distill_glue}
what=${1:-all}
mkdir -p "$OUT"
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 300 "$BIN/test_cuda_ops" --gtest_filter='AdamWLeanCuda.*:GatedRmsnormCuda.*:RopeCuda.*:CausalConv1dCuda.*:MatmulCuda*' \
    > "$OUT/ops.log" 2>&1
  echo "test_cuda_ops rc=$?"
  grep -E '^\[check\] bf16 dw|^\[  FAILED  \]|tests ran|PASSED' "$OUT/ops.log" | tail -12
  timeout 400 "$BIN/test_cuda_models" --gtest_filter='CudaKeptActivations.*:CudaModelBackward.*:CudaTrainStep.*:CudaTrainer.Bf16TracksFp32:CudaMemoryPlans.*:CudaTrainGraphs.*:CudaBf16.*' \
    > "$OUT/models.log" 2>&1
  echo "test_cuda_models rc=$?"
  grep -E '^\[  FAILED  \]|tests ran|PASSED' "$OUT/models.log" | tail -10
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for mode in off on; do
    HLM_DW_BF16_EPILOGUE=$mode HLM_PROFILE_STEP=1 timeout 300 "$BIN/bench_distill_step" --shape qwen3-4b \
      --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 > "$OUT/distill_$mode.log" 2>&1
    echo "HLM_DW_BF16_EPILOGUE=$mode rc=$?"
    grep -E "^distill_step|rror|what" "$OUT/distill_$mode.log" | cut -c1-300 | head -6
    grep -E "profile +(teacher|student|backward|adamw)" "$OUT/distill_$mode.log" | tail -4 | cut -c1-250
  done
fi
