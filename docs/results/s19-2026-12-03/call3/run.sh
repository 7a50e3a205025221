#!/usr/bin/env bash
# Session 19, device call 3 (after a staging call that copied out/coord/s19/c3a/c3_aa to /tmp/stage/): the teacher
# held all in bf16 (a5572ee) — the CUDA training tests, the bailing bf16 test with every expert picked, the data-
# parallel tests; then the 4B lean step at micro-batches 2 and 4 on a device left with 45.4 GiB free by a ballast
# process (46 GiB less the bench's own CUDA context). Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-400}
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/c3_aa out/coord/s19/c3/c3_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
rm -f /tmp/gate
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate timeout $(( BUDGET - 10 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
  --memory-plan lean --precision bf16 --rows 8 --micro 2,4 --seq 1024 --steps 3 > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
el "models"
timeout 150 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaBailing.*:CudaMemoryPlans.*:CudaTrainer.*:CudaTrainStep.*:CudaEvalTrainer.*:CudaLmHeadLossTraining.*' > $OUT/models.log 2>&1; echo "rc=$?" >> $OUT/models.log
grep -E "^\[  FAILED  \]|tests ran|^rc=|bf16 vs fp32|every expert" $OUT/models.log | head -20
el "dist"
timeout 150 /tmp/hlm/bin/test_dist_cuda > $OUT/dist.log 2>&1; echo "rc=$?" >> $OUT/dist.log
grep -E "^\[  FAILED  \]|tests ran|^rc=" $OUT/dist.log
el "ballast"
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
while [ ! -f /tmp/ballast_ready ]; do sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate; el "gate opened"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^setup|^attach|^waited|^memory plan|^distill_step|profile +adamw|rror|what|bench rc" $OUT/distill_4b_46g.log | cut -c1-260 | head -40
grep -E "profile +teacher" $OUT/distill_4b_46g.log | tail -2
el "done"
