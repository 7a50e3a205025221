#!/usr/bin/env bash
# Session 12, call 1 ([memory] / [perf] item 4): the persistent-grid 8-bit AdamW kernel's bit-exact tests, then the
# seed-scale distillation step (lean plan, 4B and 1.7B shapes) with the peer (HF + FLA, CHECKPOINT=1, STRONG=1) in
# the same call. GPU in sequence: tests, peer, 4B steps, 1.7B steps; our benches' host-side attach phases (random
# init + upload) overlap the peer (gate files hold their timed steps back until the peer has finished).
# Also: where the image's cuDNN lives and its version (for the cuDNN attention engine).
set -u
T0=$(date +%s.%N)
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c1.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
stamp() { awk -v a="$(date +%s.%N)" -v b="$T0" -v n="$1" 'BEGIN{printf "%s %.1f\n", n, a-b}' | tee -a $R/timeline.txt; }
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_EXPERIMENTAL_LEAN_CUDA=1
G=/tmp/hlm/gates; mkdir -p $G
D="--memory-plan lean --precision bf16 --rows 8 --micro 2 --seq 1024 --steps 3"
( HLM_BENCH_START_AFTER=$G/b4 HLM_PROFILE_STEP=1 timeout 560 $B/bench_distill_step --shape qwen3-4b $D > $R/distill_4b.log 2>&1; echo "rc $?" >> $R/distill_4b.log ) &
P4=$!
( HLM_BENCH_START_AFTER=$G/b17 HLM_PROFILE_STEP=1 timeout 560 $B/bench_distill_step --shape qwen3-1.7b $D > $R/distill_1p7b.log 2>&1; echo "rc $?" >> $R/distill_1p7b.log ) &
P17=$!
( PEER_GATE=$G/peer SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 timeout 330 python3 .anchors/peer_gate.py > $R/peer.log 2>&1; echo "rc $?" >> $R/peer.log ) &
PP=$!
stamp start
python3 - > $R/cudnn.txt 2>&1 <<'PY'
import os, glob, torch
import nvidia.cudnn as c
d = os.path.join(list(c.__path__)[0], "lib")
print("cudnn_lib_dir", d); print(sorted(os.listdir(d)))
print("torch_cudnn_version", torch.backends.cudnn.version())
import nvidia.cuda_nvrtc as n; print("nvrtc_dir", list(n.__path__)[0], sorted(glob.glob(list(n.__path__)[0] + "/lib/*")))
PY
cat $R/cudnn.txt
timeout 60 $B/test_cuda_ops --gtest_filter='AdamWLean*:AdamWLowmem*' > $R/ops.log 2>&1; echo "rc ops $?" | tee -a $R/tests.txt
timeout 90 $B/test_cuda_models --gtest_filter='CudaMemoryPlans.*' > $R/models.log 2>&1; echo "rc models $?" | tee -a $R/tests.txt
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED" $R/ops.log $R/models.log | head -20
stamp tests; tar czf $OUT/logs.tgz -C $OUT r
touch $G/peer; wait $PP; stamp peer; tar czf $OUT/logs.tgz -C $OUT r
touch $G/b4; wait $P4; stamp bench4b; tar czf $OUT/logs.tgz -C $OUT r
touch $G/b17; wait $P17; stamp bench17b; tar czf $OUT/logs.tgz -C $OUT r
grep -h "distill_step \|^rc\|^attach\|adamw\|optimizer" $R/distill_4b.log $R/distill_1p7b.log | tail -14
grep -h "hf_distill\|^rc\|waited" $R/peer.log | tail -4
