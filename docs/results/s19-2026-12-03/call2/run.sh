#!/usr/bin/env bash
# Session 19, device call 2: the peer's seed-scale distillation step (HF + FLA, checkpointing, fused LM-head KL) and
# ours in the same call; ours under a 46-GiB device (a ballast process leaves 45.4 GiB free beside the bench's CUDA context) at micro-batches 2 and 4.
# While the peer starts up: the bailing bf16 diagnosis and an ncu profile of the 8-bit AdamW kernel.
set -u
START=$(date +%s); BUDGET=${BUDGET:-560}
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/c2_aa out/coord/s19/c2/c2_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
el "peer starts"
(SHAPE=qwen3-4b ROWS=8 CHECKPOINT=1 WITH_FLA=1 STRONG=1 PYTHONUNBUFFERED=1 timeout 430 python3 .anchors/peer_probe.py hf_distill > $OUT/peer.log 2>&1; echo "peer rc $?" >> $OUT/peer.log; touch /tmp/peer_done) &
rm -f /tmp/gate
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate timeout $(( BUDGET - 20 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
  --memory-plan lean --precision bf16 --rows 8 --micro 2,4 --seq 1024 --steps 3 > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
timeout 60 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaBailing.GoldenForwardMatchesCpu' > $OUT/bailing.log 2>&1; echo "rc=$?" >> $OUT/bailing.log
grep -E "^\[check\]|FAILED|rc=" $OUT/bailing.log | head -60
el "ncu adamw8"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$NCU" ] && timeout 90 $NCU --set full -k regex:adamw_lowmem_kernel -c 1 /tmp/hlm/bin/bench_cuda_kernels adamw8 > $OUT/ncu_adamw8.txt 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots|Executed Ipc|No Eligible|Warp Cycles Per Issued|Stall" $OUT/ncu_adamw8.txt | head -30
el "waiting for the peer"
while [ ! -f /tmp/peer_done ]; do sleep 2; done
grep -E "hf_distill|took|rror" $OUT/peer.log | cut -c1-400
el "ballast: leave 46 GiB free"
python3 - <<'PY' > $OUT/ballast.log 2>&1 &
import torch, time
free, total = torch.cuda.mem_get_info()
keep = int(45.4 * 2**30)  # 46 GiB less ~0.6 GiB for the bench process's CUDA context, created before the ballast
b = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
free2, _ = torch.cuda.mem_get_info()
print(f"total {total/2**30:.2f} GiB, free before {free/2**30:.2f}, ballast {b.numel()/2**30:.2f}, free after {free2/2**30:.2f} GiB", flush=True)
open("/tmp/ballast_ready", "w").close()
time.sleep(3600)
PY
BALLAST=$!
while [ ! -f /tmp/ballast_ready ]; do sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate; el "gate opened"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^setup|^attach|^waited|^distill_step|profile +adamw|activations|rror|what|bench rc" $OUT/distill_4b_46g.log | cut -c1-250 | head -40
el "done"
