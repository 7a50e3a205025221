#!/usr/bin/env bash
# Session 24, device call 2 (binaries of 0f80663): the peer WITHOUT activation checkpointing ([memory] #28 asks for
# both), FLA's chunked GDN during the peer's CPU-bound start-up, then our GDN bench ([perf] #20: same-call ratios).
#   1. background: SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 peer_probe.py hf_distill (no CHECKPOINT)
#   2. peer_probe.py fla (finishes before the peer's timed steps: checked from the timestamps below)
#   3. after the peer exits: bench_cuda_kernels gdn (v2, the default)
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && tar xJf out/carry2/bins.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin
el "1. peer without checkpointing (background)"
( SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 timeout 450 python3 .anchors/peer_probe.py hf_distill \
  > $OUT/peer_hf_distill_nockpt.log 2>&1; echo "peer rc $? at $(( $(date +%s) - START )) s" >> $OUT/peer_hf_distill_nockpt.log ) &
PEER=$!
el "2. FLA"
timeout 200 python3 .anchors/peer_probe.py fla > $OUT/peer_fla.log 2>&1; echo "rc=$?" >> $OUT/peer_fla.log
grep -E 'fla_chunk|took|rc=' $OUT/peer_fla.log | cut -c1-300
el "FLA done; waiting for the peer"
wait $PEER
grep -E 'hf_distill|rc|Error|error' $OUT/peer_hf_distill_nockpt.log | tail -5 | cut -c1-400
el "3. our gdn bench"
timeout 90 $B/bench_cuda_kernels gdn > $OUT/bench_gdn.log 2>&1; echo "rc=$?" >> $OUT/bench_gdn.log
grep -E 'chunked|rc=' $OUT/bench_gdn.log
el done
