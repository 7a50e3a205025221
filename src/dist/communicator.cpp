// SingleCommunicator, the launcher's environment, and the choice of host communicator (communicator.h).
#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace hlm {

void SingleCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t n) {
  if (send != recv && n > 0) std::memmove(recv, send, n * sizeof(float));
}

void SingleCommunicator::all_gather(const float* send, float* recv, size_t n) {
  if (send != recv && n > 0) std::memmove(recv, send, n * sizeof(float));
}

void SingleCommunicator::broadcast(void*, size_t, int root) {
  HLM_CHECK(root == 0, "broadcast from rank ", root, " in a single process");
}

void SingleCommunicator::abort(const std::string& message, int exit_code) {
  std::fprintf(stderr, "hybridlm: rank 0: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(exit_code);
}

namespace {

// The integer value of environment variable `name`, or `fallback` when unset; an input error when not an integer.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  HLM_CHECK_INPUT(end != v && *end == '\0' && x >= 0 && x < (1L << 30), "environment variable ", name, "='", v,
                  "' is not a rank or process count");
  return static_cast<int>(x);
}

bool env_set(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

LaunchInfo launch_info_from_env() {
  LaunchInfo info;
  if (env_set("OMPI_COMM_WORLD_SIZE")) {
    info = {true, "mpirun", env_int("OMPI_COMM_WORLD_SIZE", 1), env_int("OMPI_COMM_WORLD_RANK", 0),
            env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0)};
  } else if (env_set("SLURM_STEP_ID") && env_set("SLURM_PROCID")) {
    info = {true, "srun", env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1)), env_int("SLURM_PROCID", 0),
            env_int("SLURM_LOCALID", 0)};
  } else if (env_set("PMIX_RANK")) {
    info = {true, "pmix", -1, env_int("PMIX_RANK", 0), 0};
  } else if (env_set("PMI_RANK")) {
    info = {true, "pmi", env_int("PMI_SIZE", -1), env_int("PMI_RANK", 0), 0};
  }
  return info;
}

std::unique_ptr<Communicator> make_host_communicator() {
  const LaunchInfo info = launch_info_from_env();
  if (info.launched && communicator_mpi_available()) return make_mpi_communicator();
  HLM_CHECK_INPUT(!info.launched || info.world_size == 1, info.launcher, " started ", info.world_size,
                  " ranks, but this hybridlm was built without MPI (install Open MPI, e.g. Debian's "
                  "libopenmpi-dev, and configure with -DHYBRIDLM_MPI=ON)");
  return std::make_unique<SingleCommunicator>();
}

}  // namespace hlm
