#!/usr/bin/env bash
# Session 23, device call A (binaries of this session's first commit, staged in /tmp/stage by a first call):
#   1. the bf16-dW entry points (AdamWLeanCuda.*: the epilogue form, and the new refusal of a missing scratch)
#   2. the chunked GDN kernels' baseline (bench_cuda_kernels gdn) and FLA in the same call (peer_probe.py fla)
#   3. ncu of one launch of each chunked GDN kernel at B8xT1024 (for the two GDN helpers: /work/coord/s23_callA)
#   4. the fused decode's per-unit attention timeline (#18; marks m10-m13 of d9502fb, first run)
#   5. the NIAH learning-rate probe for full attention (#21; docs/results/s23-2026-12-03/niah_lr/probe.sh), last
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/hybridlm ] || cat /tmp/stage/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
B=/tmp/hlm/bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
el "1. lean tests"
timeout 90 $B/test_cuda_ops --gtest_filter='AdamWLeanCuda.*' > $OUT/lean_tests.log 2>&1; echo "rc=$?" >> $OUT/lean_tests.log
grep -E '^\[  FAILED  \]|^\[       OK \]|PASSED|^rc=' $OUT/lean_tests.log | tail -8
el "2. gdn bench"
timeout 120 $B/bench_cuda_kernels gdn > $OUT/bench_gdn.log 2>&1; echo "rc=$?" >> $OUT/bench_gdn.log; cat $OUT/bench_gdn.log
el "2b. FLA"
timeout 150 python3 .anchors/peer_probe.py fla > $OUT/peer_fla.log 2>&1; echo "rc=$?" >> $OUT/peer_fla.log
grep -E 'fla_|rc=' $OUT/peer_fla.log | cut -c1-300
el "3. ncu"
ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
secs=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats)
{ timeout 100 "$ncu_" --clock-control none "${secs[@]}" -k 'regex:^(prep|state|output)_kernel' --launch-count 3 \
    $B/bench_cuda_kernels gdn
  timeout 100 "$ncu_" --clock-control none "${secs[@]}" -k 'regex:^(du_local|dstate|dqk|wy)_kernel' --launch-count 4 \
    $B/bench_cuda_kernels gdn; } > $OUT/ncu_gdn.txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Dynamic Shared" $OUT/ncu_gdn.txt | head -70
el "4. fused decode timeline"
HLM_FUSED_DECODE=on HLM_FUSED_DECODE_DOTS=fma HLM_FUSED_DECODE_TIMELINE=$OUT/timeline_fma_qwen3_4b.csv timeout 60 \
  $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 8 --out /tmp/b_tl \
  > $OUT/bench_timeline.log 2>&1; echo "rc=$?" >> $OUT/bench_timeline.log; tail -2 $OUT/bench_timeline.log
python3 tools/profile/fused_decode_timeline.py $OUT/timeline_fma_qwen3_4b.csv 2>&1 | head -24
xz -9 $OUT/timeline_fma_qwen3_4b.csv
el "5. niah lr probe"
HLM=$B/hybridlm OUT=$OUT/niah_lr SECONDS_EACH=${PROBE_S:-150} bash docs/results/s23-2026-12-03/niah_lr/probe.sh 2>&1 | tail -12
el done
