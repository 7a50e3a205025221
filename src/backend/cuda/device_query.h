// CUDA device query: lists the visible GPUs. Returns an empty list (never throws) when no driver or GPU is present,
// so CPU-only machines with nvcc installed still run every command.
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

}  // namespace hlm
