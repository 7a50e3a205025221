// Shared pieces of the data-parallel tests: how to start `mpirun` on the 2-core CI machine (oversubscribed, as root
// when CI runs as root, shared memory without the single-copy mechanism containers often forbid), one thread per
// rank, and a wall-clock bound on every launch.
#pragma once
#include <string>

#include "dist/communicator.h"
#include "support/run_binary.h"

namespace hlm::test {

// Whether multi-rank tests can run here: the build has MPI and `mpirun` is on PATH.
inline bool mpirun_usable() {
  return communicator_mpi_available() && std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

// The mpirun prefix for `ranks` ranks (append the program and its arguments, or an MPMD list after "-np N").
inline std::string mpirun_prefix() {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
         "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none OMP_NUM_THREADS=1 "
         "OPENBLAS_NUM_THREADS=1 timeout -k 5 120 mpirun --oversubscribe --bind-to none ";
}

}  // namespace hlm::test
