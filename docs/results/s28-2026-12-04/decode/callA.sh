#!/usr/bin/env bash
# Session 28 ([infer] #18), call A: the pipelined batch-1 GEMV (ops/matmul/gemv.cu: two rounds of weight loads in
# flight across column boundaries, a grid of the resident blocks, HLM_GEMV_KERNEL picks the form) and the cluster
# split of the whole-row q/k norm (ops/qk_norm_rope, OLMo's q/k norms at decode).
#   1. the GEMV alone at the decode shapes, each form (bench_cuda_kernels gemv);
#   2. op tests of the two kernels (every GEMV form), the engine tests;
#   3. batch-1 decode, L 1024, 128 steps, graphs, per model and GEMV form.
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:  OUT=$OUT bash .../callA.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
D="$OUT/callA"; mkdir -p "$D"
for f in v1 pipe4 pipe4l2 pipe8l2; do
  timeout 60 env HLM_GEMV_KERNEL=$f "$B/bench_cuda_kernels" gemv > "$D/gemv_$f.log" 2>&1; echo "gemv $f rc $?"
  cat "$D/gemv_$f.log"
done
for f in v1 pipe4l2 pipe8l2; do
  timeout 60 env HLM_GEMV_KERNEL=$f "$B/test_cuda_ops" --gtest_filter='MatmulCuda.Gemv*:QkNormRopeCuda.*' \
    > "$D/ops_$f.log" 2>&1; echo "ops $f rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$D/ops_$f.log"
done
run() {  # label model env...
  local label=$1 m=$2; shift 2
  timeout 100 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out "$D/bg_${m}_$label" > "$D/bg_${m}_$label.log" 2>&1
  echo "$m $label rc $?: $(grep -E "^\| $m " "$D/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
for m in olmo_hybrid_7b olmo3_7b qwen3_4b; do
  for f in pipe4l2 v1 pipe8l2 pipe4; do run $f $m HLM_GEMV_KERNEL=$f; done
done
run pipe4l2_again olmo_hybrid_7b HLM_GEMV_KERNEL=pipe4l2
timeout 240 "$B/test_cuda_models" --gtest_filter='CudaEngine*:CudaBf16*:CudaQwen35*:-*Cli*' \
  > "$D/models.log" 2>&1; echo "models rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|\[fusions\] olmo_hybrid|\[head gemv\]" "$D/models.log" | head -30
