// dependent_launch_enabled (dependent_launch.cuh): HLM_PDL read once.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"

namespace hlm::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("HLM_PDL");
    bool want = true;
    if (e != nullptr && *e != '\0' && std::strcmp(e, "on") != 0 && std::strcmp(e, "1") != 0) {
      if (std::strcmp(e, "off") != 0 && std::strcmp(e, "0") != 0)
        throw_input_error("HLM_PDL=", e, ": expected on or off");
      want = false;
    }
    // The launch attribute exists from compute capability 9.0 (a build for older GPUs launches the ordinary way).
    int device = 0, major = 0;
    if (!want || cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

}  // namespace hlm::cuda
