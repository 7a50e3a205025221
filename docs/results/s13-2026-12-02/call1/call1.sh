#!/usr/bin/env bash
# Session 13, call 1 (binaries built here; c1.txz). In order, each stage skipped when the call's budget is short:
#   1. the whole CUDA suite (test_cuda_ops, test_cuda_models) with the attention engine's new default (auto: cuDNN
#      where it loads; HLM_CUDNN_LIB names torch's cuDNN 9), training graph capture included;
#   2. batch-1 decode A/B, qwen3_4b, L 1024, bf16, graphs, one variable at a time: baseline (HLM_QK_FUSE=off,
#      HLM_PDL=off), the fused q/k launch split per KV group (HLM_QK_FUSE=on), programmatic dependent launch of the
#      GEMVs (HLM_PDL=on), both, both + the folded decode merge (HLM_DECODE_MERGE=fused); then olmo_hybrid_7b
#      baseline vs all on.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-520}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c1.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 200 $B/test_cuda_ops > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|refused" $R/ops.log | head -20
timeout 240 $B/test_cuda_models > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|refused" $R/models.log | head -30
grep -hE "tests? from .* total\)" $R/ops.log $R/models.log | sort -t'(' -k2 -n -r | head -5
pack
G="--models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on"
run_ab() {  # name, env..., then the model args
  local n=$1; shift
  [ $(left) -gt 40 ] || { el "skip $n"; return; }
  env "$@" timeout 90 $B/bench_generate $G --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| qwen|^\s*\| olmo" $R/$n.log | head -1 | cut -c1-120
}
run_ab base HLM_QK_FUSE=off HLM_PDL=off
run_ab qk HLM_QK_FUSE=on HLM_PDL=off
run_ab pdl HLM_QK_FUSE=off HLM_PDL=on
run_ab qk_pdl HLM_QK_FUSE=on HLM_PDL=on
run_ab all HLM_QK_FUSE=on HLM_PDL=on HLM_DECODE_MERGE=fused
run_ab base2 HLM_QK_FUSE=off HLM_PDL=off
pack
G="--models olmo_hybrid_7b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on"
run_ab h_base HLM_QK_FUSE=off HLM_PDL=off
run_ab h_all HLM_QK_FUSE=on HLM_PDL=on HLM_DECODE_MERGE=fused
pack
