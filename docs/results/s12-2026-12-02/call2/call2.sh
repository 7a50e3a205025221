#!/usr/bin/env bash
# Session 12, call 2 (short): the cuDNN attention engine's first run (test against the CPU references, then the engine
# bench at the [perf] shapes) with torch's SDPA backends timed in the same call (peer_probe.py sdpa), and the 8-bit
# AdamW quantizer change (bit-exact tests, kernel time with the index guess vs the binary search).
set -u
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c2.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
( CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=$R/cudnn_err.log timeout 120 $B/test_cuda_ops --gtest_filter='AttentionCudnn*:AttentionCuda.ForwardBf16:AttentionCuda.BackwardBf16:AdamWLowmem*:AdamWLean*:QkNormRope*' > $R/ops.log 2>&1; echo "rc ops $?" >> $R/ops.log )
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|\[cudnn\]|refused|Failure" $R/ops.log | head -30; tail -2 $R/ops.log
timeout 120 $B/bench_cuda_kernels attn_engines adamw8 > $R/bench.log 2>&1; echo "rc bench $?" >> $R/bench.log
HLM_ADAMW8_SEARCH=binary timeout 60 $B/bench_cuda_kernels adamw8 >> $R/bench.log 2>&1
cat $R/bench.log
PYTHONUNBUFFERED=1 timeout 120 python3 .anchors/peer_probe.py sdpa > $R/peer_sdpa.log 2>&1; echo "rc peer $?" >> $R/peer_sdpa.log
tail -12 $R/peer_sdpa.log
head -c 6000 $R/cudnn_err.log 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT r
