#!/usr/bin/env bash
# The [memory] verification call left for the coordinator (2026-12-02): carry ["out/lean", ".anchors"], timeout_s 330,
# `bash out/lean/run2.sh`. GPU in sequence: the lean tests, the 4B lean bench, the peer, the 1.7B lean bench; the host
# setups and the peer's imports overlap the tests (gate files). Logs in $OUT/logs.tgz (re-tarred after each stage).
set -u
T0=$(date +%s.%N)
mkdir -p $OUT/r /tmp/hlm && tar xJf out/lean/bins.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
stamp() { awk -v a="$(date +%s.%N)" -v b="$T0" -v n="$1" 'BEGIN{printf "%s %.1f\n", n, a-b}' | tee -a $R/timeline.txt; }
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm HLM_EXPERIMENTAL_LEAN_CUDA=1
G=/tmp/hlm/gates; mkdir -p $G
D="--memory-plan lean --precision bf16 --rows 8 --micro 2 --seq 1024 --steps 3"
( HLM_BENCH_START_AFTER=$G/b4 HLM_PROFILE_STEP=1 timeout 320 $B/bench_distill_step --shape qwen3-4b $D > $R/distill_4b.log 2>&1; echo "rc $?" >> $R/distill_4b.log ) &
P4=$!
( HLM_BENCH_START_AFTER=$G/b17 HLM_PROFILE_STEP=1 timeout 320 $B/bench_distill_step --shape qwen3-1.7b $D > $R/distill_1p7b.log 2>&1; echo "rc $?" >> $R/distill_1p7b.log ) &
P17=$!
( PEER_GATE=$G/peer SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 timeout 320 python3 .anchors/peer_gate.py > $R/peer.log 2>&1; echo "rc $?" >> $R/peer.log ) &
PP=$!
stamp start
timeout 40 $B/test_cuda_ops --gtest_filter='AdamWLean*:AdamWLowmem*:MatmulCuda*' > $R/ops.log 2>&1; echo "rc ops $?" | tee -a $R/tests.txt
timeout 90 $B/test_cuda_models --gtest_filter='CudaMemoryPlans.*' > $R/models.log 2>&1; echo "rc models $?" | tee -a $R/tests.txt
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[check\]" $R/ops.log $R/models.log | grep -v "matmul\.\(fwd\|bwd\)" | head -30
stamp tests; tar czf $OUT/logs.tgz -C $OUT r
touch $G/b4; wait $P4; stamp bench4b; tar czf $OUT/logs.tgz -C $OUT r
touch $G/peer; wait $PP; stamp peer; tar czf $OUT/logs.tgz -C $OUT r
touch $G/b17; wait $P17; stamp bench17b; tar czf $OUT/logs.tgz -C $OUT r
grep -h "distill_step \|^rc\|^attach\|adamw" $R/distill_4b.log $R/distill_1p7b.log | tail -12
grep -h "hf_distill\|^rc\|waited" $R/peer.log | tail -4
