#!/usr/bin/env bash
# Session 15, call 3 (lead3.txz): SwiGLU fold removed (call 2: +0.35 ms per step); GEMV warps per column capped at
# one wave of resident warps; the cluster split merge with a diagnostic when it cannot run. Op and engine tests, then
# interleaved A/B runs of qwen3_4b B1 L1024 with 128 decode steps, a trace, olmo_hybrid_7b.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-300}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead3.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
HLM_DECODE_MERGE=cluster timeout 90 $B/test_cuda_ops --gtest_filter='MatmulCuda.*:AttentionCacheCuda*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|attention_cache:" $R/ops.log | sort | uniq -c | head -12
HLM_DECODE_MERGE=cluster timeout 120 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaModelForward*:CudaMamba2*:CudaQwen35*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|attention_cache:" $R/models.log | sort | uniq -c | head -12
pack
run_ab() {  # name, env...
  local n=$1; shift
  [ $(left) -gt 25 ] || { el "skip $n"; return; }
  env "$@" timeout 45 $B/bench_generate --models ${M:-qwen3_4b} --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| (qwen|olmo)|attention_cache:" $R/$n.log | head -2 | cut -d'|' -f2,7,9,10
}
run_ab warm X=1
run_ab new1 HLM_DECODE_MERGE=cluster
run_ab old1 HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=kernel
run_ab ks1 HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=cluster
run_ab kmerge HLM_DECODE_MERGE=kernel
run_ab split8 HLM_DECODE_MERGE=cluster HLM_DECODE_MIN_SPLIT_KEYS=128
run_ab new2 HLM_DECODE_MERGE=cluster
run_ab old2 HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=kernel
pack
[ $(left) -gt 40 ] && { HLM_DECODE_MERGE=cluster HLM_PDL=off HLM_TRACE_GRID=1 HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_grid.txt \
  timeout 50 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
  --cuda-graphs on --out $R/t_grid > $R/t_grid.log 2>&1; el "trace rc $?"; sed -n 9,22p $R/trace_grid.txt | awk '{print $1,$3,$4,substr($5,1,60),$NF}'; }
pack
M=olmo_hybrid_7b run_ab olmo_new HLM_DECODE_MERGE=cluster
M=olmo_hybrid_7b run_ab olmo_old HLM_GEMV_KSPLIT=1 HLM_DECODE_MERGE=kernel
pack
el end
