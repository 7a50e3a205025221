#!/usr/bin/env bash
# Session 27 ([infer] #18): where the batch-1 decode step of the two Table-8 7B shapes goes. Per model: one untraced
# bench_generate process (L 1024, B 1, 128 decode steps, CUDA graphs: the figure), then one under the CUPTI kernel
# tracer (32 decode steps inside the profiler range; one row per kernel and launch shape). From the repository root
# on the GPU machine, binaries unpacked in /tmp/hlm:
#   OUT=$OUT bash docs/results/s27-2026-12-04/decode/trace.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib
mkdir -p "$OUT/decode"
for m in ${MODELS:-olmo_hybrid_7b olmo3_7b}; do
  timeout 150 "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 --cuda-graphs on \
    --out "$OUT/decode/bg_$m" > "$OUT/decode/bg_$m.log" 2>&1; echo "$m untraced rc $?"
  grep -E "^\|" "$OUT/decode/bg_$m.log" | head -4
  timeout 150 env HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_GRID=1 HLM_TRACE_TOP=60 \
    HLM_TRACE_OUT="$OUT/decode/tr_$m.txt" HLM_TRACE_TSV="$OUT/decode/tr_$m.tsv" LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
    "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on \
    --out "$OUT/decode/bgt_$m" > "$OUT/decode/bgt_$m.log" 2>&1; echo "$m traced rc $?"
  head -30 "$OUT/decode/tr_$m.txt" 2>/dev/null
done
