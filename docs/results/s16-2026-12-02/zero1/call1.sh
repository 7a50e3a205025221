#!/usr/bin/env bash
# zero1, device call 1 (issue #25 item 2: ZeRO-1 with the fp32 masters sharded in the bf16 mode; adam8 sharded).
# 1. test_dist_cuda, the new tests first (ShardedMastersEqualWholeMasters, ShardedMastersHoldLessMemory,
#    Adam8IsShardedInWholeBlocks), then the earlier GpuDataParallel tests.
# 2. test_cuda_models --gtest_filter='CudaMemoryPlans.*' (CudaAdamW now builds without state for 8-bit moments too;
#    cuda_download_bf16_masters got a parameter).
# Budget: the script stops itself (BUDGET seconds in all; `timeout` on every command). MPI/NCCL set-up as
# docs/results/s15-2026-12-02/ddpoverlap/call1.sh.
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-230}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
R=$OUT/r; mkdir -p $R /tmp/hlm
tar xJf out/coord/zero1.txz -C /tmp/hlm
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
NEW='GpuDataParallel.ShardedMasters*:GpuDataParallel.Adam8*'
timeout $(( $(left) - 70 )) /tmp/hlm/bin/test_dist_cuda --gtest_filter="$NEW" > $R/tests_new.log 2>&1
echo "rc $?" >> $R/tests_new.log
echo "new tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |largest|Failure|rc |device memory|^(whole|sharded): memory" $R/tests_new.log | head -60
timeout $(( $(left) - 35 )) /tmp/hlm/bin/test_dist_cuda --gtest_filter="-$NEW" > $R/tests_old.log 2>&1
echo "rc $?" >> $R/tests_old.log
echo "earlier tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |largest|Failure|rc " $R/tests_old.log | head -40
timeout $(( $(left) - 3 )) /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaMemoryPlans.*' > $R/memory_plans.log 2>&1
echo "rc $?" >> $R/memory_plans.log
echo "memory plan tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |Failure|rc " $R/memory_plans.log | head -20
