#!/usr/bin/env bash
# Session 22, device call C (bench_distill_step of 44905da): [memory] #28 item 2's second target, never measured
# before: the Qwen3-1.7B-shaped distillation (teacher 28 layers, hidden 2048, 16 q / 8 kv, MLP 6144, and its
# 25 %-attention student) with the lean plan on a device left with 23.4 GiB free by a ballast process (a 24-GiB card
# less the bench's own CUDA context), micro-batch 4 then 2.
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
rm -rf /tmp/hlm; mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s22/c17b/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
for micro in 4 2; do
  rm -f /tmp/gate /tmp/ballast_ready
  HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate timeout 150 /tmp/hlm/bin/bench_distill_step \
    --shape qwen3-1.7b --memory-plan lean --precision bf16 --rows 8 --micro $micro --seq 1024 --steps 3 \
    > $OUT/distill_1p7b_24g_micro$micro.log 2>&1 &
  BENCH=$!
  sleep 8
  python3 tools/device/ballast.py 23.4 /tmp/ballast_ready 3600 > $OUT/ballast_micro$micro.log 2>&1 &
  BALLAST=$!
  for i in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
  cat $OUT/ballast_micro$micro.log
  touch /tmp/gate; el "micro $micro: gate opened (24 GiB)"
  wait $BENCH; echo "bench rc $?" >> $OUT/distill_1p7b_24g_micro$micro.log
  kill $BALLAST 2>/dev/null; wait $BALLAST 2>/dev/null
  grep -E "^attach|^distill_step|rror|what|bench rc|plan" $OUT/distill_1p7b_24g_micro$micro.log | cut -c1-300 | head -12
  grep -E "profile +(adamw)" $OUT/distill_1p7b_24g_micro$micro.log | tail -2 | cut -c1-200
done
el done
