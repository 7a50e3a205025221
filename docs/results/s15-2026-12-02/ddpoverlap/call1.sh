#!/usr/bin/env bash
# ddpoverlap, device call 1 (issue #25 item 2: the gradient sums overlapped with the last micro-batch's backward).
# 1. test_dist_cuda (all of it, ~10 s on the H200 in session 13): OverlapOnAndOffAreBitIdentical (one rank through
#    nccl and host staging, ZeRO-1; mpirun -np 2 on the one GPU with host staging, ZeRO-1 and ZeRO-0: overlap on vs
#    off, losses / norms / final weights with tolerance 0) and the session-13 tests (now with the overlap on, the
#    default).
# 2. bench_distill_step, one process, one rank through NCCL: the plain device step against ZeRO-1 with the sums after
#    the backward (zero1-blocking) and overlapped (zero1), alternated twice; qwen3-0.6b-shaped teacher, its converted
#    student, bf16 products, fp32 plan, 8 rows x 1024 tokens in micro-batches of 2 (4 micro-batches), medians of 7.
# MPI/NCCL set-up as docs/results/s13-2026-12-02/distgpu/call2.sh.
set -u
T0=$(date +%s)
R=$OUT/r; mkdir -p $R /tmp/hlm
tar xJf out/coord/ddpoverlap.txz -C /tmp/hlm
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
timeout 80 /tmp/hlm/bin/test_dist_cuda > $R/tests.log 2>&1; echo "rc $?" >> $R/tests.log
echo "tests done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^\[  |largest|Failure|rc " $R/tests.log | head -40
LEFT=$(( 230 - ($(date +%s) - T0) ))
HYBRIDLM_GPU_COLLECTIVES=nccl timeout $LEFT /tmp/hlm/bin/bench_distill_step --shape qwen3-0.6b --precision bf16 \
  --memory-plan fp32 --rows 8 --micro 2 --seq 1024 --steps 7 \
  --data-parallel off,zero1-blocking,zero1,off,zero1-blocking,zero1 > $R/overhead.log 2>&1
echo "rc $?" >> $R/overhead.log
echo "bench done $(( $(date +%s) - T0 )) s" | tee -a $R/timeline.txt
grep -E "^distill_step|^data parallel|^setup|^attach|^rc|rror" $R/overhead.log
