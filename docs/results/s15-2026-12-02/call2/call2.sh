#!/usr/bin/env bash
# Session 15, call 2 (lead2.txz): batch-1 decode with (a) GEMV warps per column chosen by shape (HLM_GEMV_KSPLIT=1:
# one warp per column as before), (b) the flash-decoding split merge inside thread-block clusters
# (HLM_DECODE_MERGE=kernel: the separate merge kernel), (c) SwiGLU folded into down_proj's GEMV (HLM_GEMV_SWIGLU=off).
# Op tests of every changed kernel, engine/model tests (incl. the merges bit for bit), interleaved A/B runs, a trace.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-330}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead2.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 100 $B/test_cuda_ops --gtest_filter='MatmulCuda.*:SwigluCuda.*:AttentionCacheCuda*:QkNormRopeCuda.*:RmsnormCuda.*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/ops.log | head -12
timeout 150 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaModelForward*:CudaMamba2*:CudaQwen35*:CudaMoe*:CudaGenerate*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[fusions\]" $R/models.log | head -20
pack
run_ab() {  # name, env...
  local n=$1; shift
  [ $(left) -gt 25 ] || { el "skip $n"; return; }
  env "$@" timeout 45 $B/bench_generate --models ${M:-qwen3_4b} --contexts 1024 --batches 1 --decode-steps 64 \
    --cuda-graphs on --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| (qwen|olmo)" $R/$n.log | head -1 | cut -d'|' -f2,7,9,10
}
run_ab warm X=1
run_ab new1 X=1
run_ab ks1 HLM_GEMV_KSPLIT=1
run_ab kmerge HLM_DECODE_MERGE=kernel
run_ab new2 X=1
run_ab noswi HLM_GEMV_SWIGLU=off
run_ab old3 HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=kernel HLM_GEMV_SWIGLU=off
run_ab new3 X=1
pack
[ $(left) -gt 40 ] && { HLM_PDL=off HLM_TRACE_GRID=1 HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_grid.txt \
  timeout 50 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
  --cuda-graphs on --out $R/t_grid > $R/t_grid.log 2>&1; el "trace rc $?"; sed -n 9,22p $R/trace_grid.txt | awk '{print $1,$3,$4,$NF}'; }
pack
M=olmo_hybrid_7b run_ab olmo_new X=1
M=olmo_hybrid_7b run_ab olmo_old HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=kernel HLM_GEMV_SWIGLU=off
pack
el end
