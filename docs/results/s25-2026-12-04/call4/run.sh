#!/usr/bin/env bash
# Session 25, device call 4 ([perf] #20 item 2): the reverse pass with 8 warps when it has two chunk buffers (one block
# per SM: B2xT4096, B1xT16384 and the small test shapes), on top of main's 35fcc7d. Binaries staged in three parts
# (/tmp/stage/p_aa, p_ab by two staging calls; out/stageC/p_ac carried with .anchors).
#   1. GatedDeltaRuleChunkedCuda.* (the launch rule; split keys off), test_cuda_models (hybridlm not carried: the
#      tests that exec it are filtered out)
#   2. bench_cuda_kernels gdn --chunked-only, FLA (peer_probe.py fla), bench again; the bench traced per kernel
#   3. ncu of dstate at B2xT4096 and B1xT16384
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_a? out/stageC/p_a? | tar xJ -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO") HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
L=$OUT/logs; mkdir -p $L
el "1. tests"
timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_auto.log 2>&1
echo "tests rc $?"; grep -E '^\[  FAILED  \]|PASSED' $L/test_auto.log | head -5
HLM_GDN_STATE_SPLIT=off timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_off.log 2>&1
echo "tests split=off rc $?"; grep -E '^\[  FAILED  \]|PASSED' $L/test_off.log | head -5
timeout 300 $B/test_cuda_models --gtest_filter='-*Cli*:*DistillCommandRunsOnTheGpu*:*DeviceErrorsAreInputErrors*' > $L/test_models.log 2>&1
echo "test_cuda_models rc $?"; grep -E '^\[  FAILED  \]|PASSED' $L/test_models.log | head -12
el "2. bench, FLA, bench, traced"
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_1.log 2>&1; echo "rc $?"; cat $L/gdn_1.log
timeout 200 python3 .anchors/peer_probe.py fla > $L/peer_fla.log 2>&1; echo "rc $?"; grep -E 'fla_chunk' $L/peer_fla.log | cut -c1-200
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_2.log 2>&1; echo "rc $?"; cat $L/gdn_2.log
HLM_TRACE_GRID=1 HLM_TRACE_OUT=$L/gdn_trace.txt timeout 60 env LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_traced.log 2>&1; echo "traced rc $?"
grep -E "dstate|state_v2" $L/gdn_trace.txt | awk '{print $4, $3, $NF}' | head -8
el "3. ncu"
ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
secs=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats)
for shp in 2x4096 1x16384; do
  timeout 60 "$ncu_" --clock-control none "${secs[@]}" -k "regex:dstate" --launch-count 1 \
    $B/bench_cuda_kernels gdn --chunked-only --shapes $shp > $L/ncu_${shp}_dstate.txt 2>&1; echo "ncu $shp rc $?"
  grep -E "^  [a-zA-Z_].*\(|Duration|Issue Slots Busy|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued" $L/ncu_${shp}_dstate.txt | cut -c1-130 | head -8
done
tar cJf $OUT/logs.txz -C $OUT logs && rm -rf $L
el done
