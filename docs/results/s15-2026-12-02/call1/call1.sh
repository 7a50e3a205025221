#!/usr/bin/env bash
# Session 15, call 1 (lead1.txz, binaries built in the lead's worktree): batch-1 decode. Op tests of what changed
# (split merge with staged loads, SwiGLU folded into down_proj's GEMV, GEMV unroll option), engine/model tests, then
# qwen3_4b B1 L1024 A/B runs, one variable at a time, and a trace keyed by launch shape (HLM_TRACE_GRID=1, no PDL).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-330}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead1.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 90 $B/test_cuda_ops --gtest_filter='MatmulCuda.Gemv*:SwigluCuda.*:AttentionCacheCuda*:QkNormRopeCuda.*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/ops.log | head -12
HLM_DECODE_MERGE=fused timeout 40 $B/test_cuda_ops --gtest_filter='AttentionCacheCuda*' > $R/ops_fused.log 2>&1; el "ops fused-merge rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED" $R/ops_fused.log | head -6
timeout 120 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaModelForward*:CudaMamba2*:CudaQwen35*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED" $R/models.log | head -12
pack
run_ab() {  # name, env...
  local n=$1; shift
  [ $(left) -gt 25 ] || { el "skip $n"; return; }
  env "$@" timeout 45 $B/bench_generate --models ${M:-qwen3_4b} --contexts 1024 --batches 1 --decode-steps 32 \
    --cuda-graphs on --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| (qwen|olmo)" $R/$n.log | head -1 | cut -d'|' -f2,7,9,10
}
run_ab new X=1
run_ab noswiglu HLM_GEMV_SWIGLU=off
run_ab unroll8 HLM_GEMV_UNROLL=8
run_ab split32 HLM_DECODE_MIN_SPLIT_KEYS=32
run_ab split128 HLM_DECODE_MIN_SPLIT_KEYS=128
run_ab fusedmerge HLM_DECODE_MERGE=fused
pack
[ $(left) -gt 40 ] && { HLM_PDL=off HLM_TRACE_GRID=1 HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_grid.txt \
  timeout 50 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
  --cuda-graphs on --out $R/t_grid > $R/t_grid.log 2>&1; el "trace rc $?"; sed -n 1,30p $R/trace_grid.txt | cut -c1-150; }
pack
M=olmo_hybrid_7b run_ab olmo_new X=1
pack
el end
