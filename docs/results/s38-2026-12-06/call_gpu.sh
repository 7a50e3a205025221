#!/usr/bin/env bash
# Device calls prepared in session 38 for the next session with a GPU (H200; an H100 works with MICRO=2
# PEER_ROWS=4). Session 37's script (docs/results/s37-2026-12-05/call_gpu.sh) runs `peer`, `tests` and `trace` as it
# says there; this one adds, in this order after them:
#   recipe     bench_distill_step, 4B, lean, --recompute none, micro-batch $MICRO (8 on an H200), 96 rows per step,
#              2048xfull, the session-38 defaults (bf16 gate/up, bf16 epilogue), --matmul-autotune $AUTOTUNES
#              (off,on) × --norm-fused-backward $NORM_BWDS (off,on), 1 warm-up + 1 timed step each,
#              HLM_PROFILE_STEP=1                                                                       (~200 s)
#   tunecache  HLM_MATMUL_AUTOTUNE_CACHE end to end: two bench processes (16 rows, autotune on) sharing one cache
#              file; the second must take every choice from it (a shorter warm-up step) and print the same
#              first-step loss bits                                                                      (~150 s)
# TEST_ENV defaults to nothing here (the defaults are the forms session 37's calls set through the environment);
# HLM_RMSNORM_FUSED_BACKWARD=on in TEST_ENV runs the whole suites with the fused RMSNorm backward.
#
# Here, first (build-gpu, sm_90a), then carry the pieces one per call (the first call starts the machine and keeps
# its piece in /tmp/keep; the machine must stay warm, idle_release_s):
#   ninja -C build-gpu bench/bench_distill_step tests/cuda/test_cuda_ops tests/test_cuda_models hybridlm
#   rm -f out/carry/all.txz.part.*; PIECE_MB=auto bash tools/device/pack_binaries.sh out/carry/all.txz \
#     build-gpu/bench/bench_distill_step build-gpu/tests/cuda/test_cuda_ops build-gpu/tests/test_cuda_models \
#     build-gpu/hybridlm
# e.g. the last call: PARTS=tests,recipe,tunecache BUDGET=580 bash docs/results/s38-2026-12-06/call_gpu.sh
set -u
export OUT=${OUT:-/tmp/call_gpu_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-tests,recipe}," in *",$1,"*) return 0 ;; esac; return 1; }
s37_parts=""
for p in peer tests trace; do has $p && s37_parts=$s37_parts${s37_parts:+,}$p; done
if [ -n "$s37_parts" ]; then
  TEST_ENV=${TEST_ENV:-HLM_TEACHER_OVERLAP=off} PARTS=$s37_parts BUDGET=$(( $(left) - 5 )) \
    bash docs/results/s37-2026-12-05/call_gpu.sh
fi
has recipe || has tunecache || { el done; exit 0; }
for f in out/carry/all.txz.part.*; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
if [ ! -x /tmp/hlm/bin/bench_distill_step ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
MICRO=${MICRO:-$([ "${mib:-0}" -lt 100000 ] && echo 2 || echo 8)}
if has recipe; then
  el "recipe: micro $MICRO, $(left) s left"
  HLM_PROFILE_STEP=1 timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
    --precision bf16 --rows 96 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
    --loss-chunking 2048xfull --matmul-autotune "${AUTOTUNES:-off,on}" --norm-fused-backward "${NORM_BWDS:-off,on}" \
    --steps 1 --warmup 1 > "$OUT/recipe.log" 2> "$OUT/recipe.err"
  el "bench_distill_step rc=$?"
  grep -E "^distill_step" "$OUT/recipe.log" | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
fi
if has tunecache; then
  rm -f /tmp/hlm_tune.tsv
  for run in 1 2; do
    HLM_MATMUL_AUTOTUNE=on HLM_MATMUL_AUTOTUNE_CACHE=/tmp/hlm_tune.tsv timeout 200 /tmp/hlm/bin/bench_distill_step \
      --shape qwen3-4b --precision bf16 --rows 16 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
      --loss-chunking 2048xfull --steps 1 --warmup 1 > "$OUT/tunecache_$run.log" 2>&1
    el "tunecache run $run rc=$? ($(wc -l < /tmp/hlm_tune.tsv) lines in the cache)"
  done
  cp /tmp/hlm_tune.tsv "$OUT/tunecache.tsv"
  # The first step's loss only: a forward of the same weights (deterministic); the gradients are not promised bit for
  # bit across processes (cuDNN's attention backward accumulates dQ with atomics), so neither is what follows.
  first_loss() { grep '^step 0' "$1" | grep -o '\[loss [^,]*'; }
  [ -n "$(first_loss "$OUT/tunecache_1.log")" ] &&
    [ "$(first_loss "$OUT/tunecache_1.log")" = "$(first_loss "$OUT/tunecache_2.log")" ] &&
    echo "tunecache: the two processes' first losses are equal bit for bit" || echo "tunecache: FIRST LOSSES DIFFER"
  grep -E "^step|^distill_step" "$OUT"/tunecache_*.log | cut -c1-160
fi
el done
