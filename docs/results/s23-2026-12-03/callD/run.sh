#!/usr/bin/env bash
# Session 23, device call D (binaries of the session's final GDN kernels, the v2 kernels the default): the chunked
# tests with v1 and v2; the 4B step (below) first of the rest, then test_cuda_models whole on the default (v2: every GPU model, trainer and memory-plan test that
# runs the chunked GDN; the CLI tests, which need the hybridlm binary, left out); the gdn bench (v2); the [perf] issue's 0.86B-config step with v1 and
# v2; then the 4B distillation step (lean, micro-batch 4) on a device left with
# 45.4 GiB free by a ballast process ([memory] #28), as session 22's call B did with the v1 kernels (1010.9 ms/step).
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/test_cuda_models ] || cat /tmp/stage/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
el "ops tests"
for kv in v1 v2; do
  HLM_GDN_KERNELS=$kv timeout 60 $B/test_cuda_ops --gtest_filter='*Chunked*' > $OUT/ops_chunked_$kv.log 2>&1
  echo "ops *Chunked* $kv: rc $? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/ops_chunked_$kv.log | head -3 | tr '\n' ' ')"
done
el "4B step at 46 GiB"
rm -f /tmp/gate2 /tmp/ballast_ready
HLM_GDN_KERNELS=v2 HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout 200 $B/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH=$!
sleep 20
python3 tools/device/ballast.py 45.4 /tmp/ballast_ready 3600 > $OUT/ballast.log 2>&1 &
BALLAST=$!
for _ in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log; touch /tmp/gate2; el "gate opened"
wait $BENCH; echo "bench rc $?"; kill $BALLAST 2>/dev/null
grep -E "^attach|^distill_step|^profile" $OUT/distill_4b_46g.log | head -12
el "models tests (default kernels)"
timeout 150 $B/test_cuda_models --gtest_filter='-*Cli*' > $OUT/models.log 2>&1; echo "test_cuda_models rc $?"
grep -E '^\[  (PASSED|FAILED)  \]|tests ran' $OUT/models.log | head -12
el "bench gdn (default)"
timeout 60 $B/bench_cuda_kernels gdn > $OUT/bench_gdn.log 2>&1; echo "bench rc $?"; grep chunked $OUT/bench_gdn.log
el "[perf] config step, v1 then v2"
for kv in v1 v2; do
  HLM_GDN_KERNELS=$kv timeout 60 $B/bench_distill_step --precision bf16 --steps 3 > $OUT/distill_perf_$kv.log 2>&1
  echo "$kv rc $? $(grep -E '^distill_step' $OUT/distill_perf_$kv.log | cut -c1-220)"
done
el done
