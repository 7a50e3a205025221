#!/usr/bin/env bash
# Session 33, call 2 (prepared; no device could be started in session 33), the one call after the first piece (call 1:
# carry out/carry/all.txz.part.00, `mkdir -p /tmp/keep && cp out/carry/all.txz.part.00 /tmp/keep/`; this call carries
# out/carry/all.txz.part.01 and out/carry/anchors.txz): the binaries joined and unpacked, the peer's FLA unpacked;
# then, most important first, each under its own time limit so that the call ends within BUDGET s (default 545):
#   1. ours under the seed's recipe: bench_distill_step --rows 96 --micro 8 --recompute none, loss chunking
#      2048xfull, the later micro-batches' weight gradients through the fp32 scratch (overwrite) or cuBLASLt's bf16
#      epilogue (epilogue), 2 timed steps each (loss_chunking_check.sh PARTS=step)
#   2. the peer's optimizer step alone (peer_optimizer_time.py), for the peer's time per 8 rows under the recipe
#   3. the peer's step at 8 rows (peer_probe.py hf_distill, HF + FLA best setup, no checkpointing)
#   4. session 32's GPU tests (AdamWLeanCuda.*, CudaDwOverwrite.*) with what time is left
set -u
T0=$(date +%s); left() { echo $(( ${BUDGET:-545} - ($(date +%s) - T0) )); }
cp out/carry/all.txz.part.01 /tmp/keep/ 2>/dev/null; cp out/carry/anchors.txz /tmp/keep/ 2>/dev/null
mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm && ls /tmp/hlm/bin
[ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz
OUT=$OUT PARTS=step ROWS=96 MICRO=8 RECOMPUTE=none CHUNKINGS=2048xfull DW_PATHS=overwrite,epilogue STEPS=2 \
  STEP_TIMEOUT=$(( $(left) - 60 )) bash tools/device/loss_chunking_check.sh
echo "[$(( $(date +%s) - T0 )) s] peer optimizer"
timeout 100 python3 tools/device/peer_optimizer_time.py > "$OUT/peer_opt.log" 2>&1; echo "rc=$?"
grep -E 'peer_optimizer_step|rror' "$OUT/peer_opt.log" | cut -c1-400
echo "[$(( $(date +%s) - T0 )) s] peer step, $(left) s left"
if [ "$(left)" -ge 270 ]; then  # ~250 s in session 31 (two 4B HF models built, FLA's kernels compiled)
  SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 timeout $(( $(left) - 5 )) python3 .anchors/peer_probe.py hf_distill \
    > "$OUT/peer_hf_distill.log" 2>&1; echo "rc=$?"
  grep -E 'hf_distill|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
else echo "peer step skipped: too little time left in this call"; fi
echo "[$(( $(date +%s) - T0 )) s] tests, $(left) s left"
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
if [ "$(left)" -gt 20 ]; then
  timeout $(( $(left) / 2 )) /tmp/hlm/bin/test_cuda_ops --gtest_filter='AdamWLeanCuda.*' > "$OUT/ops.log" 2>&1
  echo "ops rc=$?"; grep -E '^\[  (PASSED|FAILED) |Failure|^\[check\]' "$OUT/ops.log" | tail -8
  timeout $(( $(left) - 3 )) /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaDwOverwrite.*' > "$OUT/models.log" 2>&1
  echo "models rc=$?"; grep -E '^\[  (PASSED|FAILED) |Failure|^\[check\]' "$OUT/models.log" | tail -8
fi
echo "[$(( $(date +%s) - T0 )) s] done"
