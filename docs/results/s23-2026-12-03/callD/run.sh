#!/usr/bin/env bash
# Session 23, device call D (binaries of b3f7d28: every GDN v2 kernel — prep_v2, state_v2 with the warp-count rule
# and two Ũ buffers, output_v2, du_local/dstate/dqk/wy v2 — selected by HLM_GDN_KERNELS=v2; v1 still the built-in
# default):
#   1. the chunked tests with v1 and v2; when v2 fails, the variants that isolate it (HLM_GDN_PREP=v1,
#      HLM_GDN_STATE_WARPS=8/4/2, HLM_GDN_BWD_V2=none), and the rest of the call uses the first that passes (GOOD)
#   2. the 4B distillation step (lean, micro-batch 4) with GOOD on a device left with 45.4 GiB free by a ballast
#      process ([memory] #28; session 22's call B: 1010.9 ms/step with v1)
#   3. test_cuda_models with GOOD (every GPU model, trainer and memory-plan test that runs the chunked GDN; the CLI
#      tests, which need the hybridlm binary, left out)
#   4. the gdn bench with GOOD; 5. the [perf] issue's 0.86B-config step with v1 and with GOOD
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/test_cuda_models ] || cat /tmp/stage/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
ops() {  # name env...: the chunked op tests; rc 0 when they pass
  local name=$1; shift
  env "$@" timeout 60 $B/test_cuda_ops --gtest_filter='*Chunked*' > $OUT/ops_$name.log 2>&1; local rc=$?
  echo "ops *Chunked* $name ($*): rc $rc $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/ops_$name.log | head -3 | tr '\n' ' ')"
  return $rc
}
el "1. ops tests"
ops v1 HLM_GDN_KERNELS=v1
GOOD="HLM_GDN_KERNELS=v2"
if ! ops v2 HLM_GDN_KERNELS=v2; then
  grep -B2 -A10 'Failure' $OUT/ops_v2.log | head -40
  GOOD=""
  for alt in "HLM_GDN_PREP=v1" "HLM_GDN_STATE_WARPS=8" "HLM_GDN_STATE_WARPS=4" "HLM_GDN_STATE_WARPS=2" \
             "HLM_GDN_BWD_V2=none" "HLM_GDN_PREP=v1 HLM_GDN_BWD_V2=none"; do
    if ops "v2_$(echo $alt | tr ' =' '__')" HLM_GDN_KERNELS=v2 $alt; then GOOD="HLM_GDN_KERNELS=v2 $alt"; break; fi
  done
  [ -n "$GOOD" ] || GOOD="HLM_GDN_KERNELS=v1"
fi
el "GOOD = $GOOD"
el "2. 4B step at 46 GiB"
rm -f /tmp/gate2 /tmp/ballast_ready
env $GOOD HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout 200 $B/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
sleep 20
python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
BALLAST=$!
for _ in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log; touch /tmp/gate2; el "gate opened"
wait $BENCH; echo "bench rc $?"; kill $BALLAST 2>/dev/null; wait $BALLAST 2>/dev/null
grep -E "^attach|^distill_step|^profile" $OUT/distill_4b_46g.log | cut -c1-300 | head -12
el "3. models tests ($GOOD)"
env $GOOD timeout 150 $B/test_cuda_models --gtest_filter='-*Cli*' > $OUT/models.log 2>&1; echo "test_cuda_models rc $?"
grep -E '^\[  (PASSED|FAILED)  \]|tests ran' $OUT/models.log | head -12
el "4. bench gdn ($GOOD)"
env $GOOD timeout 60 $B/bench_cuda_kernels gdn > $OUT/bench_gdn.log 2>&1; echo "bench rc $?"; grep chunked $OUT/bench_gdn.log
el "5. [perf] config step, v1 then GOOD"
HLM_GDN_KERNELS=v1 timeout 60 $B/bench_distill_step --precision bf16 --steps 3 > $OUT/distill_perf_v1.log 2>&1
echo "v1 rc $? $(grep -E '^distill_step' $OUT/distill_perf_v1.log | cut -c1-220)"
env $GOOD timeout 60 $B/bench_distill_step --precision bf16 --steps 3 > $OUT/distill_perf_good.log 2>&1
echo "GOOD rc $? $(grep -E '^distill_step' $OUT/distill_perf_good.log | cut -c1-220)"
el done
