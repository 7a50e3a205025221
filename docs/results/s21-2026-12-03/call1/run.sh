#!/usr/bin/env bash
# Session 21, device call 1: the fused batch-1 decode kernel's first run. Its engine test against the eager decode,
# then bench_generate at batch 1 (qwen3_4b and olmo3_7b, L 1024, 64 decode steps, CUDA graphs) with the fused decode
# on (default) and off (HLM_FUSED_DECODE=off), then the whole test_cuda_models suite. Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s21/a2/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
el "fused decode tests"
timeout 150 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaEngineFusedDecode.*' > $OUT/fused_tests.log 2>&1
echo "rc=$?" >> $OUT/fused_tests.log
grep -E "^\[fused decode\]|FAILED|OK \]|rc=|Failure|error|Expected|Which is|step" $OUT/fused_tests.log | head -40
for mode in on off; do
  el "bench fused=$mode"
  HLM_FUSED_DECODE=$mode timeout $(( $(left) > 150 ? 150 : $(left) )) /tmp/hlm/bin/bench_generate \
    --models qwen3_4b,olmo3_7b --contexts 1024 --batches 1 --decode-steps 64 --out $OUT/bench_$mode \
    > $OUT/bench_$mode.log 2>&1
  echo "rc=$?" >> $OUT/bench_$mode.log
  grep -E "^   \||fused decode|rc=|rror" $OUT/bench_$mode.log | head -10
done
el "test_cuda_models (all)"
timeout $(( $(left) - 10 )) /tmp/hlm/bin/test_cuda_models > $OUT/models.log 2>&1; echo "rc=$?" >> $OUT/models.log
grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=' $OUT/models.log | tail -15
el done
