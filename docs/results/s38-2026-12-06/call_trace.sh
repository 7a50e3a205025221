#!/usr/bin/env bash
# Session 38, device call 5: the 4B step's kernel trace with the forms about to become defaults (bf16 gate/up, bf16
# weight-gradient epilogue, GEMM autotune), then the recipe at a larger micro-batch ($MICRO2, default 12) if it fits.
# Carries: out/carry2/bench.txz.part.00 in an earlier call (cp to /tmp/keep), part.01 in this one.
set -u
export OUT=${OUT:-/tmp/call_out}; mkdir -p "$OUT" /tmp/keep
cp out/carry2/bench.txz.part.* /tmp/keep/ 2>/dev/null
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/bench.txz.part.* | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
env HLM_MLP_BF16_GATE_UP=on HLM_MATMUL_AUTOTUNE=on BIN=/tmp/hlm/bin OUT="$OUT" MICRO=8 RECOMPUTE=none \
  CHUNKINGS=2048xfull PARTS=trace DW_PATHS=epilogue STEP_TIMEOUT=200 bash tools/device/loss_chunking_check.sh
head -80 "$OUT"/*/trace.txt 2>/dev/null | cut -c1-160
el "recipe at micro ${MICRO2:-12}"
timeout ${RECIPE_TIMEOUT:-200} /tmp/hlm/bin/bench_distill_step --shape qwen3-4b --precision bf16 --rows 96 \
  --micro "${MICRO2:-12}" --seq 1024 --memory-plan lean --recompute none --loss-chunking 2048xfull --dw-paths epilogue \
  --mlp-gate-up bf16 --matmul-autotune on --teacher-overlap off --steps 1 --warmup 1 > "$OUT/recipe12.log" 2>&1
el "rc=$?"; grep -E "^distill_step|rror|memory" "$OUT/recipe12.log" | cut -c1-400 | tail -5
