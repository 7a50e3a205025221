#!/usr/bin/env bash
# Lightning-on-CUDA device call: op tests, bailing model tests, MoE / Mamba-2 regressions. Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-140}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
mkdir -p /tmp/hlm && tar xJf out/coord/lightning/bins.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt 2>&1
run() {  # name, binary, filter
  [ -x /tmp/hlm/bin/$2 ] || { echo "== $1: no $2 in this pack"; return; }
  echo "== $1 (left $(left) s)"; timeout $(left) /tmp/hlm/bin/$2 --gtest_filter="$3" > $OUT/$1.log 2>&1; echo "rc=$?" >> $OUT/$1.log
  grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $OUT/$1.log | tail -12
}
run ops test_cuda_ops 'SimpleGlaCuda.*:MoeDispatchCuda.*'
run models test_cuda_models 'CudaBailing.*'
run regress_models test_cuda_models 'CudaMoe.*:CudaMamba2.*'
run regress_ops test_cuda_ops 'MoeGroupedGemmCuda.*:Mamba2SsdCuda.ChunkedAndRecurrentF32'
echo "elapsed $(( $(date +%s) - START )) s"
grep -hE '^\[(engine|time)\]|^\[check\] cuda|FAILED|Failure|error' $OUT/models.log $OUT/ops.log | grep -v '^\[check\] simple_gla\|^\[check\] moe' | head -60
