#!/usr/bin/env bash
# lean helper's device call (2026-12-02): the lean CUDA tests, then on the GPU in sequence the 4B bench (adam8,lean),
# the peer, the 1.7B bench (adam8,lean). Host setups of the benches and the peer's imports overlap the tests (gates).
set -u
T0=$(date +%s.%N)
stamp() { awk -v a="$(date +%s.%N)" -v b="$T0" -v n="$1" 'BEGIN{printf "%s %.1f\n", n, a-b}' | tee -a $OUT/r/timeline.txt; }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/lean/bins.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm HLM_EXPERIMENTAL_LEAN_CUDA=1
stamp unpacked
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
G=/tmp/hlm/gates; mkdir -p $G
D="--precision bf16 --rows 8 --micro 2 --seq 1024 --steps 3"
( HLM_BENCH_START_AFTER=$G/b4 HLM_PROFILE_STEP=1 timeout 300 $B/bench_distill_step --shape qwen3-4b --memory-plan adam8,lean $D > $R/distill_4b.log 2>&1; echo "rc $?" >> $R/distill_4b.log ) &
P4=$!
( PEER_GATE=$G/peer SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 timeout 300 python3 .anchors/peer_gate.py > $R/peer.log 2>&1; echo "rc $?" >> $R/peer.log ) &
PP=$!
# 1. Tests (GPU alone). Each lean model test in its own process: a crash does not hide the others.
HLM_MATMUL_LOG_ALGO=1 timeout 60 $B/test_cuda_ops --gtest_filter='AdamWLean*:AdamWLowmem*:MatmulCuda*' > $R/ops.log 2>&1; echo "rc ops $?" | tee -a $R/tests.txt
stamp ops
crashed=""
for t in LeanOptimizerStepEqualsTheCpuStepBitForBit LeanResumesExactlyAndAcrossPlans EveryPlanTracksTheFp32PlanOver300Steps; do
  timeout 90 $B/test_cuda_models --gtest_also_run_disabled_tests --gtest_filter="CudaMemoryPlans.DISABLED_$t" > $R/models_$t.log 2>&1
  rc=$?; echo "rc $t $rc" | tee -a $R/tests.txt
  if [ $rc -ge 128 ] && [ $rc -ne 137 ] && [ -z "$crashed" ]; then crashed=$t; fi
  stamp $t
done
if [ -n "$crashed" ]; then
  timeout 60 cuda-gdb -batch -ex run -ex bt -ex "info proc mappings" --args $B/test_cuda_models --gtest_also_run_disabled_tests --gtest_filter="CudaMemoryPlans.DISABLED_$crashed" > $R/gdb.log 2>&1
  echo "rc gdb $?" | tee -a $R/tests.txt; stamp gdb
fi
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[check\]|matmul algo.*bf16" $R/ops.log $R/models_*.log | head -40
tar czf $OUT/logs.tgz -C $OUT r
# 2. 4B bench (host models built meanwhile), 3. the peer, 4. 1.7B bench.
touch $G/b4; wait $P4; stamp bench4b
free -g > $R/free.txt
tar czf $OUT/logs.tgz -C $OUT r
# the 1.7B host models are built while the peer runs (after the 4B process has given its host memory back)
( HLM_BENCH_START_AFTER=$G/b17 HLM_PROFILE_STEP=1 timeout 200 $B/bench_distill_step --shape qwen3-1.7b --memory-plan adam8,lean $D > $R/distill_1p7b.log 2>&1; echo "rc $?" >> $R/distill_1p7b.log ) &
P17=$!
touch $G/peer; wait $PP; stamp peer
tar czf $OUT/logs.tgz -C $OUT r
touch $G/b17; wait $P17; stamp bench17b
grep -h "distill_step \|^rc\|^setup\|^attach\|memory plan  \|peak device" $R/distill_4b.log $R/distill_1p7b.log
grep -h "hf_distill\|^rc\|waited\|Error" $R/peer.log | tail -5
tar czf $OUT/logs.tgz -C $OUT r
stamp end
