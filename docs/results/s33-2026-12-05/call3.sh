#!/usr/bin/env bash
# Session 33, call 3: [perf] #20 item 4 under the seed's recipe (96 x 1024 tokens per optimizer step), ours and the
# peer in one call: bench_distill_step --rows 96 --micro 8 --recompute none (one-chunk loss 2048xfull; the later
# micro-batches' weight gradients added through the fp32 scratch or in cuBLASLt's bf16 epilogue), then the peer's
# step at 8 rows (HF + FLA best setup, no checkpointing).
set -u
[ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz
OUT=$OUT PARTS=step ROWS=96 MICRO=8 RECOMPUTE=none CHUNKINGS=${CHUNKINGS:-2048xfull} DW_PATHS=overwrite,epilogue \
  STEPS=2 bash tools/device/loss_chunking_check.sh
( time SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 timeout 330 python3 .anchors/peer_probe.py hf_distill ) \
  > "$OUT/peer_hf_distill.log" 2>&1
echo "peer rc=$?"; grep -E 'hf_distill_step|real|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
