#!/usr/bin/env bash
# Session 21, device call 5: where the fused decode loses time. Call 4's timeline (olmo3_7b): barriers ~1 us, but the
# weight phases stream at ~40 % of the bandwidth and attention takes 36 us per layer. Here: its engine test (block
# ids now preloaded per attention unit), then bench_generate batch 1 (qwen3_4b, olmo3_7b; L 1024; 64 steps) with
# 1 or 4 bulk copies per ring slot, each with the products computed and skipped (HLM_FUSED_DECODE_SKIP=1: the
# weight stream alone), then ncu of one launch. Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s21/e_p_ab/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
el "fused decode tests"
timeout 150 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaEngineFusedDecode.*' > $OUT/fused_tests.log 2>&1
echo "rc=$?" >> $OUT/fused_tests.log
grep -E "^\[fused decode\]|FAILED|OK \]|rc=|Failure|Expected|Which is" $OUT/fused_tests.log | head -30
for v in "1 0" "4 0" "1 1" "4 1"; do
  set -- $v
  el "bench pieces=$1 skip=$2"
  HLM_FUSED_DECODE=on HLM_FUSED_DECODE_PIECES=$1 HLM_FUSED_DECODE_SKIP=$2 timeout 100 /tmp/hlm/bin/bench_generate \
    --models qwen3_4b,olmo3_7b --contexts 1024 --batches 1 --decode-steps 64 --out $OUT/bench_p$1_s$2 \
    > $OUT/bench_p$1_s$2.log 2>&1
  echo "rc=$?" >> $OUT/bench_p$1_s$2.log
  grep -E "^   \||rc=|rror" $OUT/bench_p$1_s$2.log | head -4
done
el "ncu"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
HLM_FUSED_DECODE=on timeout $(( $(left) - 5 )) $NCU --set full -k regex:fused_decode --launch-skip 2 --launch-count 1 \
  /tmp/hlm/bin/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 6 --cuda-graphs off \
  --out /tmp/ncu_bench > $OUT/ncu.txt 2>&1
echo "rc=$?" >> $OUT/ncu.txt
grep -E "Duration|DRAM Throughput|Executed Ipc A|Issue Slots|Warp Cycles Per Issued|Spilling Req|rc=" $OUT/ncu.txt | head -20
el done
