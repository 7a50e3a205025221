#!/usr/bin/env bash
# Session 15, helper cudnntune, ONE device call (H200): the cuDNN attention engine's plan choice (HLM_CUDNN_PLAN first
# vs timed) at the [perf] shapes, torch's SDPA backends in the same call (peer_probe.py sdpa), then the attention op
# suite (Attention*) under the default plan choice (timed) and the every-candidate test. Run from the repo root with
# out/coord/cudnntune carried (bins.txz from tools/device/pack_binaries.sh, a copy of .anchors/peer_probe.py).
set -u
T0=$SECONDS BUDGET=285
left() { echo $((BUDGET - (SECONDS - T0))); }
R=$OUT/r; mkdir -p $R /tmp/hlm && tar xJf out/coord/cudnntune/bins.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt 2>&1
echo "== bench ($(left) s left)"
HLM_CUDNN_PLAN_VERBOSE=1 timeout 100 $B/bench_cuda_kernels attn_engines > $R/bench.log 2> $R/bench_plans.log
echo "rc bench $?" >> $R/bench.log; cat $R/bench.log; cat $R/bench_plans.log
echo "== peer ($(left) s left)"
PYTHONUNBUFFERED=1 timeout 60 python3 out/coord/cudnntune/peer_probe.py sdpa > $R/peer_sdpa.log 2>&1
echo "rc peer $?" >> $R/peer_sdpa.log; grep -v Warning $R/peer_sdpa.log | grep -v "return F.scaled" | cut -c1-230
echo "== ops ($(left) s left)"
t=$(left); [ $t -gt 100 ] && t=100
HLM_CUDNN_PLAN_VERBOSE=1 timeout $t $B/test_cuda_ops --gtest_filter='Attention*:-AttentionCudnn.EveryPlanPassesTheReferences' > $R/ops.log 2>&1
echo "rc ops $?" >> $R/ops.log; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |^rc |Failure" $R/ops.log | head -40
echo "== every plan ($(left) s left)"
t=$(( $(left) - 45 )); [ $t -gt 120 ] && t=120
if [ $t -gt 10 ]; then
  timeout $t $B/test_cuda_ops --gtest_filter='AttentionCudnn.EveryPlanPassesTheReferences' > $R/ops_every.log 2>&1
  echo "rc every $?" >> $R/ops_every.log; grep -E "^\[ +(OK|FAILED|PASSED) |^rc |Failure|timed fwd|did not run" $R/ops_every.log | head -30
fi
echo "== bench again, a second process: is the timed choice the same? ($(left) s left)"
t=$(( $(left) - 5 )); [ $t -gt 60 ] && t=60
[ $t -gt 20 ] && { HLM_CUDNN_PLAN_VERBOSE=1 timeout $t $B/bench_cuda_kernels attn_engines > $R/bench2.log 2> $R/bench2_plans.log; echo "rc bench2 $?" >> $R/bench2.log; cat $R/bench2.log; }
echo "== done in $((SECONDS - T0)) s"
