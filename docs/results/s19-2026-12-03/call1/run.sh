#!/usr/bin/env bash
# Session 19, device call 1 (after a staging call that copied out/coord/s19/a/part_aa to /tmp/stage/): the whole CUDA
# suites at HEAD (lightning on CUDA for the first time, the review refactors, the warp-per-block 8-bit AdamW), the
# 8-bit AdamW kernel before/after, and the 4B lean distillation step at micro-batches 2, 4, 8 (its host setup and
# attach overlap the tests; its steps run alone). Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-430}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
cat /tmp/stage/part_aa out/coord/s19/b/part_ab > /tmp/all.txz && mkdir -p /tmp/hlm && tar xJf /tmp/all.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
el "unpacked"
rm -f /tmp/gate
HLM_PROFILE_STEP=1 HLM_BENCH_TIME_AFTER=/tmp/gate timeout $(( BUDGET - 10 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
  --memory-plan lean --precision bf16 --rows 8 --micro 2,4,8 --seq 1024 --steps 3 > $OUT/distill_4b.log 2>&1 &
BENCH=$!
suite() {  # name, binary, [filter]
  el "$1"; timeout $(( $(left) - 60 )) /tmp/hlm/bin/$2 ${3:+--gtest_filter=$3} > $OUT/$1.log 2>&1; echo "rc=$?" >> $OUT/$1.log
  grep -E '^\[  FAILED  \]|tests ran|^rc=' $OUT/$1.log | tail -15
}
suite ops test_cuda_ops
suite models test_cuda_models
suite dist test_dist_cuda
el "adamw8 kernel, old then new, twice"
for b in bench_cuda_kernels_old bench_cuda_kernels bench_cuda_kernels_old bench_cuda_kernels; do
  echo -n "$b: "; timeout 60 /tmp/hlm/bin/$b adamw8 2>&1 | grep adamw8
done | tee $OUT/adamw8.log
touch /tmp/gate; el "gate opened"
wait $BENCH; echo "bench rc $?" >> $OUT/distill_4b.log
grep -E "^setup|^attach|^waited|^distill_step|profile +adamw|activations|rror|what" $OUT/distill_4b.log | cut -c1-250 | head -60; grep -E "profile +teacher" $OUT/distill_4b.log | tail -3
grep -hE '^\[(engine|time)\]|^\[check\] cuda' $OUT/models.log $OUT/ops.log | head -40
el "done"
