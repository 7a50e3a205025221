// CUDA device query: lists the visible GPUs and says whether this build's kernels can run on device 0. Returns an
// empty list / false (never throws) when no driver or GPU is present, so CPU-only machines with nvcc installed still
// run every command and the CUDA tests skip cleanly.
#pragma once
#include <string>
#include <vector>

namespace hlm {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t total_memory_bytes = 0;
  int multiprocessors = 0;
};

std::vector<CudaDeviceInfo> cuda_devices();

// True when a driver and a GPU are present and a kernel of this build (compiled for CMAKE_CUDA_ARCHITECTURES,
// sm_90a by default) can run on device 0. Never throws; the first call probes, later calls return the cached answer.
bool cuda_available();
// Why cuda_available() is false ("no CUDA driver", "no kernel image for sm_80 ...", ...); empty when it is true.
std::string cuda_unavailable_reason();
// Free bytes on the current device (cudaMemGetInfo); 0 when the query fails. Never throws.
size_t cuda_free_memory_bytes();

}  // namespace hlm
