// dependent_launch_enabled, dependent_launch_attention (dependent_launch.cuh): HLM_PDL, HLM_PDL_ATTN read once.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/dependent_launch.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace hlm::cuda {

bool dependent_launch_attention(AttentionLaunch which) {
  static const int parts = [] {  // a bit per AttentionLaunch
    if (!dependent_launch_enabled()) return 0;
    const char* e = std::getenv("HLM_PDL_ATTN");
    const std::string v = e != nullptr ? e : "";
    if (v.empty()) return static_cast<int>(AttentionLaunch::kSplit);
    if (v == "on" || v == "1") return 7;
    if (v == "off" || v == "0") return 0;
    int bits = 0;
    size_t at = 0;
    while (at <= v.size()) {
      const size_t end = std::min(v.find(',', at), v.size());
      const std::string part = v.substr(at, end - at);
      if (part == "qk") bits |= static_cast<int>(AttentionLaunch::kQk);
      else if (part == "split") bits |= static_cast<int>(AttentionLaunch::kSplit);
      else if (part == "merge") bits |= static_cast<int>(AttentionLaunch::kMerge);
      else throw_input_error("HLM_PDL_ATTN=", v, ": expected on, off or a comma list of qk, split, merge");
      at = end + 1;
    }
    return bits;
  }();
  return (parts & static_cast<int>(which)) != 0;
}

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const bool want = env_switch("HLM_PDL", true);
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
