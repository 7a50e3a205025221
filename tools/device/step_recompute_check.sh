#!/usr/bin/env bash
# step_recompute_check.sh: [perf] #20 item 4 on the whole H200 — the seed-scale distillation step (Qwen3-4B-shaped
# teacher into its 25 %-attention student, 8 rows x 1024 tokens, bf16) with every layer's intermediates kept
# (--recompute none: no layer forward recomputed in the backward; the GDN layers' chunked rule keeps its forward so its
# backward reruns neither prep nor the state pass) against the recomputing default, and the peer in the same call.
# Binaries unpacked under $BIN (default /tmp/hlm/bin, libraries in $BIN/../lib); logs and a summary in
# $OUT/step_recompute.tgz (written on exit, also after a timeout).
#
# usage: OUT=$OUT [PARTS=tests,bench,peer] [PLANS=lean,adam8] [MICRO=4] [RECOMPUTE=layer,none] [STEPS=3]
#          [LOSS_CHUNKING=4096x4096,2048xfull,...] bash tools/device/step_recompute_check.sh
#   LOSS_CHUNKING  bench_distill_step --loss-chunking (session 31: ROWSxfull = one vocabulary chunk, the loss's
#          second pass reusing the first pass's logits; each entry runs inside each recompute mode); default: none given
#   tests  test_cuda_ops GatedDeltaRuleChunkedCuda.* (KeptForwardScratch: the kept forward in its own buffer, the
#          backward twice from it, bit for bit against the plain passes) and test_cuda_models CudaKeptActivations.*
#          (kept vs recomputed gradients bit for bit, every GDN layer's rule forward kept, the memory plan's
#          kept_intermediate_bytes equal to the trace's), CudaTrainStep.*, CudaMemoryPlans.* (~3 min)
#   bench  bench_distill_step --shape qwen3-4b --precision bf16 --memory-plan $PLANS --recompute $RECOMPUTE
#          --micro $MICRO with HLM_PROFILE_STEP=1 (ms/step, tokens/s, allocator peak, the phase profile; the estimate
#          line of each plan x mode first); ~60-90 s of set-up, then ~10 s per (plan, mode, micro)
#   peer   with bench: the peer runs first, alone on the GPU, while our bench builds its models on the host and waits
#          at a gate (HLM_BENCH_START_AFTER): `SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 peer_probe.py hf_distill`
#          (no CHECKPOINT: the peer's fastest setup, 107.6 GiB in session 24; PEER_CHECKPOINT=1 adds CHECKPOINT=1);
#          its start-up is ~4-5 min, so a call with the peer holds tests out (PARTS=bench,peer). PEER names the
#          peer_probe.py path (default .anchors/peer_probe.py, then ../shared/bench/peer_probe.py).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/step_recompute_out}
PARTS=${PARTS:-tests,bench}
PLANS=${PLANS:-lean,adam8}
MICRO=${MICRO:-4}
RECOMPUTE=${RECOMPUTE:-layer,none}
STEPS=${STEPS:-3}
source "$(dirname "$0")/check_prologue.sh"
check_prologue step_recompute

if has tests; then
  el "tests"
  timeout 200 "$BIN/test_cuda_ops" --gtest_filter='GatedDeltaRuleChunkedCuda.*' > "$W/ops.log" 2>&1
  el "test_cuda_ops rc=$?"
  grep -E '^\[  FAILED  \]|tests ran|PASSED' "$W/ops.log" | tail -8 | tee -a "$W/summary.txt"
  timeout 300 "$BIN/test_cuda_models" \
    --gtest_filter='CudaKeptActivations.*:CudaTrainStep.*:CudaMemoryPlans.*' > "$W/models.log" 2>&1
  el "test_cuda_models rc=$?"
  grep -E '^\[check\] kept|^\[  FAILED  \]|tests ran|PASSED' "$W/models.log" | tail -12 | tee -a "$W/summary.txt"
fi

if has bench; then
  gate=""
  if has peer; then
    rm -f "$W/gate"
    gate="$W/gate"
  fi
  el "bench: plans $PLANS, recompute $RECOMPUTE, micro $MICRO${gate:+ (waits for the peer)}"
  # env: an expanded NAME=VALUE word is an assignment for env, not for the shell
  env HLM_PROFILE_STEP=1 ${gate:+HLM_BENCH_START_AFTER=$gate} timeout 590 "$BIN/bench_distill_step" --shape qwen3-4b \
    --precision bf16 --rows 8 --seq 1024 --steps "$STEPS" --micro "$MICRO" --memory-plan "$PLANS" \
    --recompute "$RECOMPUTE" ${LOSS_CHUNKING:+--loss-chunking "$LOSS_CHUNKING"} > "$W/distill.log" 2>&1 &
  BENCH=$!
  if has peer; then
    sleep 5
    peer=${PEER:-}
    [ -z "$peer" ] && for p in .anchors/peer_probe.py ../shared/bench/peer_probe.py; do [ -f "$p" ] && peer=$p && break; done
    el "peer: ${peer:-not found}"
    if [ -n "$peer" ]; then
      env SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 ${PEER_CHECKPOINT:+CHECKPOINT=1} timeout 420 python3 "$peer" hf_distill \
        > "$W/peer.log" 2>&1
      el "peer rc=$?"
      grep -E 'hf_distill|took' "$W/peer.log" | cut -c1-400 | tee -a "$W/summary.txt"
    fi
    touch "$W/gate"
    el "gate opened"
  fi
  wait $BENCH
  el "bench rc=$?"
  grep -E "^memory plan|^distill_step|^profile|rror" "$W/distill.log" | cut -c1-420 | tee -a "$W/summary.txt"
fi
el done
