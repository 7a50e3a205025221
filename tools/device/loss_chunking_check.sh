#!/usr/bin/env bash
# loss_chunking_check.sh: sessions 31-32's unmeasured GPU work in one device call ([perf] #20 items 1 and 4): the op
# and trainer tests of the loss's one-chunk path, of the two fixed op tests and of the first micro-batch's written
# weight gradients (session 32), the LM-head loss alone by chunking, the attention engines at B1×T16384 with the
# peer's all-ones output gradient, the 4B step by loss chunking and weight-gradient path, and the peer's optimizer
# step alone (the seed's recipe: one optimizer step per 96 rows).
# Binaries unpacked under $BIN (default /tmp/hlm/bin, libraries in $BIN/../lib; pack_binaries.sh with PIECE_MB for the
# transfer); logs and a summary in $OUT/loss_chunking.tgz (written on exit, also after a timeout).
#
# usage: OUT=$OUT [PARTS=tests,kernels,step,peer_opt (the default; trace on request)] [CHUNKINGS=4096x4096,2048xfull,4096xfull] [MICRO=4]
#          [ROWS=8] [STEPS=3] [DW_PATHS=overwrite,scratch] [GATE_UPS=fp32,bf16] [RECOMPUTE=none] [STEP_TIMEOUT=540]
#          bash tools/device/loss_chunking_check.sh
#   tests    test_cuda_ops LmHeadLossCuda.* (single-chunk cases with several row blocks), GatedDeltaRuleChunkedCuda.
#            KeptForwardScratch and RmsnormCuda.* (fixed in session 31), AdamWLeanCuda.* (the overwrite form, session
#            32), SwigluCuda.* (the bf16-input kernels, session 35); test_cuda_models CudaTrainer.* (one vocabulary
#            chunk tracking the CPU, bad chunkings refused; the CLI tests find hybridlm beside the test program),
#            CudaDwOverwrite.*, CudaMemoryPlans.*, CudaKeptActivations.* (with the bf16 gate/up form, session 35)
#            (~2-3 min)
#   kernels  bench_cuda_kernels lmhead (H 1024 and 2560, the full-vocabulary chunkings last) and attn_engines
#            --d-out-ones --shapes 1x16384 (item 1's last shape as peer_probe.py's sdpa times it) (~2 min)
#   step     bench_distill_step --shape qwen3-4b --precision bf16 --rows $ROWS --seq 1024 --memory-plan lean
#            --recompute $RECOMPUTE --micro $MICRO --loss-chunking $CHUNKINGS --dw-paths $DW_PATHS --steps $STEPS
#            [--mlp-gate-up $GATE_UPS: the MLPs' gate/up in fp32 and/or bf16, layers/mlp_bf16_gate_up.h; unset: the
#            environment's],
#            HLM_PROFILE_STEP=1 (~90 s of set-up, an attach per chunking, then (STEPS + 2) steps per weight-gradient
#            path: ~0.8 s each at 8 rows, ~8.5 s at ROWS=96, the seed's 96 × 1024 tokens per optimizer step); at
#            micro-batch 8 with --recompute none keep the chunkings ≤ 2048xfull (128.7 GiB measured there with the
#            default loss chunking)
#   trace    one 8-row step at micro-batch $MICRO (--recompute $RECOMPUTE, the first of $CHUNKINGS, the first of
#            $DW_PATHS) under the CUPTI kernel tracer, the timed step only (HLM_TRACE_RANGE=profiler, docs/profiling.md):
#            where the 4B step's time goes by kernel, for choosing what to fuse ($BIN/../lib/libhlm_kernel_trace.so packed
#            with the binaries; ~2.5 min, most of it the attach)
#   peer_opt tools/device/peer_optimizer_time.py: torch's fused AdamW step alone on the peer's 4B student (needs the
#            peer's Python environment; ~1 min), for the peer's time per 8 rows under the seed's recipe
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/loss_chunking_out}
PARTS=${PARTS:-tests,kernels,step,peer_opt}
CHUNKINGS=${CHUNKINGS:-4096x4096,2048xfull,4096xfull}
MICRO=${MICRO:-4}
RECOMPUTE=${RECOMPUTE:-none}
ROWS=${ROWS:-8}
STEPS=${STEPS:-3}
DW_PATHS=${DW_PATHS:-overwrite,scratch}
GATE_UPS=${GATE_UPS:-}  # empty: no --mlp-gate-up (HLM_MLP_BF16_GATE_UP decides)
STEP_TIMEOUT=${STEP_TIMEOUT:-540}  # seconds for the step part's bench (a shorter call budget)
source "$(dirname "$0")/check_prologue.sh"
check_prologue loss_chunking  # with torch's cuDNN on the library path (the attention engines)

if has tests; then
  timeout 150 "$BIN/test_cuda_ops" \
    --gtest_filter='LmHeadLossCuda.*:GatedDeltaRuleChunkedCuda.KeptForwardScratch:RmsnormCuda.*:AdamWLeanCuda.*:SwigluCuda.*' \
    > "$W/ops.log" 2>&1
  el "test_cuda_ops rc=$?"
  grep -E '^\[  (PASSED|FAILED) |Failure|^\[check\] bf16 dw overwrite' "$W/ops.log" | tail -14 | tee -a "$W/summary.txt"
  timeout 300 "$BIN/test_cuda_models" --gtest_filter='CudaTrainer.*:CudaDwOverwrite.*:CudaMemoryPlans.*:CudaKeptActivations.*' \
    > "$W/models.log" 2>&1
  el "test_cuda_models rc=$?"
  grep -E '^\[  (PASSED|FAILED) |^\[check\] (cuda_trainer|dw overwrite|kept activations|.*gate/up)' "$W/models.log" | tail -24 \
    | tee -a "$W/summary.txt"
fi
if has kernels; then
  timeout 200 "$BIN/bench_cuda_kernels" lmhead > "$W/lmhead.log" 2>&1
  el "bench_cuda_kernels lmhead rc=$?"
  grep -E '^lm_head_kl' "$W/lmhead.log" | tee -a "$W/summary.txt"
  timeout 120 "$BIN/bench_cuda_kernels" attn_engines --d-out-ones --shapes 1x16384 > "$W/attn_ones.log" 2>&1
  el "bench_cuda_kernels attn_engines --d-out-ones rc=$?"
  grep -E '^attn_peer_timing|fwd\+bwd' "$W/attn_ones.log" | cut -c1-300 | tee -a "$W/summary.txt"
fi
if has step; then
  el "step: rows $ROWS, recompute $RECOMPUTE, micro $MICRO, loss chunkings $CHUNKINGS, dw paths $DW_PATHS${GATE_UPS:+, gate/up $GATE_UPS}"
  env HLM_PROFILE_STEP=1 timeout "$STEP_TIMEOUT" "$BIN/bench_distill_step" --shape qwen3-4b --precision bf16 --rows "$ROWS" \
    --seq 1024 --steps "$STEPS" --micro "$MICRO" --memory-plan lean --recompute "$RECOMPUTE" \
    --loss-chunking "$CHUNKINGS" --dw-paths "$DW_PATHS" ${GATE_UPS:+--mlp-gate-up "$GATE_UPS"} > "$W/distill.log" 2>&1
  el "bench_distill_step rc=$?"
  grep -E '^distill_step|rror' "$W/distill.log" | cut -c1-420 | tee -a "$W/summary.txt"
  grep -E '^profile +teacher' "$W/distill.log" | tail -6 | tee -a "$W/summary.txt"
fi
if has trace; then
  tracer=$BIN/../lib/libhlm_kernel_trace.so
  source "$(dirname "$0")/cupti_dir.sh"
  cupti=$(cupti_dir)
  if [ -f "$tracer" ] && [ -n "$cupti" ]; then
    el "trace: rows 8, micro $MICRO, recompute $RECOMPUTE, ${CHUNKINGS%%,*}, ${DW_PATHS%%,*}"
    LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cupti HLM_TRACE_RANGE=profiler HLM_TRACE_OUT="$W/trace.txt" \
      HLM_TRACE_TSV="$W/trace.tsv" HLM_TRACE_TOP=60 timeout "$STEP_TIMEOUT" env LD_PRELOAD="$tracer" \
      "$BIN/bench_distill_step" --shape qwen3-4b --precision bf16 --rows 8 --seq 1024 --steps 1 --micro "$MICRO" \
      --memory-plan lean --recompute "$RECOMPUTE" --loss-chunking "${CHUNKINGS%%,*}" --dw-paths "${DW_PATHS%%,*}" \
      > "$W/trace_step.log" 2>&1
    el "traced bench_distill_step rc=$?"
    head -12 "$W/trace.txt" 2>/dev/null | tee -a "$W/summary.txt"
  else
    el "trace skipped: no $tracer or no libcupti.so.13"
  fi
fi
if has peer_opt; then
  timeout 300 python3 "$(dirname "$0")/peer_optimizer_time.py" > "$W/peer_opt.log" 2>&1
  el "peer_optimizer_time rc=$?"
  grep -E 'peer_optimizer_step|rror' "$W/peer_opt.log" | cut -c1-400 | tee -a "$W/summary.txt"
fi
el done
