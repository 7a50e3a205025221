#!/usr/bin/env bash
# Session 27 ([infer] #18): this session's decode changes on the H200 — the fused GDN decode preparation
# (ops/gdn_decode_prep, HLM_GDN_DECODE_FUSE) and the batch-1 LM head on the small-row GEMV (HLM_HEAD_GEMV):
#   1. op tests: the fused launch against the six it replaces, bit for bit, and the ops it shares code with;
#   2. engine tests: every CudaEngine test (the fusions test compares all fused paths with the separate ones bit for
#      bit; the head-GEMV test bounds its logits against cuBLASLt's);
#   3. batch-1 decode, L 1024, 128 steps, graphs: each model with the defaults and with each change off, one process
#      per row (the 7B models: Table 8's shapes).
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:
#   OUT=$OUT bash docs/results/s27-2026-12-04/decode/check.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
CUDNN=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], 'lib'))" 2>/dev/null)
[ -n "$CUDNN" ] && export HLM_CUDNN_LIB=$(ls "$CUDNN"/libcudnn.so* 2>/dev/null | head -1)
mkdir -p "$OUT/check"
timeout 120 "$B/test_cuda_ops" --gtest_filter='GdnDecodePrep*:CausalConv1dCuda.*:GdnGateCuda.*:L2norm*:MatmulCuda.Gemv*' \
  > "$OUT/check/ops.log" 2>&1; echo "ops rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$OUT/check/ops.log"
timeout 240 "$B/test_cuda_models" --gtest_filter='CudaEngine*:-*Cli*' > "$OUT/check/engine.log" 2>&1; echo "engine rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|\[fusions\]|\[head gemv\]" "$OUT/check/engine.log" | head -40
run() {  # label model env...
  local label=$1 m=$2; shift 2
  timeout 100 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out "$OUT/check/bg_${m}_$label" > "$OUT/check/bg_${m}_$label.log" 2>&1
  echo "$m $label rc $?: $(grep -E "^\| $m " "$OUT/check/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
for m in olmo_hybrid_7b olmo3_7b qwen3_4b; do
  run default "$m" HLM_X=1
  run head_off "$m" HLM_HEAD_GEMV=off
  [ "$m" = olmo_hybrid_7b ] && run prep_off "$m" HLM_GDN_DECODE_FUSE=off
  [ "$m" = olmo_hybrid_7b ] && run both_off "$m" HLM_GDN_DECODE_FUSE=off HLM_HEAD_GEMV=off
  run default2 "$m" HLM_X=1
done
