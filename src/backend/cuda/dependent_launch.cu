// dependent_launch_enabled (dependent_launch.cuh): HLM_PDL read once.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"

namespace hlm::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("HLM_PDL");
    if (e == nullptr || *e == '\0' || std::strcmp(e, "on") == 0 || std::strcmp(e, "1") == 0) return true;
    if (std::strcmp(e, "off") == 0 || std::strcmp(e, "0") == 0) return false;
    throw_input_error("HLM_PDL=", e, ": expected on or off");
  }();
  return enabled;
}

}  // namespace hlm::cuda
