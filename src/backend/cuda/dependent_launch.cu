// dependent_launch_enabled (dependent_launch.cuh): HLM_PDL read once.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/dependent_launch.cuh"
#include "core/error.h"

namespace hlm::cuda {

namespace {

// An on/off environment switch, on when unset or empty.
bool switch_on(const char* name) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0' || std::strcmp(e, "on") == 0 || std::strcmp(e, "1") == 0) return true;
  if (std::strcmp(e, "off") != 0 && std::strcmp(e, "0") != 0) throw_input_error(name, "=", e, ": expected on or off");
  return false;
}

}  // namespace

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
    const bool want = switch_on("HLM_PDL");
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
