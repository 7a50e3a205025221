#!/usr/bin/env bash
# Session 16, call 2 (lead16b.txz: /work/lead = 0f680f8 + blocks of 4 warps for narrow batch-1 GEMVs): the GEMV op
# test (4 vs 8 warps bit-identical + the fp32 dot rule), then interleaved A/B in one process per model
# (--gemv-warps 0 = by shape (4 for o/down of qwen3_4b), 8 = the old blocks), B1 L1024, 128 decode steps, graphs on.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead16b.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
B=/tmp/hlm/bin R=$OUT/r
timeout 60 $B/test_cuda_ops --gtest_filter='MatmulCuda.Gemv*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|warps per block" $R/ops.log | head -6
for m in qwen3_4b olmo_hybrid_7b; do
  timeout 100 $B/bench_generate --models $m --contexts 1024 --batches 1 --decode-steps 128 --cuda-graphs on \
    --gemv-warps 8,0,8,0,8,0 --out $R/$m > $R/$m.log 2>&1; el "$m rc $?"
  grep -hE "^\| (qwen|olmo)" $R/$m.log | cut -d'|' -f2,3,9,10
done
tar czf $OUT/logs.tgz -C $OUT r
el end
