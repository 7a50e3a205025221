#!/usr/bin/env bash
# Session 17, helper "normfold", call 1 (normfold.txz: build-normfold at 59fc42f + the norm fold, before its commit):
# batch-1 decode with each residual add + RMSNorm folded into the staging of the GEMV that reads it
# (CudaEngineOptions::norm_fold, HLM_NORM_FOLD, bench_generate --norm-fold). Op test (bytes against the separate
# launches), engine/model tests with the default options and with HLM_NORM_FOLD=always, then interleaved A/B in ONE
# process per model (same weights): qwen3_4b and olmo_hybrid_7b, B1 L1024, 128 decode steps, graphs on; traces.
# Carry limit: the pack holds a stub libicudata.so.72 (one 64-byte icudt72_dat symbol) instead of ICU's 31-MB data
# (7 MB of xz): nothing run here opens ICU data (no tokenizer); without hybridlm, the *Cli* tests are left out.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-230}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/normfold/normfold.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden
el "unpacked"
timeout 60 $B/test_cuda_ops --gtest_filter='MatmulCuda.Gemv*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|gemv residual-norm" $R/ops.log | head -8
F='CudaEngine*:CudaModelForward*:CudaBf16*:-*Cli*'
timeout 120 $B/test_cuda_models --gtest_filter="$F" > $R/models.log 2>&1; el "models (default options) rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|\[norm fold\]" $R/models.log | head -20
HLM_NORM_FOLD=always timeout 120 $B/test_cuda_models --gtest_filter="$F" > $R/models_always.log 2>&1
el "models (HLM_NORM_FOLD=always) rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED" $R/models_always.log | head -8
ab() {  # model
  [ $(left) -gt 45 ] || { el "skip $1"; return; }
  timeout 110 $B/bench_generate --models $1 --contexts 1024 --batches 1 --decode-steps 128 --cuda-graphs on \
    --norm-fold on,off,on,off,on,off --out $R/$1 > $R/$1.log 2>&1; el "$1 rc $?"
  grep -hE "^\| (qwen|olmo)" $R/$1.log | cut -d'|' -f2,3,9,10
}
ab qwen3_4b
ab olmo_hybrid_7b
trace() {  # name mode
  [ $(left) -gt 35 ] || { el "skip trace $1"; return; }
  HLM_NORM_FOLD=$2 HLM_TRACE_GRID=1 HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/$1.txt \
    timeout 60 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
    --cuda-graphs on --out $R/t_$1 > $R/t_$1.log 2>&1; el "trace $1 rc $?"
  sed -n 2,7p $R/$1.txt; sed -n 9,18p $R/$1.txt | cut -c1-170
}
trace tr_on on
trace tr_off off
el end
