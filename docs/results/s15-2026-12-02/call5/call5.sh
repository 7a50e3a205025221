#!/usr/bin/env bash
# Session 15, call 5: is the bf16 distillation step deterministic run to run? The ddpoverlap helper saw two plain
# steps of one process (same inputs, same weights) give the same loss and different gradient norms. Two plain
# steps per process (--data-parallel off,off re-creates the trainer on the same weights), attention through the
# native kernels vs the cuDNN engine (the default, auto), printed as hex floats. Ran (H200, 71 s): both engines
# reproduced every step's loss and norm bit for bit across the two entries (r/native.log, r/cudnn.log).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead5.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
for eng in native cudnn; do
  HLM_ATTENTION_ENGINE=$eng timeout 80 /tmp/hlm/bin/bench_distill_step --shape qwen3-0.6b --precision bf16 \
    --memory-plan fp32 --rows 4 --micro 2 --seq 512 --steps 1 --data-parallel off,off > $OUT/r/$eng.log 2>&1
  el "$eng rc $?"; grep -E "^step" $OUT/r/$eng.log | sed 's/.*\[/[/'
done
el end
