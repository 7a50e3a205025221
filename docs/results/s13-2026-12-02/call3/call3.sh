#!/usr/bin/env bash
# Session 13, call 3 (binaries of dd73f77 built here; c3.txz): the new defaults verified on the GPU — the q/k launch
# split per KV group (on), GEMVs as programmatic dependent launches (on), attention engine auto (cuDNN) — by the op
# tests of the kernels they touch and the engine/model tests (parity with the CPU engine and full forward, HF ids,
# graphs, bf16, MoE), then one batch-1 decode figure at the defaults.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c3.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
timeout 90 $B/test_cuda_ops --gtest_filter='MatmulCuda.*:QkNormRopeCuda.*:RmsnormCuda.*:SwigluCuda.*:AttentionCacheCuda.*:AttentionCuda.*:AttentionCudnn*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/ops.log | head -12
timeout 150 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaBf16*:CudaQwen35*:CudaModelForward*:CudaMoe*:CudaGenerate*:CudaTrain*' > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/models.log | head -20
timeout 60 $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on --out $R/b1 > $R/b1.log 2>&1; el "b1 rc $?"
grep -hE "^\s*\| qwen" $R/b1.log | head -1 | cut -c1-120
tar czf $OUT/logs.tgz -C $OUT r
