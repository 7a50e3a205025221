#!/usr/bin/env bash
# Session 24, device call 1 ([memory] #28's closing measurement): the peer and the 4B step in the SAME call.
# Binaries of 0f80663 (GDN v2 kernels the default), bench_distill_step packed in two parts: p_aa staged in
# /tmp/stage by a first call, p_ab carried here.
#   1. our bench starts first and builds its models on the host (CPU), then waits at a gate file
#   2. meanwhile the peer: SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 peer_probe.py hf_distill
#      (its start-up is CPU-bound; its timed steps run last, when our bench is idle at the gate)
#   3. after the peer exits: a ballast leaves 45.4 GiB free (46 GiB less our bench's CUDA context), the gate opens,
#      our step runs: lean plan, micro-batch 4, 8 rows x 1024 tokens, 3 timed steps
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/stage /tmp/hlm && cp out/carry1b/p_ab /tmp/stage/ && cat /tmp/stage/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
rm -f /tmp/gate /tmp/ballast_ready
el "1. our bench: host setup, then wait at the gate"
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate timeout 560 $B/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
sleep 5
el "2. the peer"
SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 timeout 420 python3 .anchors/peer_probe.py hf_distill \
  > $OUT/peer_hf_distill.log 2>&1; echo "peer rc $?"
grep -E 'hf_distill|took' $OUT/peer_hf_distill.log | cut -c1-400
el "3. ballast, gate, our step"
python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
BALLAST=$!
for _ in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log; touch /tmp/gate; el "gate opened"
wait $BENCH; echo "bench rc $?"; kill $BALLAST 2>/dev/null; wait $BALLAST 2>/dev/null
grep -E "^setup|^waited|^attach|^distill_step|^profile" $OUT/distill_4b_46g.log | cut -c1-400 | head -14
el done
