#!/usr/bin/env bash
# Session 26, [perf] #20 items 3 and 4: the issue's 0.86B distillation step (bench_distill_step's default: a
# Qwen3-0.6B-shaped teacher, 28 layers, 8 x 1024 tokens, bf16) against the best peer setup IN THE SAME CALL (it was
# last measured in one call in the fifth round, before the v2 GDN kernels of sessions 23-25), with a kernel trace and
# the per-phase GPU times of our step; then our 4B step (lean plan, micro-batch 4: session 24's configuration).
# Order: the peer first on the idle GPU, then ours (plain, traced, plain again: the spread).
# Needs /tmp/hlm (bench_distill_step, libhlm_kernel_trace.so; unpacked by the NIAH call of this session, or here
# from /tmp/stage parts) and .anchors (FLA, peer_probe.py, causal_conv1d) carried. From the repo root:
#   OUT=$OUT bash docs/results/s26-2026-12-04/perf/run.sh
set -u
START=$(date +%s); BUDGET=${BUDGET:-560}
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
OUT=${OUT:-out/perf}; mkdir -p "$OUT"
if [ ! -x /tmp/hlm/bin/bench_distill_step ]; then
  mkdir -p /tmp/hlm && cat /tmp/stage/p_* | tar xJ -C /tmp/hlm || { el "no binaries"; exit 3; }
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) \
  && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
cupti="$(ls /usr/local/cuda/lib64/libcupti.so* /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* \
  /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* 2>/dev/null | head -1)"
[ -n "$cupti" ] || cupti="$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
el "CUPTI $cupti; cuDNN $HLM_CUDNN_LIB"

el "1. the peer: HF transformers + FLA kernels + Triton conv + FLA's fused LM-head KL (best setup), default shape"
WITH_FLA=1 STRONG=1 timeout $(( $(left) - 200 )) python3 .anchors/peer_probe.py hf_distill > $OUT/peer_086b.log 2>&1
echo "peer rc $?"; grep -E 'hf_distill|took' $OUT/peer_086b.log | cut -c1-400

step() {  # name, extra env..., -- args
  local name=$1; shift
  el "ours: $name"
  timeout $(( $(left) - 10 )) env "$@" > $OUT/$name.log 2>&1; echo "rc=$?" >> $OUT/$name.log
  grep -E '^attach|^distill_step|profile|^memory|rror|what|^rc=' $OUT/$name.log | cut -c1-300 | head -24
}
step ours_086b_a HLM_PROFILE_STEP=1 /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 5
step ours_086b_traced HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$OUT/trace_086b.txt HLM_TRACE_TSV=$OUT/trace_086b.tsv \
  HLM_TRACE_TOP=60 LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cupti")" LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 3
head -50 $OUT/trace_086b.txt | cut -c1-160
step ours_086b_b /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 5
step ours_4b_m4 HLM_PROFILE_STEP=1 /tmp/hlm/bin/bench_distill_step --shape qwen3-4b --memory-plan lean --precision bf16 \
  --rows 8 --micro 4 --seq 1024 --steps 3
el done
