#!/usr/bin/env bash
# Session 15, call 4, one set of binaries (lead4.txz, the lead's worktree at bef37a8 + the attention-cache diff):
# (1) the cudnntune helper's follow-up (the commands of its run2.sh: Attention* op tests incl.
# EveryPlanPassesTheReferences with the output screen, and bench attn_engines); (2) the lead's changes (GEMV back to session 13's kernel; staged split merge; the split merge inside thread-block clusters):
# op/engine tests, then cluster vs separate merge kernel at L 896 + 128 decode steps (max context 1024: 16 splits,
# the cluster path's limit), interleaved, and qwen3_4b at the defaults, L 1024.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-240}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r
mkdir -p /tmp/hlm && tar xJf out/coord/lead4.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r C=$OUT/cudnntune
mkdir -p $C
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r cudnntune; }
pack
HLM_DECODE_MERGE=cluster timeout 60 $B/test_cuda_ops --gtest_filter='AttentionCacheCuda*:MatmulCuda.Gemv*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|attention_cache:" $R/ops.log | sort | uniq -c | head
timeout 90 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaModelForward*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|attention_cache:" $R/models.log | sort | uniq -c | head
pack
run_ab() {  # name, context, env...
  local n=$1 L=$2; shift 2
  [ $(left) -gt 20 ] || { el "skip $n"; return; }
  env "$@" timeout 40 $B/bench_generate --models qwen3_4b --contexts $L --batches 1 --decode-steps 128 \
    --cuda-graphs on --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| qwen|attention_cache:" $R/$n.log | head -1 | cut -d'|' -f2,5,7,9,10
}
run_ab c1 896 HLM_DECODE_MERGE=cluster
run_ab k1 896 HLM_DECODE_MERGE=kernel
run_ab c2 896 HLM_DECODE_MERGE=cluster
run_ab k2 896 HLM_DECODE_MERGE=kernel
run_ab def1024 1024 X=1
pack
HLM_CUDNN_PLAN_VERBOSE=1 timeout 100 $B/test_cuda_ops --gtest_filter='Attention*' > $C/ops.log 2>&1; el "cudnn ops rc $?"
grep -E "^\[ +(FAILED|PASSED) |screened" $C/ops.log | head -20
HLM_CUDNN_PLAN_VERBOSE=1 timeout 90 $B/bench_cuda_kernels attn_engines > $C/bench.log 2> $C/bench_plans.log; el "cudnn bench rc $?"
tail -20 $C/bench.log
pack
el end
