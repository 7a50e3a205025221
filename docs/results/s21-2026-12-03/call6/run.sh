#!/usr/bin/env bash
# Session 21, device call 6 (binaries of 5209129): the helper's causal conv1d kernels inside the whole CUDA model
# suites (test_cuda_models incl. the CLI tests, test_dist_cuda: GDN training, graph-vs-eager bits) and in the 4B
# distillation step at micro-batch 4 on a device left with 45.4 GiB free (#28; no peer in this call: session 20's
# same-call peer figure was 1142.7 ms); the fused decode's phase timeline with the products skipped (qwen3_4b: the
# weight stream, attention and barriers alone). Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-540}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s21/f_p_ab/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
rm -f /tmp/gate2 /tmp/ballast_ready
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout $(( BUDGET - 10 )) /tmp/hlm/bin/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
suite() {  # name, binary
  el "$1"; timeout $(( $(left) - 150 )) /tmp/hlm/bin/$2 > $OUT/$1.log 2>&1; echo "rc=$?" >> $OUT/$1.log
  grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=' $OUT/$1.log | tail -8
}
suite models test_cuda_models
suite dist test_dist_cuda
el "fused decode timeline, products skipped"
HLM_FUSED_DECODE=on HLM_FUSED_DECODE_SKIP=1 HLM_FUSED_DECODE_TIMELINE=$OUT/timeline_skip_qwen3_4b.csv timeout 60 \
  /tmp/hlm/bin/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 8 --out /tmp/b_skip \
  > $OUT/bench_skip_timeline.log 2>&1; echo "rc=$?" >> $OUT/bench_skip_timeline.log
tail -2 $OUT/bench_skip_timeline.log
el "ballast"
python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
BALLAST=$!
for i in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate2; el "gate2 opened (46 GiB)"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^attach|^distill_step|rror|what|bench rc" $OUT/distill_4b_46g.log | cut -c1-300 | head -20
grep -E "profile +(teacher|student|backward|adamw)" $OUT/distill_4b_46g.log | tail -5 | cut -c1-250
el done
