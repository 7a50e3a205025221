#!/usr/bin/env bash
# mpi_env.sh: source on the GPU machine before running packed MPI/NCCL programs (test_dist_cuda, hybridlm with ranks):
# adds the PyTorch environment's NCCL when the system has none, and, when the machine has its own Open MPI (mpirun),
# moves the packed Debian MPI libraries aside so the machine's are used (the packed ones do not talk to its mpirun).
# Sets MPIRUN (empty when none). The same steps as the session 13-18 call scripts under docs/results/.
if ! ldconfig -p | grep -q libnccl.so.2; then
  nccl_dir=$(python3 -c 'import os, nvidia.nccl as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nccl_dir
fi
MPIRUN=$(command -v mpirun || true)
if [ -n "$MPIRUN" ]; then
  mpi_lib=$(dirname "$(dirname "$(readlink -f "$MPIRUN")")")/lib
  if [ -e "$mpi_lib/libmpi.so.40" ]; then
    mkdir -p /tmp/hlm/debmpi
    mv /tmp/hlm/lib/libmpi.so.40 /tmp/hlm/lib/libopen-* /tmp/hlm/lib/libhwloc* /tmp/hlm/lib/libevent* \
      /tmp/hlm/lib/libpmix* /tmp/hlm/debmpi/ 2>/dev/null
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$mpi_lib
  fi
fi
