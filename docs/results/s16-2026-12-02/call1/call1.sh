#!/usr/bin/env bash
# Session 16, call 1 (lead16a.txz, built from /work/lead = 0f680f8 + the L2 prefetch): batch-1 decode with the next
# weights warmed in L2 during each layer's attention/recurrent kernels (HLM_L2_PREFETCH_MB / --l2-prefetch-mb).
# Tests (bit-identity of the prefetch, the GEMV), the SASS of the prefetch kernel, then interleaved A/B runs in ONE
# process per model (same weights): qwen3_4b and olmo_hybrid_7b, B1 L1024, 128 decode steps, graphs on; traces.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-420}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead16a.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 60 $B/test_cuda_models --gtest_filter='CudaEngineFusions.*' > $R/fusions.log 2>&1; el "fusions rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[l2-prefetch\]" $R/fusions.log | head -14
cuobjdump -sass $B/test_cuda_models 2>/dev/null | grep -A12 "Function.*l2_prefetch" | head -14

pack
ab() {  # name model prefetch-list
  [ $(left) -gt 40 ] || { el "skip $1"; return; }
  timeout 100 $B/bench_generate --models $2 --contexts 1024 --batches 1 --decode-steps 128 --cuda-graphs on \
    --l2-prefetch-mb $3 --out $R/$1 > $R/$1.log 2>&1; el "$1 rc $?"
  grep -hE "^\| (qwen|olmo)" $R/$1.log | cut -d'|' -f2,3,9,10
}
ab qwen qwen3_4b 0,16,32,48,0,16,32,48,0,24,40
pack
ab olmo olmo_hybrid_7b 0,16,32,48,0,16,32,48
pack
trace() {  # name mb
  [ $(left) -gt 45 ] || { el "skip trace $1"; return; }
  HLM_L2_PREFETCH_MB=$2 HLM_TRACE_GRID=1 HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/$1.txt \
    timeout 60 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
    --cuda-graphs on --out $R/t_$1 > $R/t_$1.log 2>&1; el "trace $1 rc $?"
  sed -n 2,7p $R/$1.txt; sed -n 9,16p $R/$1.txt | awk '{print $1,$3,$4,substr($5,1,50),$NF}'
}
trace tr0 0
trace tr32 32
pack
el end
