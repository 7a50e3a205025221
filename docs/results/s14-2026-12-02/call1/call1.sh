#!/usr/bin/env bash
# Session 14, call 1 (binaries of the lead's worktree; lead1.txz). In order, each stage skipped when the budget is short:
#   1. op tests of every kernel the change touches (GEMV batch-1 kernel + SwiGLU input, kernels now launched as
#      programmatic dependents) and the engine/model tests (decode parity, graphs, training forward with the norms);
#   2. batch-1 decode A/B (L 1024, bf16, graphs): default (batch-1 GEMV kernel + SwiGLU folded + dependent launches of
#      norms/attention/GDN decode kernels) vs HLM_GEMV_KERNEL=rows (the session-13 GEMV, SwiGLU separate) vs
#      HLM_PDL=off; qwen3_4b, olmo_hybrid_7b, qwen3_4b_hybrid;
#   3. a kernel trace of the default qwen3_4b batch-1 step (per-kernel times);
#   4. [infer] 5(b): the hybrid's longest prefill within 48 GiB (the search with session 13's fixed prediction).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-570}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead1.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 150 $B/test_cuda_ops --gtest_filter='MatmulCuda.*:RmsnormCuda.*:QkNormRopeCuda.*:AttentionCache*:SwigluCuda.*:CausalConv1d*:L2norm*:GdnGate*:GatedDeltaRule*:GatedRmsnorm*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/ops.log | head -20
timeout 200 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaQwen35*:CudaModelForward*:CudaMoe*:CudaTrain*:CudaGenerate*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/models.log | head -20
pack
run_ab() {  # name, model, env...
  local n=$1 m=$2; shift 2
  [ $(left) -gt 40 ] || { el "skip $n"; return; }
  env "$@" timeout 80 $B/bench_generate --models $m --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on \
    --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| (qwen|olmo)" $R/$n.log | head -1 | cut -c1-150
}
run_ab q_new qwen3_4b
run_ab q_rows qwen3_4b HLM_GEMV_KERNEL=rows
run_ab q_nopdl qwen3_4b HLM_PDL=off
run_ab q_new2 qwen3_4b
run_ab o_new olmo_hybrid_7b
run_ab o_rows olmo_hybrid_7b HLM_GEMV_KERNEL=rows
run_ab h_new qwen3_4b_hybrid
pack
if [ $(left) -gt 200 ] && [ -f $TR ]; then
  HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_b1.txt HLM_TRACE_TSV=$R/trace_b1.tsv \
    timeout 60 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 64 \
    --cuda-graphs on --out $R/b1t > $R/b1t.log 2>&1; el "b1 traced rc $?"; sed -n 1,40p $R/trace_b1.txt | cut -c1-150
fi
pack
LIM=$(( $(left) - 10 ))
if [ $LIM -gt 200 ]; then
  timeout $LIM $B/bench_generate --search-context --models qwen3_4b_hybrid --memory-caps 48G --prefill-chunk 8192 \
    --search-time-limit $(( LIM - 60 )) --out $R/search48 > $R/search48.log 2>&1; el "search48 rc $?"
  tail -12 $R/search48.log | cut -c1-220; cat $R/search48/*.md 2>/dev/null | head -12
fi
pack
el end
