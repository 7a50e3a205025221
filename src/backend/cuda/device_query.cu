#include "backend/cuda/device_query.h"

#include <cuda_runtime.h>

#include <mutex>
#include <sstream>

namespace hlm {

namespace {

__global__ void probe_kernel(int* out) {
  if (out != nullptr) *out = 1;
}

// Empty when usable, else the reason. Runs the probe kernel once: a build without code for this GPU's architecture
// fails here (cudaErrorNoKernelImageForDevice) instead of in the first real op.
std::string probe_device() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return std::string("no usable CUDA driver: ") + cudaGetErrorString(status);
  }
  if (count == 0) return "no CUDA device";
  if ((status = cudaSetDevice(0)) != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaSetDevice(0) failed: ") + cudaGetErrorString(status);
  }
  cudaFuncAttributes attr{};
  if ((status = cudaFuncGetAttributes(&attr, probe_kernel)) != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::ostringstream os;
    os << "this build's kernels cannot run on device 0 (" << prop.name << ", sm_" << prop.major << prop.minor
       << "): " << cudaGetErrorString(status);
    return os.str();
  }
  probe_kernel<<<1, 1>>>(nullptr);
  if ((status = cudaDeviceSynchronize()) != cudaSuccess || (status = cudaGetLastError()) != cudaSuccess)
    return std::string("probe kernel failed: ") + cudaGetErrorString(status);
  return {};
}

const std::string& probe_result() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] { reason = probe_device(); });
  return reason;
}

}  // namespace

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount});
  }
  return out;
}

bool cuda_available() { return probe_result().empty(); }

std::string cuda_unavailable_reason() { return probe_result(); }

size_t cuda_free_memory_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

}  // namespace hlm
