#!/usr/bin/env bash
# Session 23, device call D (binaries of 9fd7bcb: every GDN v2 kernel — prep_v2, state_v2 with the warp-count rule
# and two Ũ buffers, output_v2, du_local/dstate/dqk/wy v2 with dU held in bf16 and dq's GVA sum in wy — selected by
# HLM_GDN_KERNELS=v2; v1 still the built-in
# default). Fitted to ~200 s of device time (a refused start took 122 s of the session's budget):
#   1. the chunked op tests with v2; if they fail, with HLM_GDN_PREP=v1, else v1: the first that passes is GOOD
#   2. the 4B distillation step (lean, micro-batch 4) with GOOD on a device left with 45.4 GiB free by a ballast
#      ([memory] #28; session 22's call B: 1010.9 ms/step with v1), and, while its attach uploads (GPU mostly idle;
#      its steps are timed after), test_cuda_models with GOOD (the CLI tests, which need hybridlm, left out)
#   3. the gdn bench with GOOD after the step
# SHORT=1: no 4B step (models tests and the bench only).
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
GOOD="HLM_GDN_KERNELS=v2"
if ! ops v2 HLM_GDN_KERNELS=v2; then
  grep -B2 -A10 'Failure' $OUT/ops_v2.log | head -30
  if ops v2_prep_v1 HLM_GDN_KERNELS=v2 HLM_GDN_PREP=v1; then GOOD="HLM_GDN_KERNELS=v2 HLM_GDN_PREP=v1"
  else GOOD="HLM_GDN_KERNELS=v1"; fi
fi
el "GOOD = $GOOD"
if [ "${SHORT:-0}" != 1 ]; then
  el "2. 4B step at 46 GiB, models tests during its attach"
  rm -f /tmp/gate2 /tmp/ballast_ready
  env $GOOD HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout 200 $B/bench_distill_step \
    --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
    > $OUT/distill_4b_46g.log 2>&1 &
  BENCH=$!
  sleep 15
  python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
  BALLAST=$!
  for _ in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
  cat $OUT/ballast.log; touch /tmp/gate2; el "gate opened"
  sleep 3
  env $GOOD timeout 70 $B/test_cuda_models --gtest_filter='-*Cli*' > $OUT/models.log 2>&1; echo "test_cuda_models rc $?"
  grep -E '^\[  (PASSED|FAILED)  \]|tests ran' $OUT/models.log | head -12; el "models tests done"
  wait $BENCH; echo "bench rc $?"; kill $BALLAST 2>/dev/null; wait $BALLAST 2>/dev/null
  grep -E "^attach|^distill_step|^profile" $OUT/distill_4b_46g.log | cut -c1-300 | head -12
else
  env $GOOD timeout 90 $B/test_cuda_models --gtest_filter='-*Cli*' > $OUT/models.log 2>&1; echo "test_cuda_models rc $?"
  grep -E '^\[  (PASSED|FAILED)  \]|tests ran' $OUT/models.log | head -12
fi
el "3. bench gdn ($GOOD)"
env $GOOD timeout 60 $B/bench_cuda_kernels gdn > $OUT/bench_gdn.log 2>&1; echo "bench rc $?"; grep chunked $OUT/bench_gdn.log
el done
