#!/usr/bin/env bash
# Session 25, device call 2 ([perf] #20 item 2): the chunked GDN after this session's two changes, against FLA in the
# same call. Binaries staged by a first call (/tmp/stage/p_aa) + out/stageB/p_ab (bench_cuda_kernels, test_cuda_gdn =
# test_cuda_ops's GDN cases alone, the CUPTI tracer).
#   1. GatedDeltaRuleChunkedCuda.* with the launch rule (small test shapes take split keys), split forced off, on
#   2. bench_cuda_kernels gdn --chunked-only: default (split keys at B2xT4096 and B1xT16384), HLM_GDN_STATE_SPLIT=off,
#      default again (A-B-A); fwd+bwd also with the forward's scratch kept ("keep")
#   3. FLA (peer_probe.py fla) in the same call
#   4. the default traced per kernel
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/stageB/p_ab | tar xJ -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO") HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
L=$OUT/logs; mkdir -p $L
el "1. tests"
for mode in auto off on; do
  if [ $mode = auto ]; then env -u HLM_GDN_STATE_SPLIT timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_$mode.log 2>&1
  else HLM_GDN_STATE_SPLIT=$mode timeout 120 $B/test_cuda_gdn --gtest_filter='GatedDeltaRuleChunkedCuda.*' > $L/test_$mode.log 2>&1; fi
  echo "tests split=$mode rc $?"; grep -E '^\[  FAILED  \]|PASSED' $L/test_$mode.log | head -5
done
el "2. bench A-B-A"
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_a1.log 2>&1; echo "default rc $?"; cat $L/gdn_a1.log
HLM_GDN_STATE_SPLIT=off timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_b.log 2>&1; echo "split off rc $?"; cat $L/gdn_b.log
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_a2.log 2>&1; echo "default rc $?"; cat $L/gdn_a2.log
el "3. FLA"
timeout 200 python3 .anchors/peer_probe.py fla > $L/peer_fla.log 2>&1; echo "rc $?"
grep -E 'fla' $L/peer_fla.log | cut -c1-260
el "4. traced"
HLM_TRACE_GRID=1 HLM_TRACE_OUT=$L/gdn_trace.txt timeout 60 env LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_traced.log 2>&1; echo "rc $?"
sed -n 1,40p $L/gdn_trace.txt | cut -c1-90,180-260
el "5. bench after FLA (default)"
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $L/gdn_a3.log 2>&1; echo "default rc $?"; cat $L/gdn_a3.log
tar cJf $OUT/logs.txz -C $OUT logs && rm -rf $L
el done
