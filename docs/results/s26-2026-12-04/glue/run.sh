#!/usr/bin/env bash
# Session 26, [perf] #20 item 3: the residual-gradient and RoPE changes on the H200. The CUDA op tests of the changed
# kernels (RMSNorm incl. the fused residual on the warp path and the accumulating backward, RoPE's bf16 forward), the
# model-level training tests (GPU vs CPU gradients, kept vs recomputed bit for bit, steps, graphs, memory plans, bf16),
# then the 0.86B distillation step twice and once under the kernel tracer. The binaries (test_cuda_ops,
# test_cuda_models, bench_distill_step, the tracer; 40 MB as .txz) came in three parts: two staging calls put
# vv_aa and vv_ab into /tmp/stage, this call carries vv_ac (out/v3). From the repo root: OUT=$OUT bash <this file>.
set -u
START=$(date +%s); el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/vv_aa /tmp/stage/vv_ab out/v3/vv_ac | tar xJ -C /tmp/hlm || { el "unpack failed"; exit 3; }
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) \
  && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
cupti="$(ls /usr/local/cuda/lib64/libcupti.so* 2>/dev/null | head -1)"
suite() {  # name binary filter
  el "$1"; timeout 200 /tmp/hlm/bin/$2 --gtest_filter="$3" > $OUT/$1.log 2>&1; echo "rc=$?" >> $OUT/$1.log
  grep -E '^\[  FAILED  \]|tests ran|PASSED|^rc=' $OUT/$1.log | tail -12
}
suite ops test_cuda_ops 'RmsnormCuda.*:RopeCuda.*:ResidualCuda*'
suite models test_cuda_models 'CudaModelBackward.*:CudaLmHeadLossTraining.*:CudaKeptActivations.*:CudaTrainStep.*:CudaTrainGraphs.*:CudaMemoryPlans.*:CudaBf16.*:CudaModelForward*:CudaEngine.*'
for r in a b; do
  el "step $r"
  timeout 100 env HLM_PROFILE_STEP=1 /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 5 > $OUT/step_$r.log 2>&1
  grep -E '^distill_step' $OUT/step_$r.log | cut -c1-260; grep -E '^profile' $OUT/step_$r.log | tail -2
done
el "traced"
HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$OUT/trace.txt HLM_TRACE_TOP=45 timeout 100 \
  env LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cupti")" LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  /tmp/hlm/bin/bench_distill_step --precision bf16 --steps 3 > $OUT/step_traced.log 2>&1
grep -E '^distill_step' $OUT/step_traced.log | cut -c1-200; grep -E 'residual_add|rope_forward|rmsnorm|kernels  ' $OUT/trace.txt | cut -c1-150
el done
