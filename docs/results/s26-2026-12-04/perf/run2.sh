#!/usr/bin/env bash
# Session 26, perf call B: the peer's 0.86B step again, then ours twice (was call A's 435-ms peer a fluke?).
# The binaries (hybridlm, bench_distill_step, the tracer: 31 MB as .txz) and .anchors exceed one call's 64-MiB tree with
# the repo, so the .txz went in three parts: two quick staging calls copied p_aa and p_ab into /tmp/stage on the warm
# machine; this call carried p_ac (out/s3) and .anchors.
set -u
START=$(date +%s); el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa /tmp/stage/p_ab out/s3/p_ac | tar xJ -C /tmp/hlm || { el "unpack failed"; exit 3; }
export LD_LIBRARY_PATH=/tmp/hlm/lib
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) \
  && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader
el "peer (WITH_FLA=1 STRONG=1 hf_distill, default shape)"
WITH_FLA=1 STRONG=1 timeout 380 python3 .anchors/peer_probe.py hf_distill > $OUT/peer_086b_2.log 2>&1; echo "peer rc $?"
grep -E 'hf_distill|took' $OUT/peer_086b_2.log | cut -c1-400
for r in c d; do
  el "ours $r"
  timeout 100 /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 5 > $OUT/ours_086b_$r.log 2>&1; echo "rc $?"
  grep -E '^distill_step' $OUT/ours_086b_$r.log | cut -c1-300
done
el done
