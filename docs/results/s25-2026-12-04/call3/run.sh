#!/usr/bin/env bash
# Session 25, device call 3 ([perf] #20 items 2 and 5): the final GDN kernels (split keys only where the row strips
# are ≤ 2 per SM; the reverse pass's one-buffer rule now cut at one block per SM), binaries staged in parts
# (/tmp/stage/p_a?, the last part in out/stageC):
#   1. GatedDeltaRuleChunkedCuda.* with the launch rule, split forced off, on; test_cuda_models (hybridlm not carried:
#      the tests that exec it are filtered out)
#   2. bench_cuda_kernels gdn --chunked-only twice around FLA (peer_probe.py fla) in the same call
#   3. ncu of one launch of each v2 kernel (prep, state, output; du_local, dstate, dqk, wy) at B2xT4096 and of the
#      state and reverse passes at B1xT16384
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_a? out/stageC/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
L=$OUT/logs; mkdir -p $L
el "1. tests"
for mode in auto off on; do
  if [ $mode = auto ]; then env -u HLM_GDN_STATE_SPLIT timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_$mode.log 2>&1
  else HLM_GDN_STATE_SPLIT=$mode timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_$mode.log 2>&1; fi
  echo "tests split=$mode rc $?"; grep -E '^\[  FAILED  \]|PASSED' $L/test_$mode.log | head -5
done
timeout 300 $B/test_cuda_models --gtest_filter='-*Cli*:*DistillCommandRunsOnTheGpu*:*DeviceErrorsAreInputErrors*' > $L/test_models.log 2>&1
echo "test_cuda_models rc $?"; grep -E '^\[  FAILED  \]|PASSED|tests ran' $L/test_models.log | head -12
el "2. bench, FLA, bench"
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_1.log 2>&1; echo "rc $?"; cat $L/gdn_1.log
timeout 200 python3 .anchors/peer_probe.py fla > $L/peer_fla.log 2>&1; echo "rc $?"; grep -E 'fla_chunk' $L/peer_fla.log | cut -c1-200
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_2.log 2>&1; echo "rc $?"; cat $L/gdn_2.log
el "3. ncu"
ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
secs=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis)
for k in prep_v2 state_v2 output_v2 du_local dstate dqk wy_kernel; do
  timeout 60 "$ncu_" --clock-control none "${secs[@]}" -k "regex:$k" --launch-count 1 \
    $B/bench_cuda_kernels gdn --chunked-only --shapes 2x4096 > $L/ncu_2x4096_$k.txt 2>&1; echo "ncu $k rc $?"
done
for k in state_v2 dstate; do
  timeout 60 "$ncu_" --clock-control none "${secs[@]}" -k "regex:$k" --launch-count 1 \
    $B/bench_cuda_kernels gdn --chunked-only --shapes 1x16384 > $L/ncu_1x16384_$k.txt 2>&1; echo "ncu $k rc $?"
done
for f in $L/ncu_*.txt; do
  echo "== $(basename $f)"
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued|Eligible Warps" $f | cut -c1-130 | head -14
done
tar cJf $OUT/logs.txz -C $OUT logs && rm -rf $L
el done
