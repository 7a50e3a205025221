#!/usr/bin/env bash
# Session 28 ([infer] #18), call B: the pipelined GEMV as the default (call A's winner), the q/k norm cluster split
# (HLM_QK_CLUSTER=off for one block per token) and the decode attention's three launches as programmatic dependents
# (q/k norm + RoPE + cache write, the split kernel with its first K/V tile loaded before the wait, the merge;
# HLM_PDL_ATTN=off for ordinary launches).
#   1. op tests of every kernel touched; the whole CUDA model suite but the CLI tests (the call carries no hybridlm);
#   2. batch-1 decode, L 1024, 128 steps, graphs: defaults against each switch, interleaved; batch 64 against
#      HLM_PDL_ATTN=off; one traced batch-1 run of olmo_hybrid_7b at the defaults.
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:  OUT=$OUT bash .../callB.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
W=/tmp/callB; rm -rf $W; mkdir -p "$W"
finish() { tar czf "$OUT/callB.tgz" -C /tmp callB; }
trap finish EXIT
timeout 90 "$B/test_cuda_ops" --gtest_filter='MatmulCuda.*:QkNormRopeCuda.*:AttentionCacheCuda.*:RmsnormCuda.*' \
  > "$W/ops.log" 2>&1; echo "ops rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$W/ops.log"
run() {  # label model batch env...
  local label=$1 m=$2 b=$3; shift 3
  timeout 100 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches $b --decode-steps 128 \
    --cuda-graphs on --out "$W/bg_${m}_b${b}_$label" > "$W/bg_${m}_b${b}_$label.log" 2>&1
  echo "$m B$b $label rc $?: $(grep -E "^\| $m " "$W/bg_${m}_b${b}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
run default olmo_hybrid_7b 1 HLM_X=1
run pdl_attn_off olmo_hybrid_7b 1 HLM_PDL_ATTN=off
run qk_cluster_off olmo_hybrid_7b 1 HLM_QK_CLUSTER=off
run gemv_v1 olmo_hybrid_7b 1 HLM_GEMV_KERNEL=v1
run default2 olmo_hybrid_7b 1 HLM_X=1
run default olmo3_7b 1 HLM_X=1
run pdl_attn_off olmo3_7b 1 HLM_PDL_ATTN=off
run gemv_v1 olmo3_7b 1 HLM_GEMV_KERNEL=v1
run default2 olmo3_7b 1 HLM_X=1
run default qwen3_4b 1 HLM_X=1
run pdl_attn_off qwen3_4b 1 HLM_PDL_ATTN=off
run gemv_v1 qwen3_4b 1 HLM_GEMV_KERNEL=v1
run default2 qwen3_4b 1 HLM_X=1
run default qwen3_4b 64 HLM_X=1
run pdl_attn_off qwen3_4b 64 HLM_PDL_ATTN=off
run default olmo_hybrid_7b 64 HLM_X=1
run pdl_attn_off olmo_hybrid_7b 64 HLM_PDL_ATTN=off
timeout 100 env HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_GRID=1 HLM_TRACE_TOP=40 \
  HLM_TRACE_OUT="$W/tr_olmo_hybrid_7b.txt" LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  "$B/bench_generate" --models olmo_hybrid_7b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on \
  --out "$W/bgt" > "$W/bgt.log" 2>&1; echo "trace rc $?"; head -32 "$W/tr_olmo_hybrid_7b.txt" | cut -c1-200
timeout 280 "$B/test_cuda_models" --gtest_filter='-*Cli*' > "$W/models.log" 2>&1; echo "models rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|\[fusions\] |\[head gemv\]" "$W/models.log" | head -40
