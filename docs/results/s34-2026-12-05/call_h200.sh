#!/usr/bin/env bash
# Session 34's H200 (or H100) calls for [perf] #20 items 4 and 1. Call A carries out/carry/all.txz.part.00 (piece one of
# bench_distill_step + bench_cuda_kernels (+ libhlm_kernel_trace.so for the trace part), packed with PIECE_MB=auto
# (13 MB pieces: the tracked tree is 48.9 MB as tar, so the six programs' 18.3-MB pieces of session 33 no longer fit
# beside it) with `mkdir -p /tmp/keep && cp out/carry/all.txz.part.00 /tmp/keep/`; the first call running this
# script carries out/carry/all.txz.part.01 and out/carry/anchors.txz.
# PARTS (comma list), run in this order, each only if its expected time fits in what is left of BUDGET s:
#   recipe     ours under the seed's recipe (one optimizer step per 96 × 1024 tokens: --rows 96 --micro $MICRO (8;
#              2 on an H100's 80 GB, the seed's own micro-batch) --recompute none --loss-chunking 2048xfull, the later micro-batches' weight gradients through the fp32 scratch or
#              the bf16 epilogue), then the peer's optimizer step alone (peer_optimizer_time.py) (~250 + ~60 s)
#   peer_step  the peer's step of $PEER_ROWS rows (8; 2 on an H100), HF + FLA best setup without checkpointing
#              (peer_probe.py hf_distill)                                                                   (~250 s)
#   trace      one 8-row step at micro-batch $MICRO under the CUPTI kernel tracer (loss_chunking_check.sh PARTS=trace;
#              needs libhlm_kernel_trace.so in the pack: PIECE_MB=auto bash tools/device/pack_binaries.sh
#              out/carry/all.txz build-gpu/bench/bench_distill_step build-gpu/bench/bench_cuda_kernels
#              build-gpu/tools/profile/libhlm_kernel_trace.so)                                              (~150 s)
#   kernels    loss_chunking_check.sh PARTS=kernels: the chunked LM-head KL alone by chunking (bench_cuda_kernels
#              lmhead, beside the step's loss phase) and item 1's B1×T16384 with the peer's all-ones output gradient
#              (attn_engines --d-out-ones); then the peer's SDPA backends (peer_probe.py sdpa)          (~120 + ~90 s)
set -u
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
has() { case ",${PARTS:-recipe,peer_step,trace,kernels}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry/all.txz.part.01 out/carry/anchors.txz; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
if [ ! -x /tmp/hlm/bin/bench_distill_step ]; then
  mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
ls /tmp/hlm/bin
[ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz || exit 3
# loss_chunking_check.sh with this script's settings; the arguments are more VAR=value settings (PARTS first).
check() { env OUT="$OUT" MICRO="${MICRO:-8}" RECOMPUTE=none CHUNKINGS=2048xfull "$@" bash tools/device/loss_chunking_check.sh; }
if has recipe && [ "$(left)" -ge 300 ]; then
  check PARTS=step,peer_opt ROWS=96 DW_PATHS=overwrite,epilogue STEPS=2 STEP_TIMEOUT=$(( $(left) - 90 ))
  mv "$OUT/loss_chunking.tgz" "$OUT/recipe.tgz"
fi
if has peer_step; then
  echo "[$(( $(date +%s) - T0 )) s] peer step, $(left) s left"
  if [ "$(left)" -ge 270 ]; then  # ~250 s in session 31 (two 4B HF models built, FLA's kernels compiled)
    SHAPE=qwen3-4b ROWS=${PEER_ROWS:-8} WITH_FLA=1 STRONG=1 timeout $(( $(left) - 5 )) python3 -u .anchors/peer_probe.py hf_distill \
      > "$OUT/peer_hf_distill.log" 2>&1; echo "rc=$?"
    grep -E 'hf_distill|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
  else echo "peer step skipped: too little time left in this call"; fi
fi
if has trace && [ "$(left)" -ge 170 ]; then
  check PARTS=trace DW_PATHS=overwrite STEP_TIMEOUT=$(( $(left) - 10 ))
  mv "$OUT/loss_chunking.tgz" "$OUT/trace.tgz"
fi
if has kernels && [ "$(left)" -ge 250 ]; then
  check PARTS=kernels
  mv "$OUT/loss_chunking.tgz" "$OUT/kernels.tgz"
  timeout $(( $(left) - 5 )) python3 -u .anchors/peer_probe.py sdpa > "$OUT/peer_sdpa.log" 2>&1; echo "rc=$?"
  grep -E 'sdpa' "$OUT/peer_sdpa.log" | cut -c1-300
fi
echo "[$(( $(date +%s) - T0 )) s] done"
