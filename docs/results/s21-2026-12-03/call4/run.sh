#!/usr/bin/env bash
# Session 21, device call 4 (binaries of 13f8c98): the fused decode with tensor-core row dots (its engine test,
# bench_generate batch 1 fused on with the per-block phase timeline, then off), and the helper's causal conv1d
# kernels (#20/#28: CausalConv1dCuda tests, bench_cuda_kernels conv), then test_cuda_ops whole. Stops at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s21/d_p_ab/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
el "fused decode tests"
timeout 150 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaEngineFusedDecode.*' > $OUT/fused_tests.log 2>&1
echo "rc=$?" >> $OUT/fused_tests.log
grep -E "^\[fused decode\]|FAILED|OK \]|rc=|Failure|Expected|Which is" $OUT/fused_tests.log | head -30
for m in qwen3_4b olmo3_7b; do
  el "bench $m fused on (timeline)"
  HLM_FUSED_DECODE=on HLM_FUSED_DECODE_TIMELINE=$OUT/timeline_$m.csv timeout 120 /tmp/hlm/bin/bench_generate \
    --models $m --contexts 1024 --batches 1 --decode-steps 64 --out $OUT/bench_on_$m > $OUT/bench_on_$m.log 2>&1
  echo "rc=$?" >> $OUT/bench_on_$m.log
  grep -E "^   \||fused decode|rc=|rror" $OUT/bench_on_$m.log | head -4
done
el "bench fused off"
HLM_FUSED_DECODE=off timeout 120 /tmp/hlm/bin/bench_generate --models qwen3_4b,olmo3_7b --contexts 1024 --batches 1 \
  --decode-steps 64 --out $OUT/bench_off > $OUT/bench_off.log 2>&1
echo "rc=$?" >> $OUT/bench_off.log
grep -E "^   \||rc=|rror" $OUT/bench_off.log | head -6
el "conv tests + bench"
timeout 120 /tmp/hlm/bin/test_cuda_ops --gtest_filter='CausalConv1dCuda.*' > $OUT/conv_tests.log 2>&1
echo "rc=$?" >> $OUT/conv_tests.log
grep -E "OK \]|FAILED|rc=|mismatch|\[check\]" $OUT/conv_tests.log | head -20
timeout 120 /tmp/hlm/bin/bench_cuda_kernels conv > $OUT/conv_bench.log 2>&1; echo "rc=$?" >> $OUT/conv_bench.log
grep -E "conv|rc=" $OUT/conv_bench.log | head -12
el "test_cuda_ops (all)"
timeout $(( $(left) - 5 )) /tmp/hlm/bin/test_cuda_ops > $OUT/ops.log 2>&1; echo "rc=$?" >> $OUT/ops.log
grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=' $OUT/ops.log | tail -8
el done
