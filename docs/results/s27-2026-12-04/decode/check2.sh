#!/usr/bin/env bash
# Session 27 ([infer] #18), second call: the small kernels that follow a GEMV in a decode step (the residual + RMSNorm,
# SwiGLU, the GDN decode preparation, the gated delta rule decode step, the gated RMSNorm) launched as programmatic
# dependents (backend/cuda/dependent_launch.cuh): each waits for its producer at its first instruction and triggers
# its own dependents, so its launch overlaps the kernel before it.
#   1. op tests of every kernel touched; 2. the CUDA model tests that run them (engine, training, forward, graphs);
#   3. batch-1 decode, L 1024, 128 steps, graphs, at the defaults (the first call's figures are the "before").
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:  OUT=$OUT bash .../check2.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
mkdir -p "$OUT/check2"
timeout 120 "$B/test_cuda_ops" \
  --gtest_filter='RmsnormCuda.*:SwigluCuda.*:GatedRmsnormCuda.*:GatedDeltaRuleDecodeCuda.*:GdnDecodePrep*:MatmulCuda.Gemv*' \
  > "$OUT/check2/ops.log" 2>&1; echo "ops rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$OUT/check2/ops.log"
timeout 200 "$B/test_cuda_models" \
  --gtest_filter='CudaEngine*:CudaModelForward*:CudaModelBackward*:CudaTrainStep*:CudaTrainGraphs*:CudaBf16*:CudaQwen35*:-*Cli*' \
  > "$OUT/check2/models.log" 2>&1; echo "models rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|\[fusions\] olmo_hybrid|\[head gemv\]" "$OUT/check2/models.log" | head -30
run() {  # label model env...
  local label=$1 m=$2; shift 2
  timeout 100 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out "$OUT/check2/bg_${m}_$label" > "$OUT/check2/bg_${m}_$label.log" 2>&1
  echo "$m $label rc $?: $(grep -E "^\| $m " "$OUT/check2/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
run default olmo_hybrid_7b HLM_X=1
run default olmo3_7b HLM_X=1
run default qwen3_4b HLM_X=1
run default2 olmo_hybrid_7b HLM_X=1
