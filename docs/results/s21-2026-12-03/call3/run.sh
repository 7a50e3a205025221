#!/usr/bin/env bash
# Session 21, device call 3: the fused decode with each slot's rows split over all 8 consumer warps (call 2: correct,
# 1.3e-3 worst row error, but slower than the eager decode: qwen3_4b 3.97 vs 3.53 ms). Its engine test, bench_generate
# at batch 1 fused on/off, then ncu of one fused launch (qwen3_4b, L 1024, graphs off). Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s21/c2/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
el "fused decode tests"
timeout 150 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaEngineFusedDecode.*' > $OUT/fused_tests.log 2>&1
echo "rc=$?" >> $OUT/fused_tests.log
grep -E "^\[fused decode\]|FAILED|OK \]|rc=|Failure|Expected|Which is|step" $OUT/fused_tests.log | head -30
for mode in on off; do
  el "bench fused=$mode"
  HLM_FUSED_DECODE=$mode timeout 150 /tmp/hlm/bin/bench_generate \
    --models qwen3_4b,olmo3_7b --contexts 1024 --batches 1 --decode-steps 64 --out $OUT/bench_$mode \
    > $OUT/bench_$mode.log 2>&1
  echo "rc=$?" >> $OUT/bench_$mode.log
  grep -E "^   \||fused decode|rc=|rror" $OUT/bench_$mode.log | head -10
done
el "ncu"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout $(( $(left) - 5 )) $NCU --set full -k regex:fused_decode --launch-skip 2 --launch-count 1 \
  /tmp/hlm/bin/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 6 --cuda-graphs off \
  --out /tmp/ncu_bench > $OUT/ncu.txt 2>&1
echo "rc=$?" >> $OUT/ncu.txt
grep -E "Duration|DRAM Throughput|Memory Throughput|Registers|Achieved Occupancy|Issue Slots|Executed Ipc|Warp Cycles|Stall|rc=" $OUT/ncu.txt | head -40
el done
