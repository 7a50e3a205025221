#!/usr/bin/env bash
# Session 20, device call B (after a staging call that copied the binaries' first half to /tmp/stage/p_aa): the peer's
# seed-scale distillation step (HF + FLA kernels + FLA's fused LM-head KL, checkpointing) on the idle GPU, then ours
# (lean, 8 x 1024 tokens, micro-batches 2 and 4) on a device left with 45.4 GiB free by a ballast process, with the
# allocator that cuts large blocks from segments (2c7014d). Our host setup overlaps the peer; our GPU work starts after
# it. Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-580}
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s20/a/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
rm -f /tmp/gate2 /tmp/ballast_ready /tmp/peer_done
el "peer starts"
(SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 PYTHONUNBUFFERED=1 timeout 430 python3 .anchors/peer_probe.py hf_distill > $OUT/peer.log 2>&1; echo "peer rc $?" >> $OUT/peer.log; touch /tmp/peer_done) &
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout $(( BUDGET - 15 )) /tmp/hlm/bin/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 2,4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
while [ ! -f /tmp/peer_done ]; do sleep 2; done
el "peer done"
grep -E "hf_distill|took|rror" $OUT/peer.log | cut -c1-400
python3 - <<'PY' > $OUT/ballast.log 2>&1 &
import torch, time
free, total = torch.cuda.mem_get_info()
keep = int(45.4 * 2**30)
b = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
free2, _ = torch.cuda.mem_get_info()
print(f"total {total/2**30:.2f} GiB, free before {free/2**30:.2f}, ballast {b.numel()/2**30:.2f}, free after {free2/2**30:.2f} GiB", flush=True)
open("/tmp/ballast_ready", "w").close()
time.sleep(3600)
PY
BALLAST=$!
for i in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate2; el "gate2 opened (46 GiB)"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^attach|^distill_step|rror|what|bench rc" $OUT/distill_4b_46g.log | cut -c1-300 | head -20
grep -E "profile +(teacher|student|backward)" $OUT/distill_4b_46g.log | tail -4 | cut -c1-250
el "done"
