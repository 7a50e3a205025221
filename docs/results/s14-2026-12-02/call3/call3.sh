#!/usr/bin/env bash
# Session 14, call 3 (lead3.txz: binaries of the session's HEAD, built in the lead's worktree): the whole CUDA suite
# after this session's changes to the CUDA path (cuBLASLt dlopen'ed at the first context; granitemoehybrid on CUDA:
# Mamba-2 kernels, mixer, engine pools; bailing_moe_linear's CUDA refusal), then batch-1 decode of qwen3_4b at the
# defaults (the figure the docs quote).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead3.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 170 $B/test_cuda_ops > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|tests? ran" $R/ops.log | head -12
pack
timeout 230 $B/test_cuda_models > $R/models.log 2>&1; el "models rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|tests? ran" $R/models.log | head -12
pack
timeout 40 $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 --cuda-graphs on \
  --out $R/b1 > $R/b1.log 2>&1; el "b1 rc $?"; grep -hE "^\s*\| qwen" $R/b1.log | head -1 | cut -d'|' -f2,7,9,10
pack
el end
