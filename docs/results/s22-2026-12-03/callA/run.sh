#!/usr/bin/env bash
# Session 22, device call A (binaries of 44905da + the fused decode's attention rework, uncommitted at the time:
# step constants and block ids once per launch, keys prefetched into L1 before the heads are prepared, one-latency
# head preparation with a shuffle RoPE). Binaries staged by two calls into /tmp/stage (p_aa, p_ab).
#   1. CudaEngineFusedDecode.* (the fused decode against the eager decode)
#   2. the fused decode's knobs beside the eager decode (tools/device/fused_decode_sweep.sh; batch 1, L 1024)
#   3. its phase timeline with FMA dots (qwen3_4b)
#   4. the 8-bit AdamW rework: tests, bench three ways, ncu (tools/device/adamw8_check.sh)
#   5. the glue changes' tests (tools/device/distill_glue_check.sh tests)
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/hybridlm ] || cat /tmp/stage/p_aa /tmp/stage/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
el fused decode tests
timeout 120 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaEngineFusedDecode.*' > $OUT/fused_test.log 2>&1
echo "rc=$?" >> $OUT/fused_test.log
grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=|worst' $OUT/fused_test.log | tail -12
el sweep qwen3_4b
OUT=$OUT/sweep BIN=/tmp/hlm/bin bash tools/device/fused_decode_sweep.sh qwen3_4b eager default DOTS=fma \
  DOTS=fma,PREFETCH_KB=128 DOTS=fma,PREFETCH_KB=256 DOTS=fma,PREFETCH_KB=512 SKIP=1
el sweep olmo3_7b
OUT=$OUT/sweep7 BIN=/tmp/hlm/bin bash tools/device/fused_decode_sweep.sh olmo3_7b eager DOTS=fma DOTS=fma,PREFETCH_KB=256
el timeline
HLM_FUSED_DECODE=on HLM_FUSED_DECODE_DOTS=fma HLM_FUSED_DECODE_TIMELINE=$OUT/timeline_fma_qwen3_4b.csv timeout 60 \
  /tmp/hlm/bin/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 8 --out /tmp/b_tl \
  > $OUT/bench_timeline.log 2>&1; echo "rc=$?" >> $OUT/bench_timeline.log; tail -2 $OUT/bench_timeline.log
python3 tools/profile/fused_decode_timeline.py $OUT/timeline_fma_qwen3_4b.csv 2>&1 | head -14
xz -9 $OUT/timeline_fma_qwen3_4b.csv
el adamw8
OUT=$OUT/adamw8 BIN=/tmp/hlm/bin timeout 150 bash tools/device/adamw8_check.sh
el glue tests
OUT=$OUT/glue BIN=/tmp/hlm/bin timeout 200 bash tools/device/distill_glue_check.sh tests
el done
