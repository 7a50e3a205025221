#!/usr/bin/env bash
# Session 22, device call B (the binaries of call A, already unpacked in /tmp/hlm on the warm machine, else staged in
# /tmp/stage): the 4B distillation step (lean, micro-batch 4) on a device left with 45.4 GiB free by a ballast
# process (#28), with this session's 8-bit AdamW and glue changes (HLM_DW_BF16_EPILOGUE off, the default); then
# test_dist_cuda whole and the causal conv under racecheck.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/hybridlm ] || cat /tmp/stage/p_aa /tmp/stage/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
rm -f /tmp/gate2 /tmp/ballast_ready
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout 300 /tmp/hlm/bin/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
sleep 20  # the bench's CUDA context exists before the ballast takes the rest
el "ballast"
python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
BALLAST=$!
for i in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate2; el "gate2 opened (46 GiB)"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^attach|^distill_step|rror|what|bench rc|allocator" $OUT/distill_4b_46g.log | cut -c1-300 | head -20
grep -E "profile +(teacher|student|backward|adamw)" $OUT/distill_4b_46g.log | tail -5 | cut -c1-250
el test_dist_cuda
timeout 100 /tmp/hlm/bin/test_dist_cuda > $OUT/dist.log 2>&1; echo "rc=$?" >> $OUT/dist.log
grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=' $OUT/dist.log | tail -6
el racecheck conv
timeout 60 compute-sanitizer --tool racecheck /tmp/hlm/bin/test_cuda_ops --gtest_filter='CausalConv1d*' \
  > $OUT/racecheck_conv.log 2>&1; echo "rc=$?" >> $OUT/racecheck_conv.log
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|^rc=' $OUT/racecheck_conv.log | tail -5
el done
