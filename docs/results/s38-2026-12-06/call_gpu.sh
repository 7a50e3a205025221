#!/usr/bin/env bash
# Session 38's device calls (from session 37's script; the recipe adds --norm-fused-backward $NORM_BWDS) (H200; an H100 works with MICRO=2 PEER_ROWS=4): the peer's 4B step and optimizer step, the
# whole GPU suites with the two opt-in step forms switched on through the environment, the 4B step under the seed's
# recipe (96 rows per optimizer step) with every switch A/B'd in one process, and a kernel trace of an 8-row step.
#
# Here, first (build-gpu, sm_90a):
#   ninja -C build-gpu bench/bench_distill_step tests/cuda/test_cuda_ops tests/test_cuda_models hybridlm \
#     tools/profile/libhlm_kernel_trace.so
#   rm -f out/carry/all.txz.part.*; PIECE_MB=auto bash tools/device/pack_binaries.sh out/carry/all.txz \
#     build-gpu/bench/bench_distill_step build-gpu/tests/cuda/test_cuda_ops build-gpu/tests/test_cuda_models \
#     build-gpu/hybridlm build-gpu/tools/profile/libhlm_kernel_trace.so
# The pack is two or three pieces (PIECE_MB=auto: the tracked tree leaves ~13-15 MB per call; without hybridlm and
# the tracer library it is two, then exclude the CLI tests with MODELS_FILTER): the first call carries
# all.txz.part.00 (kept in /tmp/keep) and may run `peer` (which needs only out/carry/anchors.txz: FLA +
# peer_probe.py, ../shared/bench/README); each later call carries the next piece, the last one runs the rest.
#
# PARTS (comma list, in this order; BUDGET seconds for the whole call, default 560; session 38 added `tunecache`:
# two bench processes sharing HLM_MATMUL_AUTOTUNE_CACHE must print the same first-step loss bits, ~150 s):
#   peer     peer_probe.py hf_distill SHAPE=qwen3-4b, $PEER_ROWS rows (8) without checkpointing (the peer's fastest
#            setup on an H200, session 36), then tools/device/peer_optimizer_time.py (its AdamW step alone)  (~300 s)
#   tests    test_cuda_ops and test_cuda_models (filters $OPS_FILTER, $MODELS_FILTER; default all) with $TEST_ENV in
#            the environment (default: the bf16 gate/up and the bf16 weight-gradient epilogue on), HLM_BINARY = the
#            carried hybridlm                                                                             (~180 s)
#   recipe   bench_distill_step, 4B, lean, --recompute none, micro-batch $MICRO (8), 96 rows per step, 2048xfull,
#            --dw-paths $DW_PATHS (epilogue) × --mlp-gate-up $GATE_UPS (bf16) × --matmul-autotune $AUTOTUNES (off,on)
#            × --teacher-overlap $OVERLAPS (off,on), 1 warm-up + 1 timed step each, HLM_PROFILE_STEP=1 (the attach's
#            phases)                                                                                        (~250 s)
#   trace    one 8-row step at micro-batch $MICRO under the CUPTI kernel tracer with $TRACE_ENV (default: both
#            step forms on), --dw-paths overwrite                                                         (~100 s)
set -u
export OUT=${OUT:-/tmp/call_gpu_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-tests,recipe}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry/all.txz.part.* out/carry/anchors.txz; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
MICRO=${MICRO:-$([ "${mib:-0}" -lt 100000 ] && echo 2 || echo 8)}
PEER_ROWS=${PEER_ROWS:-$([ "${mib:-0}" -lt 100000 ] && echo 4 || echo 8)}
if has peer; then
  [ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz || exit 3
  el "peer step: $PEER_ROWS rows, $(left) s left"
  SHAPE=qwen3-4b ROWS=$PEER_ROWS WITH_FLA=1 STRONG=1 timeout $(( $(left) - 70 )) python3 -u .anchors/peer_probe.py \
    hf_distill > "$OUT/peer_hf_distill.log" 2>&1
  el "peer_probe rc=$?"
  grep -E 'hf_distill|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
  timeout $(( $(left) - 5 )) python3 tools/device/peer_optimizer_time.py > "$OUT/peer_opt.log" 2>&1
  el "peer_optimizer_time rc=$?"
  grep -E 'peer_optimizer_step|rror' "$OUT/peer_opt.log" | cut -c1-400
fi
needs_bins=0; for p in tests recipe trace; do has $p && needs_bins=1; done
[ $needs_bins = 1 ] || { el done; exit 0; }
if [ ! -x /tmp/hlm/bin/test_cuda_models ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  TEST_ENV=${TEST_ENV:-HLM_MLP_BF16_GATE_UP=on HLM_DW_BF16_EPILOGUE=on}
  el "tests with: $TEST_ENV"
  env $TEST_ENV timeout 240 /tmp/hlm/bin/test_cuda_ops --gtest_filter="${OPS_FILTER:-*}" > "$OUT/tests_ops.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail -20
  echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  env $TEST_ENV HLM_BINARY=/tmp/hlm/bin/hybridlm timeout 300 /tmp/hlm/bin/test_cuda_models \
    --gtest_filter="${MODELS_FILTER:-*}" > "$OUT/tests_models.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail -20
  echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[check\] teacher overlap" "$OUT/tests_models.log" | cut -c1-220
  xz -f "$OUT/tests_ops.log"
  el "tests done, $(left) s left"
fi
if has recipe; then
  el "recipe: micro $MICRO, $(left) s left"
  HLM_PROFILE_STEP=1 timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
    --precision bf16 --rows 96 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
    --loss-chunking 2048xfull --dw-paths "${DW_PATHS:-epilogue}" --mlp-gate-up "${GATE_UPS:-bf16}" \
    --matmul-autotune "${AUTOTUNES:-off,on}" --teacher-overlap "${OVERLAPS:-off}" --norm-fused-backward "${NORM_BWDS:-off,on}" --steps 1 --warmup 1 \
    > "$OUT/recipe.log" 2> "$OUT/recipe.err"
  el "bench_distill_step rc=$?"
  grep -E "^distill_step" "$OUT/recipe.log" | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
  grep -E "^profile +attach" "$OUT/recipe.err"
fi
if has tunecache; then
  # HLM_MATMUL_AUTOTUNE_CACHE end to end: two processes with the GEMM autotune on and one cache file; the second must
  # take every choice from the file (no tuning: a shorter warm-up step) and print the same first loss.
  rm -f /tmp/hlm_tune.tsv
  for run in 1 2; do
    HLM_MATMUL_AUTOTUNE=on HLM_MATMUL_AUTOTUNE_CACHE=/tmp/hlm_tune.tsv timeout 200 /tmp/hlm/bin/bench_distill_step \
      --shape qwen3-4b --precision bf16 --rows 16 --micro 8 --seq 1024 --memory-plan lean --recompute none \
      --loss-chunking 2048xfull --steps 1 --warmup 1 > "$OUT/tunecache_$run.log" 2>&1
    el "tunecache run $run rc=$? ($(wc -l < /tmp/hlm_tune.tsv) lines in the cache)"
  done
  cp /tmp/hlm_tune.tsv "$OUT/tunecache.tsv"
  # The first step's loss only: it is a forward of the same weights (deterministic); the gradients are not promised
  # bit for bit across processes (cuDNN's attention backward accumulates dQ with atomics), so neither is what follows.
  first_loss() { grep '^step 0' "$1" | grep -o '\[loss [^,]*'; }
  [ -n "$(first_loss "$OUT/tunecache_1.log")" ] && \
    [ "$(first_loss "$OUT/tunecache_1.log")" = "$(first_loss "$OUT/tunecache_2.log")" ] \
    && echo "tunecache: the two processes' first losses are equal bit for bit" || echo "tunecache: FIRST LOSSES DIFFER"
  grep -E "^step|^distill_step" "$OUT"/tunecache_*.log | cut -c1-160
fi
if has trace && [ "$(left)" -ge 100 ]; then
  TRACE_ENV=${TRACE_ENV:-HLM_MLP_BF16_GATE_UP=on HLM_DW_BF16_EPILOGUE=on}
  el "trace with: $TRACE_ENV"
  env $TRACE_ENV OUT="$OUT" MICRO="$MICRO" RECOMPUTE=none CHUNKINGS=2048xfull PARTS=trace DW_PATHS=overwrite \
    STEP_TIMEOUT=$(( $(left) - 10 )) bash tools/device/loss_chunking_check.sh
  head -75 "$OUT"/*/trace.txt 2>/dev/null | tail -62 | cut -c1-150
fi
el done
