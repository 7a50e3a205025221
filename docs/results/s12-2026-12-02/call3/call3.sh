#!/usr/bin/env bash
# Session 12, call 3 (binaries of ec23ab6 built here). In order, each stage skipped when the call's budget is short:
#   1. CUDA tests: the cuDNN engine (training graphs after the layout refactor; the inference context path and gather;
#      the engine-level chunked prefill against the native kernels), the fused q/k norm + RoPE + cache write and the
#      folded flash-decoding merge (helper "fuse": op tests, engine bit-identity, the engine's bf16 tests);
#   2. batch-1 decode A/B of the fusion (HLM_QK_FUSE on/off, same binary): qwen3_4b, L 1024, bf16, graphs;
#   3. prefill A/B of the attention engine: qwen3_4b, one 32K prompt in chunks of 8192, native vs cuDNN;
#   4. the [perf] distillation step, native vs cuDNN attention.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-400}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c3.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 120 $B/test_cuda_ops --gtest_filter='AttentionCudnn*:QkNormRopeCuda.*:AttentionCacheCuda.*:RmsnormCuda.*:RopeCuda.*' > $R/ops.log 2>&1; el "ops rc $?"
HLM_DECODE_MERGE=fused timeout 60 $B/test_cuda_ops --gtest_filter='AttentionCacheCuda.*' > $R/ops_merge.log 2>&1; el "ops merge-fused rc $?"
timeout 200 $B/test_cuda_models --gtest_filter='CudaEngineCudnn.*:CudaEngineFusions.*:CudaEngineBf16.*:CudaEngineGraphs.*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[cudnn\]|Failure" $R/ops.log $R/ops_merge.log $R/models.log | head -40
pack
G="--models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on"
for f in on off; do
  [ $(left) -gt 200 ] || { el "skip decode A/B $f"; continue; }
  HLM_QK_FUSE=$f timeout 100 $B/bench_generate $G --out $R/qk_$f > $R/qk_$f.log 2>&1; el "decode A/B fuse $f rc $?"
  grep -hiE "decode|ms/step" $R/qk_$f.log | tail -3 | cut -c1-220
done
pack
P="--models qwen3_4b --contexts 32768 --batches 1 --decode-steps 2 --prefill-chunk 8192"
for e in native cudnn; do
  [ $(left) -gt 110 ] || { el "skip prefill A/B $e"; continue; }
  HLM_ATTENTION_ENGINE=$e timeout 100 $B/bench_generate $P --out $R/prefill_$e > $R/prefill_$e.log 2>&1; el "prefill $e rc $?"
  grep -hiE "prefill|refused" $R/prefill_$e.log | tail -3 | cut -c1-220
done
pack
for e in native cudnn; do
  [ $(left) -gt 45 ] || { el "skip distill $e"; continue; }
  HLM_ATTENTION_ENGINE=$e timeout 60 $B/bench_distill_step --precision bf16 --steps 5 > $R/distill_$e.log 2>&1; el "distill $e rc $?"
  grep -hE "distill_step|refused" $R/distill_$e.log | tail -2 | cut -c1-240
done
pack
