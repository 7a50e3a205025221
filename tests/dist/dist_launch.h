// Shared pieces of the data-parallel tests: how to start `mpirun` (and `srun`) on the 2-core CI machine
// (oversubscribed, as root when CI runs as root, shared memory without the single-copy mechanism containers often
// forbid), one thread per rank, and a wall-clock bound on every launch.
#pragma once
#include <string>

#include "dist/communicator.h"
#include "support/run_binary.h"

namespace hlm::test {

// Whether multi-rank tests can run here: the build has MPI and `mpirun` is on PATH.
inline bool mpirun_usable() {
  return communicator_mpi_available() && std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

// What every launch of these tests starts with: one thread per rank, shared memory without the single-copy
// mechanism, and the wall-clock bound (the launcher follows).
inline std::string launch_env_and_timeout() {
  return "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none timeout -k 5 120 ";
}

// The mpirun prefix (append "-np N", the program and its arguments, or an MPMD list).
inline std::string mpirun_prefix() {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
         "OMPI_MCA_hwloc_base_binding_policy=none " +
         launch_env_and_timeout() + "mpirun --oversubscribe --bind-to none ";
}

// The srun prefix for `ranks` ranks started through Slurm's PMIx plugin (no mpirun), as docs/distributed.md says to
// launch under Slurm; --overcommit for more ranks than the node's CPUs.
inline std::string srun_prefix(int ranks) {
  return launch_env_and_timeout() + "srun --mpi=pmix --kill-on-bad-exit=1 --overcommit -n " + std::to_string(ranks) +
         " ";
}

}  // namespace hlm::test
