#!/usr/bin/env bash
# distlean, device call 2: the two lean tests that failed on their own checks in call 1, after 31cab0a (the checkpoint directory name, the memory bound).
# 1. test_dist_cuda, the new lean tests first (LeanWithZeroStage0OnSeveralRanksIsRefused, LeanIsShardedWithTheOneRankBits,
#    LeanTwoRankResumeIsExactAndOtherRankCountsAreRefused, LeanMemoryPerRankAtOneAndTwoRanks), then the earlier
#    GpuDataParallel tests (the shared ZeRO-1 code changed: pieces carry their gradient pointers, bf16 gathers).
# Budget: the script stops itself (BUDGET seconds; `timeout` on every command). MPI/NCCL set-up as
# docs/results/s16-2026-12-02/zero1/call1.sh.
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-50}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
R=$OUT/r; mkdir -p $R /tmp/hlm
tar xJf out/coord/distlean/bins.txz -C /tmp/hlm
export LD_LIBRARY_PATH=/tmp/hlm/lib
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "mpirun: $(command -v mpirun)"; mpirun --version 2>&1 | head -2
} > $R/env.txt 2>&1
if ! ldconfig -p | grep -q libnccl.so.2; then
  ND=$(python3 -c 'import os, nvidia.nccl as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$ND" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ND
fi
MR=$(command -v mpirun || true)
if [ -n "$MR" ]; then
  ML=$(dirname "$(dirname "$(readlink -f "$MR")")")/lib
  if [ -e "$ML/libmpi.so.40" ]; then
    mkdir -p /tmp/hlm/debmpi
    mv /tmp/hlm/lib/libmpi.so.40 /tmp/hlm/lib/libopen-* /tmp/hlm/lib/libhwloc* /tmp/hlm/lib/libevent* \
       /tmp/hlm/lib/libpmix* /tmp/hlm/debmpi/ 2>/dev/null
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ML
  fi
fi
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$CUDNN_DIR" ] && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
{ echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldd /tmp/hlm/bin/hybridlm | grep -E "nccl|mpi|open-|hwloc|pmix|not found"; } >> $R/env.txt
cat $R/env.txt
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
NEW='GpuDataParallel.LeanTwoRank*:GpuDataParallel.LeanMemory*'
timeout $(( $(left) - 3 )) /tmp/hlm/bin/test_dist_cuda --gtest_filter="$NEW" > $R/tests_new.log 2>&1
echo "rc $?" >> $R/tests_new.log
echo "new tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |largest|vs |Failure|rc |device memory|memory plan|lean, " $R/tests_new.log | cut -c1-400 | head -80
