#!/usr/bin/env bash
# distgpu, device call 2 (issue #25): call 1 again after the one-rank reduce-scatter became a copy in the NCCL
# communicator (call 1: +4.3 % step time with NCCL self send/recv) and the test fixes (output line, tolerances).
# 1. bench_distill_step, one process: the plain device step against the data-parallel step with ONE rank through
#    NCCL and ZeRO-1 (--data-parallel off,zero1,off,zero1: alternated to see the spread), qwen3-0.6b-shaped teacher,
#    its converted student, bf16 products, fp32 plan, 8 rows x 1024 tokens in micro-batches of 2.
# 2. test_dist_cuda: one rank through nccl / host staging vs the plain GPU run; two ranks on the one GPU (mpirun,
#    host staging) vs one process; a 2-rank resume; adam8 / lean refused.
# MPI: the machine's own Open MPI when mpirun's prefix has libmpi.so.40 (its plugins match its mpirun; our packed
# Debian copy needs plugins from /usr/lib/x86_64-linux-gnu/openmpi that are not there); NCCL: the machine's.
set -u
T0=$(date +%s)
R=$OUT/r; mkdir -p $R /tmp/hlm
tar xJf out/coord/distgpu.txz -C /tmp/hlm
export LD_LIBRARY_PATH=/tmp/hlm/lib
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "mpirun: $(command -v mpirun)"; mpirun --version 2>&1 | head -2
  ldconfig -p | grep -E "libnccl|libmpi.so"
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
{ echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldd /tmp/hlm/bin/hybridlm | grep -E "nccl|mpi|open-|hwloc|pmix|not found"; } >> $R/env.txt
cat $R/env.txt
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
HYBRIDLM_GPU_COLLECTIVES=nccl timeout 90 /tmp/hlm/bin/bench_distill_step --shape qwen3-0.6b --precision bf16 \
  --memory-plan fp32 --rows 8 --micro 2 --seq 1024 --steps 7 --data-parallel off,zero1,off,zero1 > $R/overhead.log 2>&1
echo "rc $?" >> $R/overhead.log
echo "bench done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^distill_step|^data parallel|^setup|^attach|^rc|rror" $R/overhead.log
timeout 110 /tmp/hlm/bin/test_dist_cuda > $R/tests.log 2>&1; echo "rc $?" >> $R/tests.log
echo "tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |largest|Failure|rc " $R/tests.log | head -40
